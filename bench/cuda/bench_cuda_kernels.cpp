// GPU kernel benchmarks (one JSON line per measurement, see docs/cuda.md):
//  - ceilings: device-to-device copy bandwidth (bytes read + written) and bf16 GEMM TFLOP/s
//    (8192^3 through the backend's cuBLASLt path) on random data;
//  - prefill attention at the Llama-3-8B shape (32 q heads, 8 kv heads, d 128, pages of 64) for one
//    sequence of T tokens: dense (every head causal) and lserve (half the kv heads streaming with
//    128 sink tokens and an 8192-token window): the mma.sync kernel with both tile shapes and the
//    wgmma kernel with both key blocks ("kernel", "warps", "key_block" fields), per K/V page
//    format (--kv-formats, field kv_format: quantized pages run the kernels that read them,
//    "mma" and "wgmma-ws");
//  - decode attention for batches of B tokens at context C: dense, and lserve (4 kv heads with
//    pages chosen by the GPU page selector under a 4096-token budget, 4 streaming heads with 128
//    sinks and a 256-token window), per K/V page format (--kv-formats bf16,fp8,int8,int4, field
//    kv_format: the quantized formats run the decode kernel's quantized instantiations, the same
//    cp.async pipeline over code rows); the bytes the kernel must read per format (bf16 rows, or
//    the codes plus per-token scales of quantized pages: "bytes"), the achieved bandwidth on
//    those bytes ("gbps") and its share of the measured copy bandwidth ("copy_fraction"). Decode
//    calls are captured in a CUDA graph of many calls that rotate over several copies of the KV
//    cache (more bytes than the L2 holds), and timed by replaying it. The page selection is timed
//    eagerly (select_us, one call, host gaps included) and as a graph of 20 calls
//    (select_graph_us). --decode-max-splits,
//    --decode-min-blocks, --decode-l2-prefetch, --decode-prewait-prefetch, --decode-ticketed and
//    --decode-chunk-blocks time each case under every combination of those
//    AttentionOptions (max_splits and min_blocks 0 and prewait_prefetch -1: the heuristics and
//    defaults; the switches default to AttentionOptions', so ticketed splits are off unless asked
//    for, as in the engine); --decode-rounds R times the combinations R times in turn (one row
//    each), so variants compare on alternating runs.
//    --decode-trace FILE writes every case's per-block timestamps (decode and reduction kernels,
//    the last of a graph of calls) to FILE as a table; built with -DLS_DECODE_TRACE_LANDINGS
//    (decode_trace.h) also "land" rows, when each decode block's key blocks were ready.
//  - linear layers at decode shapes (M = 1, 8, 32 rows; the Llama-3-8B weight shapes): the bytes
//    of the weight read per call against the copy bandwidth, timed as a graph of calls that
//    rotate over enough weight copies to defeat the L2.
//  - FP8 weights (section "fp8", bench_fp8_linear.cpp, not in the default sections): bf16 against
//    e4m3 weights at the Llama-3-8B shapes for --fp8-m rows: copy fraction of the decode GEMV,
//    TFLOP/s of the prefill GEMM.
//  - cuBLASLt's algorithms (section "lt-algos", bench_fp8_algos.cpp, not in the default
//    sections): every heuristic algorithm's time for bf16 and the e4m3 forms at prefill sizes,
//    and the passes around the unscaled FP8 product.
//  - page selection (section "select", bench_select.cpp, not in the default sections): one level
//    against two levels (a coarse level per --summary-group-pages pages) at --batches and
//    --select-contexts, on random keys and on keys with planted hot spans (--select-data), with
//    the fine summaries on the device and in pinned host memory (--select-fine).
//  - shared-prefix decode (section "shared-prefix", bench_shared_prefix.cpp, not in the default
//    sections): B sequences sharing a --shared-prefix-tokens prefix plus --shared-prefix-suffix
//    own tokens each, the ordinary decode kernel against shared-prefix attention.
//  - small per-layer ops at decode and prefill sizes (section "small", Llama-3-8B shapes): rmsnorm
//    and add_rmsnorm (hidden 4096), rope of q (32 heads) and of k (8 heads), silu_mul (inter
//    14336), kv_append and page_summary_update (8 kv heads, pages of 64, logical pages of 16, 32K
//    context) and kv_append_index, the two in one launch (what a selecting policy's layer runs),
//    for T tokens: T <= 32 are T decode sequences of one token, larger T one prefill
//    chunk. Each op is captured as a graph of many calls; "us" is the replay time per call, so
//    it is what a captured decode step pays per launch of that op.
// Usage: bench_cuda_kernels [--out FILE] [--sections copy,gemm,linear,prefill,decode,small]
//        [--prefill-tokens 8192,32768,131072] [--prefill-kernels mma,wgmma(,wgmma-ws,wgmma-pp,...;
//         -cp: cp.async producer only, -tma: TMA for every span)]
//        [--batches 1,8,32]
//        [--contexts 8192,16384,32768,65536,131072,262144] [--policies dense,lserve]
//        [--linear-m 1,8,32] [--small-tokens 1,8,512,4096] [--decode-max-splits 0,16,32]
//        [--decode-l2-prefetch -1,1,0 (-1: by the device)] [--decode-prewait-prefetch 0,2,4]
//        [--decode-min-blocks 0,2,8] [--decode-ticketed -1,0,1] [--decode-chunk-blocks 1,2]
//        [--sections select --select-contexts 32768,131072,262144 --select-data random,planted
//         --select-fine device,host --summary-group-pages 16]
//        [--sections shared-prefix --shared-prefix-batches 8,32 --shared-prefix-tokens 32768
//         --shared-prefix-suffix 512 --shared-prefix-split 1024]
//        [--decode-rounds 3] [--decode-trace FILE] [--kv-formats bf16,fp8,int8,int4]
//        [--sections fp8 --fp8-m 1,2,4,8,32,512,4096,16384]
//        [--sections lt-algos --lt-algos-m 4096,16384 --lt-algos-max 8]

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_fp8_algos.h"
#include "bench_fp8_linear.h"
#include "bench_select.h"
#include "bench_shared_prefix.h"
#include "kernels/cuda/gemv.h"
#include "kernels/kv_quant.h"

