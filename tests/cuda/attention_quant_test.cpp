// The CUDA attention kernels over quantized pages (fp8 / int8 / int4, kernels/kv_quant.h) against
// kernels/cpu run on the dequantized pages as f32 pools, on the attention scenarios of
// attention_scenario.h: decode batches mixing causal, streaming and selected heads, head_dim 64
// and 128, GQA 1/4/8, pages of 16 and 64 tokens, bf16 and f16 queries, one split and many. The
// prefill rounds each dequantized value once to the query dtype for the tensor cores (fp32
// accumulation); the decode runs its MMAs on the codes (exact in f16) with the queries exact in
// f16, rounding only P times the V scale to f16 (2^-11 relative; docs/kv-quantization.md derives
// the bound: at most 2^-11 of a row's value range), so for both the tolerance is the bf16 / f16
// kernels' one. Prefill chunks run the mma.sync prefill kernel's quantized instantiation and, at
// head_dim 128, the warp-specialised wgmma kernel's (its producer dequantizes into the tiles). A
// head_dim without a quantized kernel fails with an error.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_scenario.h"
#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/kv_quant.h"

namespace ls::cuda_test {
namespace {

using kernels::HeadMode;
using kernels::KvQuant;

// A pool's quantized bytes (host and device) and its dequantized values as an f32 pool.
struct QuantPool {
  std::vector<uint8_t> bytes_k, bytes_v;
  std::vector<float> deq_k, deq_v;
  DeviceArray dev_k, dev_v;
};

QuantPool quantize_pool(const kernels::PagedKvPool& pool, DType dt, KvQuant q) {
  QuantPool out;
  const int32_t pt = pool.page_tokens, d = pool.head_dim;
  const int64_t pages = int64_t{pool.num_blocks} * pool.heads_per_block;
  out.bytes_k.assign(static_cast<size_t>(pages * kernels::kv_quant_page_bytes(q, pt, d)), 0);
  out.bytes_v.assign(out.bytes_k.size(), 0);
  out.deq_k.assign(static_cast<size_t>(pages * pt * d), 0.0f);
  out.deq_v.assign(out.deq_k.size(), 0.0f);
  const void* src[2] = {pool.k, pool.v};
  std::vector<uint8_t>* bytes[2] = {&out.bytes_k, &out.bytes_v};
  std::vector<float>* deq[2] = {&out.deq_k, &out.deq_v};
  std::vector<float> row(static_cast<size_t>(d));
  for (int a = 0; a < 2; ++a) {
    for (int64_t page = 0; page < pages; ++page) {
      for (int32_t r = 0; r < pt; ++r) {
        const int64_t e0 = (page * pt + r) * d;
        convert_to_f32(dt, static_cast<const char*>(src[a]) + dtype_nbytes(dt, e0), row.data(), d);
        const kernels::KvQuantRow at = kernels::kv_quant_row(q, bytes[a]->data(), page, r, pt, d);
        kernels::kv_quantize_row(q, row.data(), d, at.codes, at.params);
        for (int32_t e = 0; e < d; ++e) {
          (*deq[a])[static_cast<size_t>(e0 + e)] =
              kernels::kv_dequantize_element(q, at.codes, at.params, e);
        }
      }
    }
  }
  out.dev_k = DeviceArray::of(out.bytes_k);
  out.dev_v = DeviceArray::of(out.bytes_v);
  return out;
}

kernels::PagedKvPool as_f32(kernels::PagedKvPool p, QuantPool& q) {
  p.k = q.deq_k.data();
  p.v = q.deq_v.data();
  p.dtype = DType::kF32;
  return p;
}

kernels::PagedKvPool as_quant(kernels::PagedKvPool p, const QuantPool& q, KvQuant quant) {
  p.k = q.dev_k.data();
  p.v = q.dev_v.data();
  p.dtype = DType::kU8;
  p.quant = quant;
  return p;
}

// The GPU on quantized pages against the CPU on their dequantized values.
void check_quantized(AttentionScenario& sc, KvQuant q, const std::string& label) {
  const DType dt = sc.config().dtype;
  const kernels::AttentionParams hp0 = sc.host_params(nullptr);
  QuantPool r = quantize_pool(hp0.retrieval, dt, q);
  QuantPool s = quantize_pool(hp0.streaming, dt, q);

  HostArray cpu_out(sc.out_numel(), dt);
  cpu_out.fill(kNaN);
  kernels::AttentionParams hp = sc.host_params(cpu_out.data());
  hp.retrieval = as_f32(hp.retrieval, r);
  hp.streaming = as_f32(hp.streaming, s);
  kernels::cpu::paged_attention(hp, cpu_pool());
  std::vector<float> want(static_cast<size_t>(sc.out_numel()));
  convert_to_f32(dt, cpu_out.data(), want.data(), sc.out_numel());

  DeviceArray out(dtype_nbytes(dt, sc.out_numel()));
  out.poison(dt, sc.out_numel());
  kernels::AttentionParams dp = sc.device_params(out.data());
  dp.retrieval = as_quant(dp.retrieval, r, q);
  dp.streaming = as_quant(dp.streaming, s, q);
  gpu()->attention(dp);
  const Status st = gpu()->take_error();
  EXPECT_TRUE(st.ok()) << label << ": " << st.to_string();
  const std::vector<float> got = out.download_floats(dt, sc.out_numel());
  const double tol = rel_tol(dt);
  EXPECT_TRUE(close_to(got, want, 1.5 * tol, 3 * tol)) << label;
}

std::vector<SeqSpec> decode_batch(std::mt19937& rng, int32_t pt, int32_t num_kv, int32_t n,
                                  int32_t max_len) {
  std::uniform_int_distribution<int32_t> len(1, max_len);
  std::vector<SeqSpec> seqs(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    SeqSpec& s = seqs[static_cast<size_t>(i)];
    s.kv_len = len(rng);
    s.q_len = 1;
    s.local_tokens = std::uniform_int_distribution<int32_t>(1, 4 * pt)(rng);
    s.selected_row = i % 3 == 2 ? -1 : i;
    const int32_t pages = (s.kv_len + pt - 1) / pt;
    s.selected.resize(static_cast<size_t>(num_kv));
    for (auto& l : s.selected) {
      for (int32_t j = 0; j < pages; ++j) {
        if (std::bernoulli_distribution(0.3)(rng)) l.push_back(j);
      }
    }
  }
  return seqs;
}

TEST(CudaAttentionQuantized, DecodeMatchesCpuOnDequantizedPages) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(91);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t d : {64, 128}) {
      // 8 query heads per block over quantized pages: 7 leaves a column pair half empty, 12 takes a
      // full block and a half-empty one.
      for (int32_t group : {1, 4, 7, 8, 12}) {
        for (int32_t pt : {16, 64}) {
          ScenarioConfig cfg;
          cfg.head_dim = d;
          cfg.group = group;
          cfg.page_tokens = pt;
          cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
          cfg.sink_tokens = pt / 2 + 3;
          cfg.dtype = (d + group) % 3 == 0 ? DType::kF16 : DType::kBF16;
          AttentionScenario sc(rng, cfg, decode_batch(rng, pt, 3, 5, 1500));
          check_quantized(sc, q,
                          std::string(kernels::kv_quant_name(q)) + " d " + std::to_string(d) +
                              " group " + std::to_string(group) + " page " + std::to_string(pt) +
                              " " + dtype_label(cfg.dtype));
        }
      }
    }
  }
}

