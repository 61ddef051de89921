// paged_attention on quantized pages (fp8 / int8 / int4, kernels/kv_quant.h) against the same
// kernel on the dequantized pages as f32 pools, across the attention scenarios of
// attention_test.cpp (mixed modes and batches, prefill tiles, streaming rings, split decode),
// for every ISA. Where the kernel dequantizes each visited page into f32 and then runs the f32
// arithmetic (prefill tiles, the scalar ISA, shapes the fused paths do not cover) the two runs
// must agree bit for bit. Decode tiles with AVX2 run Q·K^T and P·V on the codes: int8 / int4
// with int16 queries and int16 P (kernels/cpu/attention_quant_int.h), within kIntPathTol
// (derived below); fp8 widened in registers (attention_quant_fp8.h), exact values in another
// summation order, within kFp8PathTol. The poisoned (NaN) rows of the scenario stay NaN through
// quantization, so a visit to a wrong page still shows. The error against the unquantized dense
// reference is checked against a loose per-format bound and printed. f16 pages (written by the
// append path's kv_store_f16) are checked against f32 pools holding their widened values (to f32
// rounding: the summation order differs).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "attention_case.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_append.h"
#include "kernels/cpu/simd.h"
#include "kernels/kv_quant.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

ThreadPool& pool2() {
  static ThreadPool pool(2);
  return pool;
}

// A quantized copy of an f32 pool and the f32 pool of its dequantized values.
struct QuantizedPool {
  std::vector<uint8_t> k, v;
  std::vector<float> dk, dv;
  PagedKvPool quant, dequant;
};

QuantizedPool quantize_pool(const PagedKvPool& f32, KvQuant q) {
  QuantizedPool out;
  const int32_t pt = f32.page_tokens, d = f32.head_dim;
  const int64_t pages = int64_t{f32.num_blocks} * f32.heads_per_block;
  out.k.assign(static_cast<size_t>(pages * kv_quant_page_bytes(q, pt, d)), 0);
  out.v.assign(out.k.size(), 0);
  out.dk.assign(static_cast<size_t>(pages * pt * d), 0.0f);
  out.dv.assign(out.dk.size(), 0.0f);
  const float* src[2] = {static_cast<const float*>(f32.k), static_cast<const float*>(f32.v)};
  std::vector<uint8_t>* codes[2] = {&out.k, &out.v};
  std::vector<float>* deq[2] = {&out.dk, &out.dv};
  for (int a = 0; a < 2; ++a) {
    for (int64_t page = 0; page < pages; ++page) {
      for (int32_t r = 0; r < pt; ++r) {
        const int64_t row = (page * pt + r) * d;
        const KvQuantRow at = kv_quant_row(q, codes[a]->data(), page, r, pt, d);
        kv_quantize_row(q, src[a] + row, d, at.codes, at.params);
        for (int32_t e = 0; e < d; ++e) {
          (*deq[a])[static_cast<size_t>(row + e)] =
              kv_dequantize_element(q, at.codes, at.params, e);
        }
      }
    }
  }
  out.quant = f32;
  out.quant.k = out.k.data();
  out.quant.v = out.v.data();
  out.quant.dtype = DType::kU8;
  out.quant.quant = q;
  out.dequant = f32;
  out.dequant.k = out.dk.data();
  out.dequant.v = out.dv.data();
  return out;
}

// An f16 copy of an f32 pool (the append path's conversion) and the f32 pool of its values.
struct HalfPool {
  std::vector<uint16_t> k, v;
  std::vector<float> wk, wv;
  PagedKvPool half, widened;
};

HalfPool half_pool(const PagedKvPool& f32) {
  HalfPool out;
  const int64_t n = int64_t{f32.num_blocks} * f32.heads_per_block * f32.page_tokens * f32.head_dim;
  out.k.resize(static_cast<size_t>(n));
  out.v.resize(static_cast<size_t>(n));
  cpu::kv_store_f16(static_cast<const float*>(f32.k), out.k.data(), n);
  cpu::kv_store_f16(static_cast<const float*>(f32.v), out.v.data(), n);
  out.wk.resize(static_cast<size_t>(n));
  out.wv.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out.wk[static_cast<size_t>(i)] = f16_to_f32(out.k[static_cast<size_t>(i)]);
    out.wv[static_cast<size_t>(i)] = f16_to_f32(out.v[static_cast<size_t>(i)]);
  }
  out.half = f32;
  out.half.k = out.k.data();
  out.half.v = out.v.data();
  out.half.dtype = DType::kF16;
  out.widened = f32;
  out.widened.k = out.wk.data();
  out.widened.v = out.wv.data();
  return out;
}