namespace ls::bench {
namespace {

using kernels::HeadMode;

constexpr int32_t kQHeads = 32, kKvHeads = 8, kD = 128, kPage = 64;
constexpr int32_t kSinkTokens = 128, kSinkPages = 2;
constexpr int64_t kRowBytes = int64_t{kD} * 2;  // one K (or V) row, bf16

struct Device {
  CudaBackend* b = nullptr;
  cudaStream_t stream = nullptr;
  int64_t l2_bytes = 0;
  std::string policies = "dense,lserve";  // which attention cases prefill and decode run
  bool wants(bool lserve) const {
    return policies.find(lserve ? "lserve" : "dense") != std::string::npos;
  }
};

Buffer alloc(Device& dev, int64_t bytes) {
  auto buf = dev.b->allocate(bytes);
  if (!buf.ok()) {
    std::fprintf(stderr, "bench: %s\n", buf.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*buf);
}

Buffer upload(Device& dev, const std::vector<int32_t>& v) {
  Buffer buf = alloc(dev, static_cast<int64_t>(v.size() * 4));
  dev.b->copy_bytes(buf.data(), v.data(), static_cast<int64_t>(v.size() * 4));
  return buf;
}

void fill(Device& dev, void* p, int64_t elems, uint64_t seed, float lo = -1, float hi = 1) {
  die_on(fill_uniform_bf16(p, elems, seed, lo, hi, dev.stream), "fill");
}

// A pool over bf16-sized buffers; `fmt` != kNone reads them as pages of that quantized format
// (smaller pages: the buffers hold them too).
kernels::PagedKvPool pool_view(void* k, void* v, int32_t blocks, int32_t hpb,
                               kernels::KvQuant fmt = kernels::KvQuant::kNone) {
  kernels::PagedKvPool p;
  p.k = k;
  p.v = v;
  p.dtype = fmt == kernels::KvQuant::kNone ? DType::kBF16 : DType::kU8;
  p.quant = fmt;
  p.num_blocks = blocks;
  p.heads_per_block = hpb;
  p.page_tokens = kPage;
  p.head_dim = kD;
  return p;
}

// Params of the Llama-3-8B attention shape over bf16 q / out: `tokens` query tokens of `seqs`
// sequences (q_indptr / kv_lens device arrays of seqs + 1 / seqs entries), head modes and slots
// per kv head; pools and block tables are the caller's.
kernels::AttentionParams shape_params(void* q, void* out, int64_t tokens, int64_t seqs,
                                      const Buffer& indptr, const Buffer& lens, const Buffer& modes,
                                      const Buffer& slots) {
  kernels::AttentionParams p;
  p.q = q;
  p.out = out;
  p.q_dtype = DType::kBF16;
  p.num_tokens = static_cast<int32_t>(tokens);
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kD;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.num_seqs = static_cast<int32_t>(seqs);
  p.q_indptr = indptr.as<int32_t>();
  p.kv_lens = lens.as<int32_t>();
  p.head_mode = modes.as<int32_t>();
  p.head_slot = slots.as<int32_t>();
  return p;
}

// lserve's streaming heads: their pool, block table (stride entries per sequence), kSinkPages
// sink pages then a ring of `rings` pages per sequence, kSinkTokens sinks and `locals` window.
void set_streaming(kernels::AttentionParams& p, const kernels::PagedKvPool& pool,
                   const Buffer& table, int32_t stride, const Buffer& rings, const Buffer& locals) {
  p.streaming = pool;
  p.streaming_blocks = table.as<int32_t>();
  p.streaming_blocks_stride = stride;
  p.num_sink_pages = kSinkPages;
  p.ring_pages = rings.as<int32_t>();
  p.sink_tokens = kSinkTokens;
  p.local_tokens = locals.as<int32_t>();
}

// Head modes: dense = every head causal; lserve = even heads streaming, odd heads `retrieval`.
struct Heads {
  std::vector<int32_t> mode, slot;
  int32_t num_retrieval = 0, num_streaming = 0;
};

Heads make_heads(bool lserve, HeadMode retrieval) {
  Heads h;
  for (int32_t g = 0; g < kKvHeads; ++g) {
    const bool streaming = lserve && g % 2 == 0;
    h.mode.push_back(static_cast<int32_t>(streaming ? HeadMode::kStreaming : retrieval));
    h.slot.push_back(streaming ? h.num_streaming++ : h.num_retrieval++);
  }
  return h;
}

// ---- ceilings ----

// The copy ceiling every "copy_fraction" is measured against (one measurement per run: a 1 GiB
// copy timed at another moment read 15% lower on an H100 once, which skewed the fractions).
constexpr int64_t kCopyCeilingBytes = int64_t{2} << 30;

void bench_ceilings(Device& dev, JsonLines& out, double copy_bps, bool copy, bool gemm) {
  if (copy) {
    out.write(fmt::format(R"({{"bench": "copy", "bytes": {}, "gbps": {:.1f}}})", kCopyCeilingBytes,
                          copy_bps / 1e9));
  }
  if (gemm) {
    const int64_t n = 8192;
    Buffer x = alloc(dev, n * n * 2), w = alloc(dev, n * n * 2), y = alloc(dev, n * n * 2);
    fill(dev, x.data(), n * n, 11);
    fill(dev, w.data(), n * n, 12, -0.05f, 0.05f);
    LinearWeight lw;
    lw.w = TensorView(w.data(), DType::kBF16, {n, n}, ls::Device::kCuda);
    const TensorView xv(x.data(), DType::kBF16, {n, n}, ls::Device::kCuda);
    const TensorView yv(y.data(), DType::kBF16, {n, n}, ls::Device::kCuda);
    const double ms = median_ms(*dev.b, 3, 10, [&] { dev.b->linear(xv, lw, yv); });
    const double tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
    out.write(fmt::format(
        R"({{"bench": "gemm", "m": {}, "n": {}, "k": {}, "ms": {:.3f}, "tflops": {:.1f}}})", n, n,
        n, ms, tflops));
  }
}

// ---- linear layers at decode shapes ----

void bench_linear(Device& dev, JsonLines& out, const std::vector<int64_t>& ms_list,
                  double copy_bps) {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"q_or_o", 4096, 4096}, {"k_or_v", 1024, 4096},
                          {"qkv", 6144, 4096},    {"gate_up", 28672, 4096},
                          {"down", 4096, 14336},  {"lm_head", 128256, 4096}};
  for (int64_t m : ms_list) {
    for (const Shape& s : shapes) {
      for (const bool use_gemv : {false, true}) {
        if (use_gemv && m > kernels::cuda::kGemvMaxRows) continue;
        dev.b->set_gemv(use_gemv);
        const int64_t wbytes = s.n * s.k * 2;
        const int64_t replicas =
            std::clamp<int64_t>((4 * dev.l2_bytes + wbytes - 1) / wbytes, 2, 64);
        Buffer w = alloc(dev, wbytes * replicas);
        Buffer x = alloc(dev, m * s.k * 2), y = alloc(dev, m * s.n * 2);
        fill(dev, w.data(), s.n * s.k * replicas, 21, -0.05f, 0.05f);
        fill(dev, x.data(), m * s.k, 22);
        const TensorView xv(x.data(), DType::kBF16, {m, s.k}, ls::Device::kCuda);
        const TensorView yv(y.data(), DType::kBF16, {m, s.n}, ls::Device::kCuda);
        std::vector<LinearWeight> ws(static_cast<size_t>(replicas));
        for (int64_t r = 0; r < replicas; ++r) {
          ws[static_cast<size_t>(r)].w = TensorView(static_cast<char*>(w.data()) + r * wbytes,
                                                    DType::kBF16, {s.n, s.k}, ls::Device::kCuda);
        }
        for (const LinearWeight& lw : ws) dev.b->linear(xv, lw, yv);  // plans, outside the capture
        dev.b->synchronize();
        double us = 0;
        if (dev.b->begin_capture().ok()) {
          for (const LinearWeight& lw : ws) dev.b->linear(xv, lw, yv);
          auto graph = dev.b->end_capture();
          if (graph.ok()) {
            us = median_ms(*dev.b, 2, 7, [&] { (void)dev.b->replay(*graph); }) * 1e3 /
                 static_cast<double>(replicas);
          }
        }
        const Status err = dev.b->take_error();
        const double bytes = static_cast<double>(wbytes + 2 * m * (s.k + s.n));
        const double gbps = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0;
        out.write(fmt::format(
            R"({{"bench": "linear", "impl": "{}", "name": "{}", "m": {}, "n": {}, "k": {}, "us": {:.2f}, "gbps": {:.0f}, "copy_fraction": {:.3f}, "ok": {}}})",
            use_gemv ? "gemv" : "cublaslt", s.name, m, s.n, s.k, us, gbps,
            copy_bps > 0 ? gbps * 1e9 / copy_bps : 0.0, err.ok() && us > 0 ? "true" : "false"));
      }
    }
  }
  dev.b->set_gemv(true);
}

// The K/V page formats of --kv-formats (bf16, fp8, int8, int4; kNone = bf16); false on an
// unknown name.
bool parse_kv_formats(const std::string& list, std::vector<kernels::KvQuant>& formats) {
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    if (name == "bf16") {
      formats.push_back(kernels::KvQuant::kNone);
    } else if (name == "fp8") {
      formats.push_back(kernels::KvQuant::kFp8);
    } else if (name == "int8") {
      formats.push_back(kernels::KvQuant::kInt8);
    } else if (name == "int4") {
      formats.push_back(kernels::KvQuant::kInt4);
    } else {
      std::fprintf(stderr, "--kv-formats: unknown format '%s' (bf16, fp8, int8, int4)\n",
                   name.c_str());
      return false;
    }
    begin = end + 1;
  }
  return true;
}

