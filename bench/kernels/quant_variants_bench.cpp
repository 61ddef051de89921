// Kernel variants timed against each other in one process, alternated call by call (so load
// and frequency drift hit both alike), median of the repeats, with their ratio:
//  - quantized-weight linear (kernels/cpu/quant_matmul.h) per block type, GEMV (m = 1) and GEMM
//    (m = 64): Isa::kAvx2 (maddubs) against Isa::kAvx512 (vpdpbusd where the build targets
//    AVX512_VNNI; the line says which kernel ran);
//  - one layer's decode attention over quantized KV pages (kernels/cpu/attention.h) per format
//    (fp8, int8, int4): QuantKvDecode::kFused against kDequantize at the build's best ISA, and
//    bf16 pages for scale.
// Usage: bench_quant_variants [--threads 1,16] [--reps 7] [--context 16384]
// Prints one line per case; ratio > 1 means the second variant is faster.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/kv_quant.h"

namespace ls::bench {
namespace {

using kernels::AttentionParams;
using kernels::HeadMode;
using kernels::KvQuant;
using kernels::QuantMatrix;
using kernels::QuantPart;
using kernels::QuantType;
using kernels::cpu::Isa;

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms per call of a and b, alternated: each repeat times `iters` calls of a, then of b
// (iters chosen so that one timing covers about 2 ms).
void time_pair(const std::function<void()>& a, const std::function<void()>& b, int reps,
               double* ms_a, double* ms_b) {
  a();
  b();  // warm caches and the pool
  const double t0 = now_ms();
  a();
  const double once = std::max(now_ms() - t0, 1e-3);
  const int iters = std::max(1, static_cast<int>(2.0 / once));
  std::vector<double> ta, tb;
  for (int r = 0; r < reps; ++r) {
    double s = now_ms();
    for (int i = 0; i < iters; ++i) a();
    ta.push_back((now_ms() - s) / iters);
    s = now_ms();
    for (int i = 0; i < iters; ++i) b();
    tb.push_back((now_ms() - s) / iters);
  }
  *ms_a = median(ta);
  *ms_b = median(tb);
}

std::vector<uint8_t> random_blocks(QuantType type, int64_t nblocks) {
  const int64_t bytes = kernels::quant_block_bytes(type);
  std::vector<uint8_t> out(static_cast<size_t>(nblocks * bytes));
  std::mt19937 rng(5);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::vector<int> f16_fields = {0, 2};  // Q4_1, Q4_K, Q5_K: d, m / dmin
  if (type == QuantType::kQ8_0 || type == QuantType::kQ4_0) f16_fields = {0};
  if (type == QuantType::kQ6_K) f16_fields = {208};
  const uint16_t h = f32_to_f16(0.01f);
  for (int64_t i = 0; i < nblocks; ++i) {
    for (int off : f16_fields) std::memcpy(out.data() + i * bytes + off, &h, 2);
  }
  return out;
}

const char* type_name(QuantType t) {
  switch (t) {
    case QuantType::kQ8_0:
      return "Q8_0";
    case QuantType::kQ4_0:
      return "Q4_0";
    case QuantType::kQ4_1:
      return "Q4_1";
    case QuantType::kQ4_K:
      return "Q4_K";
    case QuantType::kQ5_K:
      return "Q5_K";
    case QuantType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

void bench_linear(ThreadPool& pool, int reps) {
  const bool has512 = kernels::cpu::isa_available(Isa::kAvx512);
  const std::string second =
      has512 ? std::string(kernels::cpu::quant_kernel_name(Isa::kAvx512)) : "(no avx512 build)";
  const int64_t rows = 4096, cols = 2048;  // weights: 8M values, 4.5-8.5 MB
  for (QuantType type : {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ4_K,
                         QuantType::kQ5_K, QuantType::kQ6_K}) {
    const auto w = random_blocks(type, rows * cols / kernels::quant_block_elems(type));
    QuantMatrix qm;
    qm.parts.push_back(QuantPart{type, w.data(), rows});
    qm.rows = rows;
    qm.cols = cols;
    for (int64_t m : {1, 64}) {
      std::vector<float> x(static_cast<size_t>(m * cols)), y(static_cast<size_t>(m * rows));
      fill_random(x.data(), DType::kF32, static_cast<int64_t>(x.size()), 3);
      const auto run = [&](Isa isa) {
        return [&, isa] { kernels::cpu::quant_linear(qm, x.data(), m, nullptr, y.data(), pool, isa); };
      };
      double a = 0, b = 0;
      time_pair(run(Isa::kAvx2), has512 ? run(Isa::kAvx512) : run(Isa::kAvx2), reps, &a, &b);
      std::printf("%s %-4s [%lld x %lld] m=%-3lld threads=%-3d avx2 %8.3f ms  %s %8.3f ms  "
                  "ratio %.3f\n",
                  m == 1 ? "gemv" : "gemm", type_name(type), static_cast<long long>(rows),
                  static_cast<long long>(cols), static_cast<long long>(m), pool.num_threads(), a,
                  second.c_str(), b, has512 ? a / b : 1.0);
      std::fflush(stdout);
    }
  }
}

// One layer's decode step (one sequence, one query token), 8 kv heads x group 4, head_dim 128,
// 64-token pages, every page visible (causal).
void bench_decode(ThreadPool& pool, int reps, int32_t context) {
  constexpr int32_t kv_heads = 8, group = 4, head_dim = 128, pt = 64;
  const int32_t q_heads = kv_heads * group;
  const int32_t pages = (context + pt - 1) / pt;
  const int64_t head_pages = int64_t{pages} * kv_heads;
  const Isa isa = kernels::cpu::best_isa();
  std::vector<int32_t> blocks(static_cast<size_t>(pages));
  for (int32_t i = 0; i < pages; ++i) blocks[static_cast<size_t>(i)] = i;
  std::vector<float> q(static_cast<size_t>(q_heads) * head_dim), out(q.size());
  fill_random(q.data(), DType::kF32, static_cast<int64_t>(q.size()), 9);
  const std::vector<int32_t> q_indptr = {0, 1}, kv_lens = {context};
  std::vector<int32_t> modes(kv_heads, static_cast<int32_t>(HeadMode::kCausal)), slot(kv_heads);
  for (int32_t h = 0; h < kv_heads; ++h) slot[static_cast<size_t>(h)] = h;
  double bf16_ms = 0;
  for (KvQuant quant : {KvQuant::kNone, KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    std::vector<uint8_t> k, v;
    fill_kv_pages(quant, head_pages, pt, head_dim, k, v);
    AttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.num_tokens = 1;
    p.num_q_heads = q_heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    p.num_seqs = 1;
    p.q_indptr = q_indptr.data();
    p.kv_lens = kv_lens.data();
    p.head_mode = modes.data();
    p.head_slot = slot.data();
    p.retrieval =
        kernels::PagedKvPool{k.data(), v.data(), DType::kBF16, pages, kv_heads, pt, head_dim};
    if (quant != KvQuant::kNone) {
      p.retrieval.dtype = DType::kU8;
      p.retrieval.quant = quant;
    }
    p.retrieval_blocks = blocks.data();
    p.retrieval_blocks_stride = pages;
    const auto run = [&](kernels::cpu::QuantKvDecode mode) {
      return [&, mode] { kernels::cpu::paged_attention(p, pool, isa, mode); };
    };
    double a = 0, b = 0;
    time_pair(run(kernels::cpu::QuantKvDecode::kDequantize),
              run(kernels::cpu::QuantKvDecode::kFused), reps, &a, &b);
    if (quant == KvQuant::kNone) {
      bf16_ms = b;
      std::printf("decode bf16 ctx=%d d=%d threads=%-3d isa=%s %8.3f ms\n", context, head_dim,
                  pool.num_threads(), std::string(kernels::cpu::isa_name(isa)).c_str(), b);
    } else {
      std::printf("decode %-4s ctx=%d d=%d threads=%-3d isa=%s dequantize %8.3f ms  fused %8.3f ms"
                  "  ratio %.3f  (fused / bf16 %.3f)\n",
                  kernels::kv_quant_name(quant), context, head_dim, pool.num_threads(),
                  std::string(kernels::cpu::isa_name(isa)).c_str(), a, b, a / b, b / bf16_ms);
    }
    std::fflush(stdout);
  }
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  std::string str(s);
  size_t pos = 0;
  while (pos <= str.size()) {
    const size_t comma = std::min(str.find(',', pos), str.size());
    out.push_back(std::atoi(str.substr(pos, comma - pos).c_str()));
    pos = comma + 1;
  }
  return out;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 16};
  int reps = 7;
  int context = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--threads") {
      threads = ls::bench::parse_list(argv[i + 1]);
    } else if (flag == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--context") {
      context = std::max(64, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0) {
    std::fprintf(stderr, "usage: %s [--threads 1,16] [--reps 7] [--context 16384]\n", argv[0]);
    return 2;
  }
  for (int n : threads) {
    if (n <= 0) {
      std::fprintf(stderr, "--threads takes positive counts\n");
      return 2;
    }
    ls::ThreadPool pool(n);
    ls::bench::bench_linear(pool, reps);
    ls::bench::bench_decode(pool, reps, context);
  }
  return 0;
}