// Loose bounds on |out - unquantized reference| for keys and values in [-1, 1] and queries in
// [-3, 3]: half a quantization step of V (int8 2/510, int4 2/30, fp8 1/16 relative) plus the
// softmax weights' change from the keys' error.
double loose_bound(KvQuant q) {
  switch (q) {
    case KvQuant::kInt8:
      return 0.02;
    case KvQuant::kInt4:
      return 0.3;
    default:
      return 0.12;
  }
}

// |out(quantized pages) - out(dequantized pages)| where the integer decode path runs. Keys and
// values in [-1, 1], queries in [-3, 3] times 1/sqrt(head_dim):
//  - int16 queries: |q - q^| <= max|q| / 65534 per element, so each score moves by at most
//    head_dim * max|q| * max|k| / 65534 <= 128 * 0.27 / 65534 = 5.3e-4, and the softmax-weighted
//    output by at most 2 * 5.3e-4 * max|v| = 1.1e-3;
//  - int16 P: per page and row |p' - p'^| <= max_j p'_j / 65534 with p' = p * scale, so a page
//    adds at most page_tokens * 255 * max_j p'_j / 65534 <= 64 * 2 * max_j p_j / 65534 to o,
//    and o / l, l >= the sum of the pages' max_j p_j, moves by at most 2.0e-3.
// Hence 3.1e-3 (f32 summation order adds ~1e-6); typical differences are ~1e-5 (printed).
[[maybe_unused]] constexpr double kIntPathTol = 3.1e-3;
// f32 sums of the same products in another order: a few ulps of the largest partial sums.
[[maybe_unused]] constexpr double kFp8PathTol = 2e-5;

// Largest error against the unquantized reference per format over a test, printed at its end,
// and the largest difference between quantized and dequantized pages on the integer path.
struct WorstError {
  double err[4] = {0, 0, 0, 0};
  double int_path = 0;
  double fp8_path = 0;
  // The same per ISA (indexed by Isa): each vector ISA must run the fused paths.
  double int_path_isa[3] = {0, 0, 0};
  double fp8_path_isa[3] = {0, 0, 0};
  double f16 = 0;
  ~WorstError() {
    std::printf("  max |out - unquantized reference|: fp8 %.4g, int8 %.4g, int4 %.4g, f16 %.4g\n",
                err[static_cast<int>(KvQuant::kFp8)], err[static_cast<int>(KvQuant::kInt8)],
                err[static_cast<int>(KvQuant::kInt4)], f16);
    std::printf("  max |quantized - dequantized pages| on the fused decode paths: int8/int4 %.3g, "
                "fp8 %.3g\n",
                int_path, fp8_path);
  }
};

// The tolerance against the dequantized pages: 0 where only the dequantizing path runs, else
// the fused decode path's (it runs for decode tiles only; prefill tiles of the same case stay
// bitwise, which the bound also covers). AVX2 and AVX-512 both run the fused (256-bit) code;
// AVX-512 runs scalar code for head dims that are not whole 16-float vectors.
double fused_path_tol(KvQuant q, Isa isa, const CaseConfig& cfg) {
#if defined(LS_KERNELS_HAVE_AVX2)
  if (isa == Isa::kScalar) return 0.0;
  if (isa == Isa::kAvx512 && cfg.head_dim % 16 != 0) return 0.0;
  if (q == KvQuant::kFp8) return cfg.head_dim % 16 == 0 ? kFp8PathTol : 0.0;
  return cfg.head_dim % 32 == 0 && cfg.page_tokens % 2 == 0 ? kIntPathTol : 0.0;
#else
  (void)q;
  (void)isa;
  (void)cfg;
  return 0.0;
#endif
}