// ---- prefill ----

double causal_flops(int64_t tokens, int64_t q_heads) {
  return 4.0 * kD * static_cast<double>(q_heads) * static_cast<double>(tokens) *
         static_cast<double>(tokens + 1) / 2.0;
}

// FLOPs of streaming heads: query t sees min(t + 1, local) window keys plus the sinks before them.
double streaming_flops(int64_t tokens, int64_t q_heads, int64_t local) {
  double keys = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t window = std::min(t + 1, local);
    keys += static_cast<double>(window + std::min<int64_t>(kSinkTokens, t + 1 - window));
  }
  return 4.0 * kD * static_cast<double>(q_heads) * keys;
}

// `formats`: K/V page formats (quantized pages: the bf16 pools reinterpreted, as in
// bench_decode; only the kernels that read them run: "mma" and "wgmma-ws").
void bench_prefill(Device& dev, JsonLines& out, const std::vector<int64_t>& token_counts,
                   const std::string& kernel_names, const std::vector<kernels::KvQuant>& formats) {
  std::mt19937 rng(7);
  for (const int64_t T : token_counts) {
    const int32_t pages = static_cast<int32_t>((T + kPage - 1) / kPage);
    Buffer q = alloc(dev, T * kQHeads * kRowBytes), o = alloc(dev, T * kQHeads * kRowBytes);
    fill(dev, q.data(), T * kQHeads * kD, 21, -2, 2);
    // One pool large enough for every kv head's pages (dense) or the retrieval half plus a
    // streaming pool whose ring holds window + chunk (lserve).
    const int64_t page_bytes = int64_t{kPage} * kRowBytes;
    Buffer rk = alloc(dev, int64_t{pages} * kKvHeads * page_bytes);
    Buffer rv = alloc(dev, int64_t{pages} * kKvHeads * page_bytes);
    fill(dev, rk.data(), rk.bytes() / 2, 22);
    fill(dev, rv.data(), rv.bytes() / 2, 23);
    const int32_t local = 8192;
    const int32_t ring = static_cast<int32_t>((local + T - 1 + kPage - 1) / kPage) + 1;
    const int32_t s_blocks = kSinkPages + ring;
    Buffer sk = alloc(dev, int64_t{s_blocks} * (kKvHeads / 2) * page_bytes);
    Buffer sv = alloc(dev, int64_t{s_blocks} * (kKvHeads / 2) * page_bytes);
    fill(dev, sk.data(), sk.bytes() / 2, 24);
    fill(dev, sv.data(), sv.bytes() / 2, 25);
    std::vector<int32_t> r_table(static_cast<size_t>(pages)),
        s_table(static_cast<size_t>(s_blocks));
    std::iota(r_table.begin(), r_table.end(), 0);
    std::shuffle(r_table.begin(), r_table.end(), rng);
    std::iota(s_table.begin(), s_table.end(), 0);
    Buffer d_r_table = upload(dev, r_table), d_s_table = upload(dev, s_table);
    Buffer indptr = upload(dev, {0, static_cast<int32_t>(T)}),
           lens = upload(dev, {static_cast<int32_t>(T)}), rings = upload(dev, {ring}),
           locals = upload(dev, {local});
    for (const kernels::KvQuant fmt : formats) {
      for (const bool lserve : {false, true}) {
        if (!dev.wants(lserve)) continue;
        const bool quant = fmt != kernels::KvQuant::kNone;
        const std::string fmt_name = quant ? kernels::kv_quant_name(fmt) : "bf16";
        const Heads h = make_heads(lserve, HeadMode::kCausal);
        Buffer modes = upload(dev, h.mode), slots = upload(dev, h.slot);
        kernels::AttentionParams p =
            shape_params(q.data(), o.data(), T, 1, indptr, lens, modes, slots);
        p.retrieval = pool_view(rk.data(), rv.data(), pages, h.num_retrieval, fmt);
        p.retrieval_blocks = d_r_table.as<int32_t>();
        p.retrieval_blocks_stride = pages;
        if (lserve) {
          set_streaming(p, pool_view(sk.data(), sv.data(), s_blocks, h.num_streaming, fmt),
                        d_s_table, s_blocks, rings, locals);
        }
        const double flops =
            lserve ? causal_flops(T, kQHeads / 2) + streaming_flops(T, kQHeads / 2, local)
                   : causal_flops(T, kQHeads);
        // The mma.sync kernel with 4 and 8 warps, the wgmma kernel with key blocks of 128 (the
        // default; first, so ncu's first wgmma launch is it) and 64, and (only when asked for) the
        // warp-specialised wgmma kernel and its ping-pong variant with 2 and 3 K/V stages;
        // --prefill-kernels picks among them.
        using kernels::cuda::PrefillKernel;
        struct Variant {
          const char* kernel;
          PrefillKernel which;
          int warps;
          int key_block;
          int stages = 2;
          bool tma = true;           // the ws / pp producer's TMA loads (false: cp.async only)
          int tma_min_blocks = 128;  // spans of fewer 64-key blocks keep cp.async
        };
        for (const Variant v :
             {Variant{"mma", PrefillKernel::kMma, 4, 64},
              Variant{"mma", PrefillKernel::kMma, 8, 64},
              Variant{"wgmma", PrefillKernel::kWgmma, 8, 128},
              Variant{"wgmma", PrefillKernel::kWgmma, 8, 64},
              Variant{"wgmma-ws", PrefillKernel::kWgmmaWs, 12, 64},
              Variant{"wgmma-pp", PrefillKernel::kWgmmaPingPong, 12, 64},
              Variant{"wgmma-ws-cp", PrefillKernel::kWgmmaWs, 12, 64, 2, false},
              Variant{"wgmma-ws-tma", PrefillKernel::kWgmmaWs, 12, 64, 2, true, 0},
              Variant{"wgmma-pp3", PrefillKernel::kWgmmaPingPong, 12, 64, 3},
              Variant{"wgmma-pp-cp", PrefillKernel::kWgmmaPingPong, 12, 64, 2, false},
              Variant{"wgmma-pp-tma", PrefillKernel::kWgmmaPingPong, 12, 64, 2, true, 0}}) {
          bool wanted = false;
          for (size_t b = 0; b <= kernel_names.size();) {
            const size_t e = std::min(kernel_names.find(',', b), kernel_names.size());
            wanted = wanted || kernel_names.substr(b, e - b) == v.kernel;
            b = e + 1;
          }
          if (!wanted) continue;
          if (quant && v.which != PrefillKernel::kMma && std::string(v.kernel) != "wgmma-ws") {
            continue;
          }
          kernels::cuda::AttentionOptions opt;
          opt.prefill_kernel = v.which;
          opt.prefill_warps = v.warps == 4 ? 4 : 8;
          opt.wgmma_key_block = v.key_block;
          opt.wgmma_ws_stages = v.stages;
          opt.prefill_tma = v.tma;
          opt.prefill_tma_min_blocks = v.tma_min_blocks;
          dev.b->set_attention_options(opt);
          const int reps = T <= 8192 ? 10 : (T <= 32768 ? 5 : 3);
          const double ms = median_ms(*dev.b, 1, reps, [&] { dev.b->attention(p); });
          const Status err = dev.b->take_error();
          out.write(fmt::format(
              R"({{"bench": "prefill", "tokens": {}, "policy": "{}", "kv_format": "{}", "kernel": "{}", "warps": {}, "key_block": {}, "ms": {:.3f}, "tflops": {:.1f}, "ok": {}}})",
              T, lserve ? "lserve" : "dense", fmt_name, v.kernel, v.warps, v.key_block, ms,
              flops / (ms * 1e-3) / 1e12, err.ok() ? "true" : "false"));
        }
        dev.b->set_attention_options({});
      }
    }
  }
}