// One long sequence, so the span is split across many blocks (and reduced), and a batch of 32.
TEST(CudaAttentionQuantized, LongContextSplitsAndLargeBatch) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(92);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    ScenarioConfig cfg;
    cfg.head_dim = 128;
    cfg.group = 4;
    cfg.page_tokens = 64;
    cfg.modes = {HeadMode::kCausal, HeadMode::kSelected};
    SeqSpec s;
    s.kv_len = 40000;
    s.selected_row = 0;
    s.selected = {{}, {0, 3, 4, 50, 51, 90, 124, 300, 500}};
    AttentionScenario one(rng, cfg, {s});
    check_quantized(one, q, std::string(kernels::kv_quant_name(q)) + " 40K");
    cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming};
    AttentionScenario batch(rng, cfg, decode_batch(rng, 64, 2, 32, 4000));
    check_quantized(batch, q, std::string(kernels::kv_quant_name(q)) + " batch 32");
  }
}

// The decode kernel over quantized pages takes 128 keys per iteration (kDecodeQuantKeys,
// attention_decode.cuh): key counts just below, at and
// above multiples of 64 and 128, streaming windows ending there (ring wrap included), selected
// pages, pages of 16, 32 and 64 tokens, one split and several of a single block each
// (min_blocks_per_split 1), so that blocks end inside pages, splits end inside the row and the
// last block of a split is partial.
TEST(CudaAttentionQuantized, DecodeBlockEdgesAndSplits) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(96);
  const int32_t lens[] = {1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 383, 385, 1023};
  const int32_t windows[] = {1, 64, 127, 128, 129, 200};
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t d : {64, 128}) {
      for (int32_t pt : {16, 32, 64}) {
        ScenarioConfig cfg;
        cfg.head_dim = d;
        cfg.group = pt == 32 ? 8 : 4;
        cfg.page_tokens = pt;
        cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
        cfg.sink_tokens = pt / 2 + 3;
        cfg.dtype = pt == 32 ? DType::kF16 : DType::kBF16;
        std::vector<SeqSpec> seqs;
        for (size_t i = 0; i < std::size(lens); ++i) {
          SeqSpec s;
          s.kv_len = lens[i];
          s.q_len = 1;
          s.local_tokens = windows[i % std::size(windows)];
          s.selected_row = static_cast<int32_t>(i);
          const int32_t pages = (s.kv_len + pt - 1) / pt;
          s.selected.resize(3);
          for (auto& l : s.selected) {
            for (int32_t j = 0; j < pages; ++j) {
              if (std::bernoulli_distribution(0.5)(rng)) l.push_back(j);
            }
          }
          seqs.push_back(std::move(s));
        }
        AttentionScenario sc(rng, cfg, seqs);
        for (int32_t splits : {0, 3, 8}) {
          kernels::cuda::AttentionOptions o;
          o.max_splits = splits;
          o.min_blocks_per_split = splits == 0 ? 0 : 1;
          ScopedAttentionOptions scoped(o);
          check_quantized(sc, q,
                          std::string(kernels::kv_quant_name(q)) + " d " + std::to_string(d) +
                              " page " + std::to_string(pt) + " splits " + std::to_string(splits));
        }
      }
    }
  }
}