void expect_quantized_matches_dequantized(const AttentionCase& c, ThreadPool& pool,
                                          const std::string& label, WorstError& worst) {
  ASSERT_EQ(c.config().kv_dtype, DType::kF32);
  const std::vector<double> want = c.reference();
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    const AttentionParams base = c.params(nullptr);
    const QuantizedPool r = quantize_pool(base.retrieval, q);
    const QuantizedPool s = quantize_pool(base.streaming, q);
    for (Isa isa : all_isas()) {
      const auto on_quant = c.run([&](AttentionParams p) {
        p.retrieval = r.quant;
        p.streaming = s.quant;
        cpu::paged_attention(p, pool, isa);
      });
      const auto on_dequant = c.run([&](AttentionParams p) {
        p.retrieval = r.dequant;
        p.streaming = s.dequant;
        cpu::paged_attention(p, pool, isa);
      });
      // QuantKvDecode::kDequantize (the benchmarks' baseline) is the f32 kernel on the
      // dequantized pages on every ISA: identical bits.
      const auto forced = c.run([&](AttentionParams p) {
        p.retrieval = r.quant;
        p.streaming = s.quant;
        cpu::paged_attention(p, pool, isa, cpu::QuantKvDecode::kDequantize);
      });
      ASSERT_EQ(on_quant.size(), on_dequant.size());
      ASSERT_EQ(forced.size(), on_dequant.size());
      for (size_t i = 0; i < forced.size(); ++i) {
        ASSERT_FALSE(std::isnan(forced[i])) << label << " " << kv_quant_name(q) << " i=" << i;
        ASSERT_EQ(forced[i], on_dequant[i])
            << label << " " << kv_quant_name(q) << " kDequantize isa=" << isa_label(isa)
            << " i=" << i;
      }
      double max_err = 0;
      const double tol = fused_path_tol(q, isa, c.config());
      for (size_t i = 0; i < on_quant.size(); ++i) {
        ASSERT_FALSE(std::isnan(on_quant[i])) << label << " " << kv_quant_name(q) << " i=" << i;
        if (tol > 0.0) {
          const double diff = std::fabs(on_quant[i] - on_dequant[i]);
          ASSERT_LE(diff, tol)
              << label << " " << kv_quant_name(q) << " isa=" << isa_label(isa) << " i=" << i;
          double& w = q == KvQuant::kFp8 ? worst.fp8_path : worst.int_path;
          w = std::max(w, diff);
          double& wi = q == KvQuant::kFp8 ? worst.fp8_path_isa[static_cast<int>(isa)]
                                          : worst.int_path_isa[static_cast<int>(isa)];
          wi = std::max(wi, diff);
        } else {
          // Same f32 arithmetic on the same values: identical bits.
          ASSERT_EQ(on_quant[i], on_dequant[i])
              << label << " " << kv_quant_name(q) << " isa=" << isa_label(isa) << " i=" << i;
        }
        max_err = std::max(max_err, std::fabs(on_quant[i] - want[i]));
      }
      EXPECT_LE(max_err, loose_bound(q)) << label << " " << kv_quant_name(q);
      double& w = worst.err[static_cast<int>(q)];
      w = std::max(w, max_err);
    }
  }
  const AttentionParams base = c.params(nullptr);
  const HalfPool r = half_pool(base.retrieval);
  const HalfPool s = half_pool(base.streaming);
  for (Isa isa : all_isas()) {
    const auto on_half = c.run([&](AttentionParams p) {
      p.retrieval = r.half;
      p.streaming = s.half;
      cpu::paged_attention(p, pool, isa);
    });
    const auto on_widened = c.run([&](AttentionParams p) {
      p.retrieval = r.widened;
      p.streaming = s.widened;
      cpu::paged_attention(p, pool, isa);
    });
    ASSERT_EQ(on_half.size(), on_widened.size());
    double max_err = 0;
    for (size_t i = 0; i < on_half.size(); ++i) {
      ASSERT_FALSE(std::isnan(on_half[i])) << label << " f16 i=" << i;
      // Exact widening of the same values; the f16 path sums in another order than f32 pages
      // read in place, so equal to f32 rounding (outputs are in [-1, 1]), not bitwise.
      ASSERT_NEAR(on_half[i], on_widened[i], 2e-6)
          << label << " f16 isa=" << isa_label(isa) << " i=" << i;
      max_err = std::max(max_err, std::fabs(on_half[i] - want[i]));
    }
    // 11 significant bits: half a step of a value in [-1, 1] is 2^-12, plus the softmax
    // weights' change from the keys' error.
    EXPECT_LE(max_err, 2e-3) << label << " f16";
    worst.f16 = std::max(worst.f16, max_err);
  }
}