// ---- decode ----

// Microseconds per call of `fn` (one op on the backend's stream), captured `calls` times in one
// graph and replayed; -1 when the capture failed. Runs fn once uncaptured first (sizes scratch).
template <class Fn>
double graph_us(Device& dev, int calls, Fn&& fn) {
  fn();
  dev.b->synchronize();
  double us = -1;
  if (dev.b->begin_capture().ok()) {
    for (int i = 0; i < calls; ++i) fn();
    auto graph = dev.b->end_capture();
    if (graph.ok()) {
      us = median_ms(*dev.b, 2, 7, [&] { (void)dev.b->replay(*graph); }) * 1e3 / calls;
    }
    dev.b->drop_graphs();
  }
  return us;
}

// Rows the decode kernel reads for a streaming head of a sequence of `len` tokens (sink pages,
// then the window's pages up to the last token), with a 256-token window.
int64_t streaming_rows(int64_t len, int64_t local) {
  const int64_t last_page = (len - 1) / kPage;
  const int64_t first = std::max<int64_t>(kSinkPages, std::max<int64_t>(0, len - local) / kPage);
  int64_t rows = std::min<int64_t>(len, int64_t{kSinkPages} * kPage);
  if (first <= last_page) rows += len - first * kPage;
  return rows;
}

struct DecodePools {
  Buffer k, v;        // [blocks * 8, page, d] (dense view) = [blocks * 16, ...] (lserve view)
  int64_t bytes = 0;  // of each
  Buffer kmin, kmax;  // summaries for the lserve retrieval view
  int64_t summary_head_pages = 0;
};

// Decode-kernel options one decode case is timed under.
struct DecodeVariant {
  int max_splits = 0;  // 0: the default heuristic
  int min_blocks = 0;  // AttentionOptions::min_blocks_per_split (0: its heuristic)
  int l2_prefetch = -1;       // -1: by the device (AttentionOptions::decode_l2_prefetch)
  int prewait_prefetch = -1;  // -1: AttentionOptions' default
  int ticketed = kernels::cuda::AttentionOptions{}.decode_ticketed_splits;
  int chunk_blocks = 1;
};

// Runs `on_graph(graph)` on a CUDA graph of `calls` decode calls rotating over `params`, under
// options `opt` (each params run eagerly once first, which sizes the scratch); nothing if the
// capture fails. The backend's options are back to the defaults afterwards.
template <class Fn>
void with_decode_graph(Device& dev, const std::vector<kernels::AttentionParams>& params,
                       int64_t calls, const kernels::cuda::AttentionOptions& opt, Fn&& on_graph) {
  dev.b->set_attention_options(opt);
  for (const auto& p : params) dev.b->attention(p);
  dev.b->synchronize();
  if (dev.b->begin_capture().ok()) {
    for (int64_t i = 0; i < calls; ++i)
      dev.b->attention(params[static_cast<size_t>(i) % params.size()]);
    auto graph = dev.b->end_capture();
    if (graph.ok()) on_graph(*graph);
    dev.b->drop_graphs();
  }
  dev.b->set_attention_options({});
}

// With --decode-trace: replays `calls` rotating decode calls once more with per-block timestamps
// on (every call writes the same records, so the last call's remain) and appends them to `trace`,
// one tab-separated line per block, times in ns from the call's first block start.
void write_decode_trace(Device& dev, std::FILE* trace, const std::string& label,
                        const std::vector<kernels::AttentionParams>& params, int64_t calls,
                        kernels::cuda::AttentionOptions opt) {
  const int64_t n = kernels::cuda::decode_trace_records(params[0], dev.b->num_sms(), opt);
  if (n <= 0) return;
  using Record = kernels::cuda::DecodeTraceRecord;
#ifdef LS_DECODE_TRACE_LANDINGS
  const int64_t landings = n * kernels::cuda::kDecodeTraceLandings;  // decode_trace.h
#else
  const int64_t landings = 0;
#endif
  Buffer buf = alloc(dev, n * static_cast<int64_t>(sizeof(Record)) + landings * 8);
  die_on(cudaMemset(buf.data(), 0, static_cast<size_t>(buf.bytes())), "cudaMemset");
  opt.decode_trace = static_cast<Record*>(buf.data());
  with_decode_graph(dev, params, calls, opt, [&](int32_t graph) {
    (void)dev.b->replay(graph);
    dev.b->synchronize();
  });
  std::vector<Record> rec(static_cast<size_t>(n));
  die_on(cudaMemcpy(rec.data(), buf.data(), rec.size() * sizeof(Record), cudaMemcpyDeviceToHost),
         "cudaMemcpy trace");
  uint64_t t0 = UINT64_MAX;
  for (const Record& r : rec) {
    if (r.start != 0) t0 = std::min(t0, r.start);
  }
  const auto rel = [&](uint64_t t) { return t == 0 ? int64_t{-1} : static_cast<int64_t>(t - t0); };
  for (size_t i = 0; i < rec.size(); ++i) {
    const Record& r = rec[i];
    std::fprintf(trace, "%s\t%zu\t%d\t%d\t%d\t%d\t%lld\t%lld\t%lld\t%lld\t%lld\n", label.c_str(), i,
                 r.kernel, r.split, r.smid, r.iterations, static_cast<long long>(rel(r.start)),
                 static_cast<long long>(rel(r.waited)), static_cast<long long>(rel(r.first_data)),
                 static_cast<long long>(rel(r.loop_end)), static_cast<long long>(rel(r.end)));
  }
  if (landings > 0) {  // "land" rows: label, decode block, key block, ns from the call's start
    std::vector<uint64_t> land(static_cast<size_t>(landings));
    die_on(cudaMemcpy(land.data(), static_cast<char*>(buf.data()) + n * sizeof(Record),
                      land.size() * 8, cudaMemcpyDeviceToHost),
           "cudaMemcpy trace landings");
    const auto per = static_cast<size_t>(kernels::cuda::kDecodeTraceLandings);
    for (size_t i = 0; i < land.size(); ++i) {
      if (land[i] != 0) {
        std::fprintf(trace, "land\t%s\t%zu\t%zu\t%lld\n", label.c_str(), i / per, i % per,
                     static_cast<long long>(rel(land[i])));
      }
    }
  }
  std::fflush(trace);
}