// Prefill chunks, whole prompts and decode tokens in one batch over quantized pages: the
// mma.sync prefill kernel with 4 warps and with 8 (the tile shape the wgmma options plan), and
// the warp-specialised wgmma kernel at head_dim 128 (kAuto's choice there), whose producer
// stages each block's codes two blocks ahead (the 700-key chunk wraps its three buffers).
TEST(CudaAttentionQuantized, MixedPrefillBatchesMatchCpuOnDequantizedPages) {
  LS_REQUIRE_CUDA();
  using kernels::cuda::AttentionOptions;
  using kernels::cuda::PrefillKernel;
  std::mt19937 rng(94);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t d : {64, 128}) {
      // mma.sync with 4 warps, with 8 (kWgmma over quantized pages), and the warp-specialised
      // wgmma kernel (head_dim 128).
      for (const PrefillKernel kernel :
           {PrefillKernel::kMma, PrefillKernel::kWgmma, PrefillKernel::kWgmmaWs}) {
        if (kernel == PrefillKernel::kWgmmaWs && d != 128) continue;
        AttentionOptions o;
        o.prefill_kernel = kernel;
        ScopedAttentionOptions scoped(o);
        ScenarioConfig cfg;
        cfg.head_dim = d;
        cfg.group = 4;
        cfg.page_tokens = 64;
        cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
        cfg.sink_tokens = 35;
        std::vector<SeqSpec> seqs = decode_batch(rng, 64, 3, 3, 900);
        SeqSpec chunk;  // a chunk continuing a longer prompt
        chunk.kv_len = 700;
        chunk.q_len = 150;
        chunk.local_tokens = 100;
        SeqSpec prompt;  // a whole prompt
        prompt.kv_len = 333;
        prompt.q_len = 333;
        prompt.local_tokens = 64;
        seqs.push_back(chunk);
        seqs.push_back(prompt);
        AttentionScenario sc(rng, cfg, seqs);
        check_quantized(sc, q,
                        std::string(kernels::kv_quant_name(q)) + " prefill d " + std::to_string(d) +
                            (kernel == PrefillKernel::kMma     ? " 4 warps"
                             : kernel == PrefillKernel::kWgmma ? " 8 warps"
                                                               : " warp-specialised"));
      }
    }
  }
}