std::vector<SeqSpec> mixed_batch(std::mt19937& rng, int32_t page_tokens, int32_t num_kv_heads) {
  std::uniform_int_distribution<int32_t> len(2 * page_tokens, 6 * page_tokens);
  std::vector<SeqSpec> seqs(4);
  seqs[0].kv_len = len(rng);  // decode
  seqs[0].q_len = 1;
  seqs[1].kv_len = len(rng) + 40;  // chunk of a longer prompt (lanes layout tiles)
  seqs[1].q_len = 37;
  seqs[2].kv_len = 70;  // whole prompt
  seqs[2].q_len = 70;
  seqs[3].kv_len = 1;
  seqs[3].q_len = 1;
  for (int i = 0; i < 4; ++i) {
    auto& s = seqs[static_cast<size_t>(i)];
    s.local_tokens = std::uniform_int_distribution<int32_t>(1, 3 * page_tokens)(rng);
    s.selected_row = i == 2 ? -1 : 3 - i;
    const int32_t pages = (s.kv_len + page_tokens - 1) / page_tokens;
    s.selected.resize(static_cast<size_t>(num_kv_heads));
    for (auto& l : s.selected) {
      for (int32_t j = 0; j < pages; ++j) {
        if (std::bernoulli_distribution(0.4)(rng)) l.push_back(j);
      }
      while (!l.empty() && std::bernoulli_distribution(0.5)(rng)) l.pop_back();
    }
  }
  return seqs;
}

TEST(PagedAttentionQuantized, MixedModesAndBatchesMatchDequantizedPages) {
  std::mt19937 rng(121);
  WorstError worst;
  for (int32_t head_dim : {48, 64, 96, 128}) {  // 48: not whole 32-blocks (dequantizing path)
    for (int32_t group : {1, 4, 8}) {
      for (int32_t page_tokens : {16, 64}) {
        CaseConfig cfg;
        cfg.head_dim = head_dim;
        cfg.group = group;
        cfg.page_tokens = page_tokens;
        cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
        cfg.sink_tokens = page_tokens / 2 + 3;
        const AttentionCase c(rng, cfg, mixed_batch(rng, page_tokens, 3));
        expect_quantized_matches_dequantized(
            c, pool2(),
            "d=" + std::to_string(head_dim) + " g=" + std::to_string(group) +
                " page=" + std::to_string(page_tokens),
            worst);
      }
    }
  }
#if defined(LS_KERNELS_HAVE_AVX2)
  // The fused decode paths ran (a result equal to the dequantizing path's would also pass the
  // tolerance above): int16 queries and another summation order leave a nonzero difference.
  // Checked for every vector ISA of the build: AVX-512 builds call the same fused code.
  for (Isa isa : all_isas()) {
    if (isa == Isa::kScalar) continue;
    EXPECT_GT(worst.int_path_isa[static_cast<int>(isa)], 0.0)
        << "the int8/int4 decode path on the codes did not run, isa=" << isa_label(isa);
    EXPECT_GT(worst.fp8_path_isa[static_cast<int>(isa)], 0.0)
        << "the fp8 decode path in registers did not run, isa=" << isa_label(isa);
  }
#endif
}

TEST(PagedAttentionQuantized, StreamingRingAndPrefillChunks) {
  std::mt19937 rng(122);
  WorstError worst;
  for (int32_t q_len : {1, 7, 40}) {
    for (int32_t len = q_len; len <= 9 * 16; len += 13) {
      CaseConfig cfg;
      cfg.head_dim = 64;
      cfg.group = 2;
      cfg.page_tokens = 16;
      cfg.num_sink_pages = 2;
      cfg.sink_tokens = 20;
      cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal};
      SeqSpec s;
      s.kv_len = len;
      s.q_len = q_len;
      s.local_tokens = 19;
      const AttentionCase c(rng, cfg, {s});
      expect_quantized_matches_dequantized(
          c, pool2(), "q_len=" + std::to_string(q_len) + " len=" + std::to_string(len), worst);
    }
  }
}

TEST(PagedAttentionQuantized, SplitDecodeForAnyThreadCount) {
  std::mt19937 rng(123);
  WorstError worst;
  CaseConfig cfg;
  cfg.head_dim = 128;
  cfg.group = 4;
  cfg.page_tokens = 16;
  cfg.modes = {HeadMode::kCausal, HeadMode::kSelected};
  SeqSpec s;
  s.kv_len = 2000;
  s.q_len = 1;
  s.selected_row = 0;
  s.selected = {{}, {0, 3, 4, 50, 51, 90, 124}};
  const AttentionCase c(rng, cfg, {s});
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    expect_quantized_matches_dequantized(c, pool, "split threads=" + std::to_string(threads),
                                         worst);
  }
}

}  // namespace
}  // namespace ls::kernels::test