// `formats`: K/V page formats to time (kNone: bf16 pages; fp8 / int8 / int4: quantized pages,
// kernels/kv_quant.h, read by the decode kernel's quantized instantiations). Quantized pages are
// smaller, so the bf16-sized pools hold them too; their bytes are the bf16 fill's, so every
// code decodes to a finite value and every f32 scale (two bf16 in [-1, 1]) is finite too, as in
// a real cache (timing does not depend on the values otherwise).
void bench_decode(Device& dev, JsonLines& out, const std::vector<int64_t>& batches,
                  const std::vector<int64_t>& contexts, double copy_bps,
                  const std::vector<DecodeVariant>& variants, int64_t rounds, std::FILE* trace,
                  const std::vector<kernels::KvQuant>& formats) {
  int64_t max_tokens = 0;
  for (int64_t b : batches) {
    for (int64_t c : contexts) max_tokens = std::max(max_tokens, b * c);
  }
  // One big pool for the largest case (about 1 GiB per 128K tokens of 8 kv heads, K and V each),
  // leaving room for everything else.
  DecodePools pools;
  const int64_t page_bytes = int64_t{kPage} * kRowBytes;
  const int64_t free_bytes = dev.b->device_memory_free_bytes();
  int64_t blocks = (max_tokens + kPage - 1) / kPage + 64;
  const int64_t block_bytes = kKvHeads * page_bytes;
  blocks = std::min<int64_t>(
      blocks, (free_bytes - (int64_t{6} << 30)) / (2 * block_bytes + block_bytes / 8));
  pools.bytes = blocks * block_bytes;
  pools.k = alloc(dev, pools.bytes);
  pools.v = alloc(dev, pools.bytes);
  fill(dev, pools.k.data(), pools.bytes / 2, 31);
  fill(dev, pools.v.data(), pools.bytes / 2, 32);
  // lserve view: 4 retrieval heads per block -> twice the blocks; summaries per head-page.
  pools.summary_head_pages = 2 * blocks * (kKvHeads / 2);
  const int64_t summary_bytes = pools.summary_head_pages * (kPage / 16) * kRowBytes;
  pools.kmin = alloc(dev, summary_bytes);
  pools.kmax = alloc(dev, summary_bytes);
  fill(dev, pools.kmin.data(), summary_bytes / 2, 33, -1.0f, 0.0f);
  fill(dev, pools.kmax.data(), summary_bytes / 2, 34, 0.0f, 1.0f);
  std::mt19937 rng(9);

  for (const kernels::KvQuant fmt : formats) {
    const std::string fmt_name =
        fmt == kernels::KvQuant::kNone ? "bf16" : kernels::kv_quant_name(fmt);
    // Bytes of one K (or V) row as the kernel reads it: codes + per-token scales when quantized.
    const int64_t row_bytes = fmt == kernels::KvQuant::kNone
                                  ? kRowBytes
                                  : static_cast<int64_t>(kernels::kv_quant_token_bytes(fmt, kD));
    for (const bool lserve : {false, true}) {
      if (!dev.wants(lserve)) continue;
      for (const int64_t B : batches) {
        for (const int64_t C : contexts) {
          const int32_t pages = static_cast<int32_t>((C + kPage - 1) / kPage);
          const Heads h = make_heads(lserve, lserve ? HeadMode::kSelected : HeadMode::kCausal);
          const int32_t view_blocks = static_cast<int32_t>(lserve ? 2 * blocks : blocks);
          const int64_t used = B * pages;
          if (used > view_blocks) {
            out.write(fmt::format(
                R"({{"bench": "decode", "policy": "{}", "kv_format": "{}", "batch": {}, "context": {}, "skipped": "pool too small"}})",
                lserve ? "lserve" : "dense", fmt_name, B, C));
            continue;
          }
          // Bytes one call must read (K and V rows of every visited page row below kv_len).
          const int32_t budget_pages = 4096 / kPage;
          const int64_t sel_rows = pages <= budget_pages ? C
                                                         : int64_t{budget_pages - 1} * kPage +
                                                               (C - int64_t{pages - 1} * kPage);
          const int64_t rows_per_seq =
              lserve ? (kKvHeads / 2) * (sel_rows + streaming_rows(C, 256)) : int64_t{kKvHeads} * C;
          const int64_t bytes_per_call = B * rows_per_seq * 2 * row_bytes;
          const int64_t replicas = std::clamp<int64_t>(
              std::min<int64_t>(view_blocks / used,
                                (4 * dev.l2_bytes + bytes_per_call - 1) / bytes_per_call),
              1, 16);

          Buffer q = alloc(dev, B * kQHeads * kRowBytes), o = alloc(dev, B * kQHeads * kRowBytes);
          fill(dev, q.data(), B * kQHeads * kD, 41, -2, 2);
          std::vector<int32_t> indptr(static_cast<size_t>(B + 1)),
              lens(static_cast<size_t>(B), static_cast<int32_t>(C));
          std::iota(indptr.begin(), indptr.end(), 0);
          std::vector<int32_t> rows(static_cast<size_t>(B));
          std::iota(rows.begin(), rows.end(), 0);
          Buffer d_indptr = upload(dev, indptr), d_lens = upload(dev, lens),
                 d_rows = upload(dev, rows);
          Buffer modes = upload(dev, h.mode), slots = upload(dev, h.slot);
          const int32_t ring = (256 + kPage - 1) / kPage + 1;
          Buffer rings = upload(dev, std::vector<int32_t>(static_cast<size_t>(B), ring));
          Buffer locals = upload(dev, std::vector<int32_t>(static_cast<size_t>(B), 256));
          const int32_t s_per_seq = kSinkPages + ring;
          Buffer sk = alloc(dev, B * s_per_seq * (kKvHeads / 2) * page_bytes);
          Buffer sv = alloc(dev, B * s_per_seq * (kKvHeads / 2) * page_bytes);
          fill(dev, sk.data(), sk.bytes() / 2, 42);
          fill(dev, sv.data(), sv.bytes() / 2, 43);
          std::vector<int32_t> s_table(static_cast<size_t>(B * s_per_seq));
          std::iota(s_table.begin(), s_table.end(), 0);
          Buffer d_s_table = upload(dev, s_table);

          std::vector<Buffer> tables, selected, num_selected;
          std::vector<kernels::AttentionParams> params;
          double select_ms = 0;         // one eager call (host launch gaps included)
          double select_graph_us = -1;  // per call of a graph of 20 (what a captured step pays)
          for (int64_t r = 0; r < replicas; ++r) {
            std::vector<int32_t> table(static_cast<size_t>(used));
            std::iota(table.begin(), table.end(), static_cast<int32_t>(r * used));
            std::shuffle(table.begin(), table.end(), rng);
            tables.push_back(upload(dev, table));
            kernels::AttentionParams p =
                shape_params(q.data(), o.data(), B, B, d_indptr, d_lens, modes, slots);
            p.retrieval =
                pool_view(pools.k.data(), pools.v.data(), view_blocks, h.num_retrieval, fmt);
            p.retrieval_blocks = tables.back().as<int32_t>();
            p.retrieval_blocks_stride = pages;
            if (lserve) {
              set_streaming(p,
                            pool_view(sk.data(), sv.data(), static_cast<int32_t>(B * s_per_seq),
                                      h.num_streaming, fmt),
                            d_s_table, s_per_seq, rings, locals);
              // The GPU page selector fills this replica's selection (rows = sequences).
              selected.push_back(alloc(dev, B * kKvHeads * budget_pages * 4));
              num_selected.push_back(alloc(dev, B * kKvHeads * 4));
              kernels::PageSelectParams sp;
              sp.q = q.data();
              sp.q_dtype = DType::kBF16;
              sp.num_seqs = static_cast<int32_t>(B);
              sp.q_indptr = p.q_indptr;
              sp.num_q_heads = kQHeads;
              sp.num_kv_heads = kKvHeads;
              sp.head_dim = kD;
              sp.kv_lens = p.kv_lens;
              sp.head_mode = p.head_mode;
              sp.head_slot = p.head_slot;
              sp.page_tokens = kPage;
              sp.retrieval_blocks = p.retrieval_blocks;
              sp.retrieval_blocks_stride = pages;
              sp.heads_per_block = h.num_retrieval;
              sp.summaries.kmin = pools.kmin.data();
              sp.summaries.kmax = pools.kmax.data();
              sp.summaries.dtype = DType::kBF16;
              sp.summaries.logical_page_tokens = 16;
              sp.summaries.logical_per_page = kPage / 16;
              sp.budget_pages = budget_pages;
              sp.out_rows = d_rows.as<int32_t>();
              sp.selected = selected.back().as<int32_t>();
              sp.num_selected = num_selected.back().as<int32_t>();
              sp.max_selected = budget_pages;
              if (r == 0) {
                select_ms = median_ms(*dev.b, 2, 10, [&] { dev.b->page_select(sp); });
                select_graph_us = graph_us(dev, 20, [&] { dev.b->page_select(sp); });
              } else {
                dev.b->page_select(sp);
              }
              p.selected_rows = d_rows.as<int32_t>();
              p.selected = sp.selected;
              p.num_selected = sp.num_selected;
              p.max_selected = budget_pages;
              // Selected once above, outside the timed graph of attention calls (as in a decode
              // step that reuses its selection).
              p.selection_just_written = false;
            }
            params.push_back(p);
          }
          for (int64_t round = 0; round < rounds; ++round) {
            for (const DecodeVariant& variant : variants) {
              kernels::cuda::AttentionOptions opt;
              opt.decode_ticketed_splits = variant.ticketed;
              opt.decode_chunk_blocks = variant.chunk_blocks;
              opt.max_splits = variant.max_splits;
              opt.min_blocks_per_split = variant.min_blocks;
              opt.decode_l2_prefetch = variant.l2_prefetch;
              if (variant.prewait_prefetch >= 0)
                opt.decode_prewait_prefetch = variant.prewait_prefetch;
              // One graph of many calls rotating over the replicas.
              const int64_t calls = std::max<int64_t>(20, replicas);
              double ms = -1;
              with_decode_graph(dev, params, calls, opt, [&](int32_t graph) {
                ms = median_ms(*dev.b, 1, 5, [&] { (void)dev.b->replay(graph); }) /
                     static_cast<double>(calls);
              });
              if (trace != nullptr && round == 0) {
                write_decode_trace(
                    dev, trace,
                    fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}", lserve ? "lserve" : "dense", B, C,
                                variant.max_splits, variant.min_blocks, opt.decode_prewait_prefetch,
                                variant.ticketed, variant.chunk_blocks),
                    params, calls, opt);
              }
              const Status err = dev.b->take_error();
              const double gbps =
                  ms > 0 ? static_cast<double>(bytes_per_call) / (ms * 1e-3) / 1e9 : 0.0;
              out.write(fmt::format(
                  R"({{"bench": "decode", "policy": "{}", "kv_format": "{}", "batch": {}, "context": {}, "us": {:.2f}, "bytes": {}, "gbps": {:.1f}, "copy_fraction": {:.3f}, "select_us": {:.2f}, "select_graph_us": {:.2f}, "replicas": {}, "max_splits": {}, "min_blocks": {}, "l2_prefetch": {}, "l2_prefetch_auto": {}, "prewait_prefetch": {}, "ticketed": {}, "chunk_blocks": {}, "round": {}, "ok": {}}})",
                  lserve ? "lserve" : "dense", fmt_name, B, C, ms * 1e3, bytes_per_call, gbps,
                  copy_bps > 0 ? gbps * 1e9 / copy_bps : 0.0, select_ms * 1e3, select_graph_us,
                  replicas, variant.max_splits, variant.min_blocks,
                  (variant.l2_prefetch < 0 ? kernels::cuda::decode_l2_prefetch_pays()
                                           : variant.l2_prefetch != 0)
                      ? "true"
                      : "false",
                  variant.l2_prefetch < 0 ? "true" : "false", opt.decode_prewait_prefetch,
                  variant.ticketed, variant.chunk_blocks, round,
                  err.ok() && ms > 0 ? "true" : "false"));
            }
          }
        }
      }
    }
  }
}