// The warp-specialised kernel over quantized pages as kAuto runs it at head_dim 128, on pages
// smaller than its 64-key blocks (a block spans 2 or 4 pages: its producer's page / row split),
// with f16 queries (pages of 32), a prefill chunk whose selected head keeps pages with gaps, and
// a one-block prompt (fewer blocks than the producer copies ahead).
TEST(CudaAttentionQuantized, WarpSpecialisedPrefillAcrossPagesAndSelections) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(97);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t pt : {16, 32}) {
      ScenarioConfig cfg;
      cfg.head_dim = 128;
      cfg.group = 4;
      cfg.page_tokens = pt;
      cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
      cfg.sink_tokens = pt;
      cfg.dtype = pt == 32 ? DType::kF16 : DType::kBF16;
      std::vector<SeqSpec> seqs = decode_batch(rng, pt, 3, 3, 900);
      const int32_t pages = 900 / pt;
      seqs.push_back({.kv_len = 900,
                      .q_len = 200,
                      .local_tokens = 100,
                      .selected_row = 3,
                      .selected = {{}, {}, {1, 3, 4, 10, pages / 2}}});
      seqs.push_back({.kv_len = 333, .q_len = 333, .local_tokens = 64});
      seqs.push_back({.kv_len = 40, .q_len = 40, .local_tokens = 64});
      AttentionScenario sc(rng, cfg, seqs);
      check_quantized(
          sc, q, std::string(kernels::kv_quant_name(q)) + " ws prefill page " + std::to_string(pt));
    }
  }
}

// The GPU on the quantized pools r (retrieval) and s (streaming). With `slots`, the retrieval pool
// is a tier's page cache: head-page h lives in cache slot slots[h] and the homes hold 0xff bytes
// (NaN codes and NaN scales), which a kernel must not read.
std::vector<float> run_quantized(AttentionScenario& sc, KvQuant q, const QuantPool& r,
                                 const QuantPool& s, const std::vector<int32_t>* slots) {
  const DType dt = sc.config().dtype;
  DeviceArray out(dtype_nbytes(dt, sc.out_numel()));
  out.poison(dt, sc.out_numel());
  kernels::AttentionParams dp = sc.device_params(out.data());
  dp.retrieval = as_quant(dp.retrieval, r, q);
  dp.streaming = as_quant(dp.streaming, s, q);
  DeviceArray ck, cv, home_k, home_v, d_slots;
  if (slots != nullptr) {
    const int64_t pb =
        kernels::kv_quant_page_bytes(q, dp.retrieval.page_tokens, dp.retrieval.head_dim);
    std::vector<uint8_t> cache_k(r.bytes_k.size()), cache_v(r.bytes_v.size());
    for (size_t h = 0; h < slots->size(); ++h) {
      const auto from = static_cast<std::ptrdiff_t>(static_cast<int64_t>(h) * pb);
      const auto to = static_cast<std::ptrdiff_t>(int64_t{(*slots)[h]} * pb);
      std::copy(r.bytes_k.begin() + from, r.bytes_k.begin() + from + pb, cache_k.begin() + to);
      std::copy(r.bytes_v.begin() + from, r.bytes_v.begin() + from + pb, cache_v.begin() + to);
    }
    ck = DeviceArray::of(cache_k);
    cv = DeviceArray::of(cache_v);
    home_k = DeviceArray::of(std::vector<uint8_t>(r.bytes_k.size(), 0xff));
    home_v = DeviceArray::of(std::vector<uint8_t>(r.bytes_v.size(), 0xff));
    d_slots = DeviceArray::of(*slots);
    dp.retrieval.k = ck.data();
    dp.retrieval.v = cv.data();
    dp.retrieval.home_k = home_k.data();
    dp.retrieval.home_v = home_v.data();
    dp.retrieval.page_slot = d_slots.as<int32_t>();
    dp.retrieval.num_cache_slots = static_cast<int32_t>(slots->size());
  }
  gpu()->attention(dp);
  const Status st = gpu()->take_error();
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out.download_floats(dt, sc.out_numel());
}