// ---- small per-layer ops ----

void bench_small(Device& dev, JsonLines& out, const std::vector<int64_t>& token_counts,
                 double copy_bps) {
  constexpr int64_t kHidden = 4096, kInter = 14336, kContext = 32768;
  constexpr int32_t kLogical = 16;
  constexpr int kCalls = 200;
  for (const int64_t T : token_counts) {
    if (T <= 0) continue;
    const bool decode = T <= 32;
    const int64_t seqs = decode ? T : 1;
    Buffer x = alloc(dev, T * kHidden * 2), res = alloc(dev, T * kHidden * 2),
           y = alloc(dev, T * kHidden * 2), w = alloc(dev, kHidden * 4);
    Buffer q = alloc(dev, T * kQHeads * kRowBytes), k = alloc(dev, T * kKvHeads * kRowBytes),
           v = alloc(dev, T * kKvHeads * kRowBytes);
    Buffer cs = alloc(dev, T * (kD / 2) * 4), sn = alloc(dev, T * (kD / 2) * 4);
    Buffer gu = alloc(dev, T * 2 * kInter * 2), act = alloc(dev, T * kInter * 2);
    constexpr int64_t kQkvRow = (kQHeads + 2 * kKvHeads) * kD;
    Buffer qkv = alloc(dev, T * kQkvRow * 2), head_w = alloc(dev, kD * 4);
    fill(dev, qkv.data(), T * kQkvRow, 57);
    fill(dev, x.data(), T * kHidden, 51);
    fill(dev, res.data(), T * kHidden, 52);
    fill(dev, q.data(), T * kQHeads * kD, 53);
    fill(dev, k.data(), T * kKvHeads * kD, 54);
    fill(dev, v.data(), T * kKvHeads * kD, 55);
    fill(dev, gu.data(), T * 2 * kInter, 56);
    std::vector<float> ones(static_cast<size_t>(kHidden), 1.0f);
    dev.b->copy_bytes(w.data(), ones.data(), kHidden * 4);
    dev.b->copy_bytes(head_w.data(), ones.data(), kD * 4);
    std::vector<float> cos_h(static_cast<size_t>(T * kD / 2)), sin_h(cos_h.size());
    for (size_t i = 0; i < cos_h.size(); ++i) {
      cos_h[i] = std::cos(0.001f * static_cast<float>(i));
      sin_h[i] = std::sin(0.001f * static_cast<float>(i));
    }
    dev.b->copy_bytes(cs.data(), cos_h.data(), static_cast<int64_t>(cos_h.size() * 4));
    dev.b->copy_bytes(sn.data(), sin_h.data(), static_cast<int64_t>(sin_h.size() * 4));

    const auto view = [](Buffer& b, std::initializer_list<int64_t> shape, DType dt = DType::kBF16) {
      return TensorView(b.data(), dt, shape, ls::Device::kCuda);
    };
    const TensorView xv = view(x, {T, kHidden}), rv = view(res, {T, kHidden}),
                     yv = view(y, {T, kHidden}), wv = view(w, {kHidden}, DType::kF32);
    const TensorView qv = view(q, {T, kQHeads, kD}), kv = view(k, {T, kKvHeads, kD});
    const TensorView cv = view(cs, {T, kD / 2}, DType::kF32),
                     sv = view(sn, {T, kD / 2}, DType::kF32);
    const TensorView guv = view(gu, {T, 2 * kInter}), av = view(act, {T, kInter});
    const TensorView qkvv = view(qkv, {T, kQkvRow}), vv = view(v, {T, kKvHeads, kD}),
                     hwv = view(head_w, {kD}, DType::kF32), none;

    // Paged KV of `seqs` sequences whose last T / seqs tokens are this call's (dense pool, every
    // kv head a retrieval head with summaries).
    const int64_t ctx = std::max<int64_t>(kContext, T);
    const int32_t pages = static_cast<int32_t>((ctx + kPage - 1) / kPage);
    const int64_t blocks = seqs * pages;
    const int64_t page_bytes = int64_t{kPage} * kRowBytes;
    Buffer pk = alloc(dev, blocks * kKvHeads * page_bytes),
           pv = alloc(dev, blocks * kKvHeads * page_bytes);
    const int64_t summary_bytes = blocks * kKvHeads * (kPage / kLogical) * kRowBytes;
    Buffer smin = alloc(dev, summary_bytes), smax = alloc(dev, summary_bytes);
    std::vector<int32_t> indptr(static_cast<size_t>(seqs + 1)), lens(static_cast<size_t>(seqs));
    for (int64_t i = 0; i <= seqs; ++i)
      indptr[static_cast<size_t>(i)] = static_cast<int32_t>(i * (T / seqs));
    // Decode: positions mid-logical-page, so page_summary folds into a stored summary.
    for (auto& l : lens) l = static_cast<int32_t>(decode ? ctx - 5 : ctx);
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::vector<int32_t> mode(kKvHeads, static_cast<int32_t>(HeadMode::kSelected)), slot(kKvHeads);
    std::iota(slot.begin(), slot.end(), 0);
    Buffer d_indptr = upload(dev, indptr), d_lens = upload(dev, lens), d_table = upload(dev, table),
           d_mode = upload(dev, mode), d_slot = upload(dev, slot);
    kernels::KvAppendParams ap;
    ap.k = k.data();
    ap.v = v.data();
    ap.src_dtype = DType::kBF16;
    ap.num_tokens = static_cast<int32_t>(T);
    ap.num_kv_heads = kKvHeads;
    ap.head_dim = kD;
    ap.num_seqs = static_cast<int32_t>(seqs);
    ap.q_indptr = d_indptr.as<int32_t>();
    ap.kv_lens = d_lens.as<int32_t>();
    ap.head_mode = d_mode.as<int32_t>();
    ap.head_slot = d_slot.as<int32_t>();
    ap.retrieval = pool_view(pk.data(), pv.data(), static_cast<int32_t>(blocks), kKvHeads);
    ap.retrieval_blocks = d_table.as<int32_t>();
    ap.retrieval_blocks_stride = pages;
    kernels::SummaryUpdateParams su;
    su.k = k.data();
    su.src_dtype = DType::kBF16;
    su.num_tokens = ap.num_tokens;
    su.num_kv_heads = kKvHeads;
    su.head_dim = kD;
    su.num_seqs = ap.num_seqs;
    su.q_indptr = ap.q_indptr;
    su.kv_lens = ap.kv_lens;
    su.head_mode = ap.head_mode;
    su.head_slot = ap.head_slot;
    su.page_tokens = kPage;
    su.heads_per_block = kKvHeads;
    su.retrieval_blocks = ap.retrieval_blocks;
    su.retrieval_blocks_stride = pages;
    su.summaries.kmin = smin.data();
    su.summaries.kmax = smax.data();
    su.summaries.dtype = DType::kBF16;
    su.summaries.logical_page_tokens = kLogical;
    su.summaries.logical_per_page = kPage / kLogical;
    kernels::KvAppendParams ap_index = ap;
    ap_index.summaries = su.summaries;

    // bytes: what the op must read and write at least (bf16 rows; f32 weights and cos/sin are
    // per token or shared and left out), for the fraction of the copy bandwidth; 0 where the op's
    // traffic depends on the pool layout.
    struct Op {
      const char* name;
      int64_t bytes;
      std::function<void()> fn;
    };
    const int64_t row_bytes = T * kHidden * 2;
    const Op ops[] = {
        {"rmsnorm", 2 * row_bytes, [&] { dev.b->rmsnorm(xv, wv, 1e-5f, yv); }},
        {"add_rmsnorm", 4 * row_bytes, [&] { dev.b->add_rmsnorm(xv, rv, wv, 1e-5f, yv); }},
        {"rope_q", 2 * T * kQHeads * kRowBytes, [&] { dev.b->rope(qv, cv, sv, kD); }},
        {"rope_k", 2 * T * kKvHeads * kRowBytes, [&] { dev.b->rope(kv, cv, sv, kD); }},
        {"qkv_split_rope", 2 * T * kQkvRow * 2,
         [&] { dev.b->qkv_split_rope(qkvv, none, none, 1e-6f, cv, sv, kD, qv, kv, vv); }},
        {"qkv_split_rope_norm", 2 * T * kQkvRow * 2,
         [&] { dev.b->qkv_split_rope(qkvv, hwv, hwv, 1e-6f, cv, sv, kD, qv, kv, vv); }},
        {"silu_mul", 3 * T * kInter * 2, [&] { dev.b->silu_mul(guv, av); }},
        {"kv_append", 0, [&] { dev.b->kv_append(ap); }},
        {"page_summary", 0, [&] { dev.b->page_summary_update(su); }},
        {"kv_append_index", 0, [&] { dev.b->kv_append(ap_index); }},
    };
    for (const Op& op : ops) {
      const double us = graph_us(dev, kCalls, op.fn);
      const Status err = dev.b->take_error();
      const double frac = op.bytes > 0 && us > 0 && copy_bps > 0
                              ? static_cast<double>(op.bytes) / (us * 1e-6) / copy_bps
                              : 0.0;
      out.write(
          fmt::format(R"({{"bench": "small", "op": "{}", "tokens": {}, "seqs": {}, "us": {:.2f}, )"
                      R"("bytes": {}, "copy_fraction": {:.3f}, "ok": {}}})",
                      op.name, T, seqs, us, op.bytes, frac, err.ok() && us > 0 ? "true" : "false"));
    }
  }
}