// The decode kernel's tiered instantiation over quantized pages (retrieval head-pages in shuffled
// cache slots, poisoned homes; streaming heads in their own untiered pool), and the prefill
// kernel of a chunk in the same batch, give the untiered run's outputs bit for bit, one split and
// many (128-key iterations, the only shape launched); and a call asking for ticketed splits
// (which quantized pages serve with fixed splits) stays within the kernels' tolerance of the CPU.
TEST(CudaAttentionQuantized, TieredSlotsAndTicketedCallsMatchThePlainRun) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(95);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t d : {64, 128}) {
      ScenarioConfig cfg;
      cfg.head_dim = d;
      cfg.group = 4;
      cfg.page_tokens = d == 64 ? 16 : 64;
      cfg.modes = {HeadMode::kSelected, HeadMode::kStreaming, HeadMode::kCausal};
      cfg.sink_tokens = cfg.page_tokens / 2 + 3;
      std::vector<SeqSpec> seqs = decode_batch(rng, cfg.page_tokens, 3, 4, 1200);
      SeqSpec longer;  // many splits
      longer.kv_len = 9000;
      longer.q_len = 1;
      longer.local_tokens = 100;
      seqs.push_back(longer);
      SeqSpec chunk;  // a prefill chunk: the prefill kernels read the cache slots too
      chunk.kv_len = 700;
      chunk.q_len = 130;
      chunk.local_tokens = 100;
      seqs.push_back(chunk);
      AttentionScenario sc(rng, cfg, seqs);
      const std::string label = std::string(kernels::kv_quant_name(q)) + " d " + std::to_string(d);
      const kernels::AttentionParams hp = sc.host_params(nullptr);
      const QuantPool r = quantize_pool(hp.retrieval, cfg.dtype, q);
      const QuantPool s = quantize_pool(hp.streaming, cfg.dtype, q);
      const std::vector<float> plain = run_quantized(sc, q, r, s, nullptr);
      std::vector<int32_t> slots(
          static_cast<size_t>(int64_t{hp.retrieval.num_blocks} * hp.retrieval.heads_per_block));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      const std::vector<float> tiered = run_quantized(sc, q, r, s, &slots);
      ASSERT_EQ(tiered.size(), plain.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        ASSERT_TRUE(tiered[i] == plain[i] || (std::isnan(tiered[i]) && std::isnan(plain[i])))
            << label << ": element " << i << " " << tiered[i] << " vs " << plain[i];
      }
      kernels::cuda::AttentionOptions o;
      o.decode_ticketed_splits = 1;
      ScopedAttentionOptions scoped(o);
      check_quantized(sc, q, label + " ticketed");
    }
  }
}

// A head_dim no quantized kernel covers is refused with an error, never computed on misread
// bytes.
TEST(CudaAttentionQuantized, UncoveredHeadDimIsRefused) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(93);
  for (int32_t q_len : {1, 20}) {
    ScenarioConfig cfg;
    cfg.head_dim = 32;
    SeqSpec s;
    s.kv_len = 100;
    s.q_len = q_len;
    AttentionScenario sc(rng, cfg, {s});
    QuantPool r = quantize_pool(sc.host_params(nullptr).retrieval, cfg.dtype, KvQuant::kInt8);
    DeviceArray out(dtype_nbytes(cfg.dtype, sc.out_numel()));
    kernels::AttentionParams dp = sc.device_params(out.data());
    dp.retrieval = as_quant(dp.retrieval, r, KvQuant::kInt8);
    dp.streaming = kernels::PagedKvPool{};
    gpu()->attention(dp);
    EXPECT_FALSE(gpu()->take_error().ok()) << "q_len " << q_len;
  }
}

}  // namespace
}  // namespace ls::cuda_test