int run(int argc, char** argv) {
  auto backend = CudaBackend::create(0);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_cuda_kernels: %s\n", backend.status().to_string().c_str());
    return 2;
  }
  Device dev;
  dev.b = backend->get();
  dev.stream = static_cast<cudaStream_t>(dev.b->stream_handle());
  cudaDeviceProp prop{};
  die_on(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  dev.l2_bytes = prop.l2CacheSize;
  std::printf("# %s, L2 %.0f MB\n", dev.b->name().c_str(), static_cast<double>(dev.l2_bytes) / 1e6);
  JsonLines out(arg(argc, argv, "--out", ""));
  dev.policies = arg(argc, argv, "--policies", "dense,lserve");
  const std::string sections =
      arg(argc, argv, "--sections", "copy,gemm,linear,prefill,decode,small");
  const auto has = [&](const char* s) { return sections.find(s) != std::string::npos; };
  out.write(fmt::format(R"({{"bench": "device", "name": "{}", "sms": {}, "l2_mb": {:.0f}}})",
                        prop.name, prop.multiProcessorCount,
                        static_cast<double>(dev.l2_bytes) / 1e6));
  const double copy_bps = copy_bandwidth(*dev.b, kCopyCeilingBytes);
  bench_ceilings(dev, out, copy_bps, has("copy"), has("gemm"));
  if (has("linear")) {
    bench_linear(dev, out, parse_list(arg(argc, argv, "--linear-m", "1,8,32")), copy_bps);
  }
  // Before the long sections, so the kernels step's time limit never cuts it.
  if (has("small"))
    bench_small(dev, out, parse_list(arg(argc, argv, "--small-tokens", "1,8,512,4096")), copy_bps);
  std::vector<kernels::KvQuant> formats;
  if (!parse_kv_formats(arg(argc, argv, "--kv-formats", "bf16"), formats)) return 2;
  if (has("prefill")) {
    bench_prefill(dev, out, parse_list(arg(argc, argv, "--prefill-tokens", "8192,32768,131072")),
                  arg(argc, argv, "--prefill-kernels", "mma,wgmma"), formats);
  }
  if (has("fp8")) {  // bench_fp8_linear.cpp: bf16 against FP8 weights
    bench_fp8_linear(*dev.b, out,
                     parse_list(arg(argc, argv, "--fp8-m", "1,2,4,8,32,512,4096,16384")), copy_bps,
                     dev.l2_bytes);
  }
  if (has("lt-algos")) {  // bench_fp8_algos.cpp: cuBLASLt's algorithms and scale modes
    bench_fp8_algos(*dev.b, out, parse_list(arg(argc, argv, "--lt-algos-m", "4096,16384")),
                    static_cast<int>(std::clamp<int64_t>(
                        parse_list(arg(argc, argv, "--lt-algos-max", "8")).at(0), 1, 64)));
  }
  if (has("select")) {  // bench_select.cpp: one level against two levels
    bench_select(
        *dev.b, dev.stream, out, parse_list(arg(argc, argv, "--batches", "1,8,32")),
        parse_list(arg(argc, argv, "--select-contexts", "32768,131072,262144")),
        arg(argc, argv, "--select-data", "random,planted"),
        arg(argc, argv, "--select-fine", "device,host"),
        static_cast<int32_t>(parse_list(arg(argc, argv, "--summary-group-pages", "16"))[0]));
  }
  if (has("shared-prefix")) {  // bench_shared_prefix.cpp: shared-prefix against ordinary decode
    bench_shared_prefix(*dev.b, dev.stream, out,
                        parse_list(arg(argc, argv, "--shared-prefix-batches", "8,32")),
                        parse_list(arg(argc, argv, "--shared-prefix-tokens", "32768,131072")),
                        parse_list(arg(argc, argv, "--shared-prefix-suffix", "512"))[0],
                        parse_list(arg(argc, argv, "--shared-prefix-split", "1024"))[0]);
  }
  if (has("decode")) {
    std::vector<DecodeVariant> variants;
    const int default_ticketed = kernels::cuda::AttentionOptions{}.decode_ticketed_splits;
    const auto min_blocks = parse_list(arg(argc, argv, "--decode-min-blocks", "0"));
    for (const int64_t splits : parse_list(arg(argc, argv, "--decode-max-splits", "0"))) {
      for (const int64_t mb : min_blocks) {
        for (const int64_t pf : parse_list(arg(argc, argv, "--decode-l2-prefetch", "-1"))) {
          for (const int64_t pw : parse_list(arg(argc, argv, "--decode-prewait-prefetch", "-1"))) {
            for (const int64_t tk : parse_list(
                     arg(argc, argv, "--decode-ticketed", std::to_string(default_ticketed)))) {
              for (const int64_t cb : parse_list(arg(argc, argv, "--decode-chunk-blocks", "1"))) {
                variants.push_back({static_cast<int>(splits), static_cast<int>(mb),
                                    static_cast<int>(pf), static_cast<int>(pw),
                                    static_cast<int>(tk), static_cast<int>(cb)});
              }
            }
          }
        }
      }
    }
    const std::string trace_path = arg(argc, argv, "--decode-trace", "");
    std::FILE* trace = trace_path.empty() ? nullptr : std::fopen(trace_path.c_str(), "w");
    if (trace != nullptr) {
      std::fprintf(
          trace,
          "policy\tbatch\tcontext\tmax_splits\tmin_blocks\tprewait\tticketed\tchunk_blocks\t"
          "record\tkernel\tsplit\tsmid\t"
          "iterations\tstart\twaited\tfirst_data\tloop_end\tend\n");
    }
    bench_decode(dev, out, parse_list(arg(argc, argv, "--batches", "1,8,32")),
                 parse_list(arg(argc, argv, "--contexts", "8192,16384,32768,65536,131072,262144")),
                 copy_bps, variants,
                 std::max<int64_t>(1, parse_list(arg(argc, argv, "--decode-rounds", "1"))[0]),
                 trace, formats);
    if (trace != nullptr) std::fclose(trace);
  }
  return 0;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  return ls::bench::run(argc, argv);
}
