// kv_append and page_summary_update over several calls (prefill chunks, then decode steps) for
// a batch of sequences: the pools must equal, byte for byte, a naive mirror that writes every
// token in order through the block tables (the streaming ring included), and the summaries
// must equal the naive min/max of the tokens each logical page holds after every call. An
// append carrying an index request must leave pools and summaries exactly as the two calls.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kv_append.h"
#include "kernels/cpu/page_summary.h"
#include "kernels/kv_quant.h"

namespace ls::kernels::test {
namespace {

ThreadPool& pool2() {
  static ThreadPool pool(2);
  return pool;
}

struct AppendWorld {
  int32_t d = 0, pt = 0, num_kv = 0, nsink = 0, num_seqs = 0;
  DType src_dtype = DType::kF32, pool_dtype = DType::kF32;
  KvQuant quant = KvQuant::kNone;  // quantized pools: pool_dtype is then unused
  std::vector<int32_t> mode, slot, ring;
  int32_t r_stride = 0, s_stride = 0, hpb = 0, r_blocks = 0, s_blocks = 0;
  std::vector<int32_t> r_table, s_table;
  std::vector<uint8_t> r_k, r_v, s_k, s_v;            // kernel's pools
  std::vector<uint8_t> m_r_k, m_r_v, m_s_k, m_s_v;    // naive mirror
  std::vector<std::vector<TypedArray>> keys, values;  // [seq][kv head] -> [len, d] src dtype
  std::vector<int32_t> appended;                      // tokens appended so far per seq

  PagedKvPool pool(std::vector<uint8_t>& k, std::vector<uint8_t>& v, int32_t blocks) {
    PagedKvPool p{k.data(), v.data(), pool_dtype, blocks, hpb, pt, d};
    if (quant != KvQuant::kNone) {
      p.quant = quant;
      p.dtype = DType::kU8;
    }
    return p;
  }

  // Mirror: write token `pos` of (s, g) through the tables, in order.
  void mirror_write(int32_t s, int32_t g, int32_t pos) {
    const bool streaming = mode[g] == static_cast<int32_t>(HeadMode::kStreaming);
    const int32_t page = pos / pt;
    const int32_t block =
        streaming ? s_table[s * s_stride + (page < nsink ? page : nsink + (page - nsink) % ring[s])]
                  : r_table[s * r_stride + page];
    const int64_t row = (int64_t{block} * hpb + slot[g]) * pt + pos % pt;
    const int64_t bytes = dtype_nbytes(pool_dtype, d);
    std::vector<float> f(d);
    if (quant != KvQuant::kNone) {
      // The reference quantizer on the source row, at the row's place in the page.
      const int64_t head_page = int64_t{block} * hpb + slot[g];
      const TypedArray* src[2] = {&keys[s][g], &values[s][g]};
      std::vector<uint8_t>* dst[2] = {streaming ? &m_s_k : &m_r_k, streaming ? &m_s_v : &m_r_v};
      for (int a = 0; a < 2; ++a) {
        convert_to_f32(src_dtype, src[a]->bytes.data() + dtype_nbytes(src_dtype, int64_t{pos} * d),
                       f.data(), d);
        const KvQuantRow at = kv_quant_row(quant, dst[a]->data(), head_page, pos % pt, pt, d);
        kv_quantize_row(quant, f.data(), d, at.codes, at.params);
      }
      return;
    }
    convert_to_f32(src_dtype, keys[s][g].bytes.data() + dtype_nbytes(src_dtype, int64_t{pos} * d),
                   f.data(), d);
    convert_from_f32(f.data(), pool_dtype, (streaming ? m_s_k : m_r_k).data() + row * bytes, d);
    convert_to_f32(src_dtype, values[s][g].bytes.data() + dtype_nbytes(src_dtype, int64_t{pos} * d),
                   f.data(), d);
    convert_from_f32(f.data(), pool_dtype, (streaming ? m_s_v : m_r_v).data() + row * bytes, d);
  }
};

AppendWorld make_world(std::mt19937& rng, DType src_dtype, DType pool_dtype, int32_t pt,
                       const std::vector<int32_t>& totals, KvQuant quant = KvQuant::kNone) {
  AppendWorld w;
  w.d = 48;
  w.pt = pt;
  w.num_kv = 3;
  w.nsink = 1;
  w.num_seqs = static_cast<int32_t>(totals.size());
  w.src_dtype = src_dtype;
  w.pool_dtype = pool_dtype;
  w.quant = quant;
  w.mode = {static_cast<int32_t>(HeadMode::kCausal), static_cast<int32_t>(HeadMode::kStreaming),
            static_cast<int32_t>(HeadMode::kSelected)};
  w.slot = {2, 0, 0};  // retrieval heads use slots 2 and 0; the streaming head slot 0 of its pool
  w.hpb = 3;
  int32_t max_pages = 0;
  for (int32_t t : totals) max_pages = std::max(max_pages, (t + pt - 1) / pt);
  w.r_stride = max_pages;
  w.s_stride = w.nsink + 3;
  w.r_blocks = w.num_seqs * max_pages + 1;
  w.s_blocks = w.num_seqs * w.s_stride + 1;
  std::vector<int32_t> ids_r(static_cast<size_t>(w.r_blocks - 1)),
      ids_s(static_cast<size_t>(w.s_blocks - 1));
  std::iota(ids_r.begin(), ids_r.end(), 1);
  std::iota(ids_s.begin(), ids_s.end(), 1);
  std::shuffle(ids_r.begin(), ids_r.end(), rng);
  std::shuffle(ids_s.begin(), ids_s.end(), rng);
  w.r_table = ids_r;
  w.s_table = ids_s;
  for (int32_t s = 0; s < w.num_seqs; ++s) w.ring.push_back(2 + s % 2);  // rings of 2 and 3 pages
  const auto alloc = [&](int32_t blocks) {
    const int64_t n = int64_t{blocks} * w.hpb * pt * w.d;
    if (quant != KvQuant::kNone) {  // poison bytes: NaN parameters, codes 0xff
      return std::vector<uint8_t>(
          static_cast<size_t>(int64_t{blocks} * w.hpb * kv_quant_page_bytes(quant, pt, w.d)), 0xff);
    }
    std::vector<uint8_t> b(static_cast<size_t>(dtype_nbytes(pool_dtype, n)));
    poison(b.data(), pool_dtype, n);
    return b;
  };
  w.r_k = w.r_v = w.m_r_k = w.m_r_v = alloc(w.r_blocks);
  w.s_k = w.s_v = w.m_s_k = w.m_s_v = alloc(w.s_blocks);
  w.keys.resize(totals.size());
  w.values.resize(totals.size());
  for (size_t s = 0; s < totals.size(); ++s) {
    for (int32_t g = 0; g < w.num_kv; ++g) {
      w.keys[s].push_back(random_array(rng, int64_t{totals[s]} * w.d, src_dtype, -2, 2));
      w.values[s].push_back(random_array(rng, int64_t{totals[s]} * w.d, src_dtype, -2, 2));
    }
  }
  w.appended.assign(totals.size(), 0);
  return w;
}

// Appends q_lens[s] tokens to every sequence through the kernels (and the mirror).
struct StepInput {
  std::vector<int32_t> q_indptr, kv_lens;
  std::vector<uint8_t> k, v;  // [num_tokens, num_kv, d] src dtype
};

StepInput make_step(AppendWorld& w, const std::vector<int32_t>& q_lens) {
  StepInput in;
  in.q_indptr = {0};
  for (int32_t q : q_lens) in.q_indptr.push_back(in.q_indptr.back() + q);
  const int64_t row = dtype_nbytes(w.src_dtype, w.d);
  in.k.resize(static_cast<size_t>(in.q_indptr.back() * w.num_kv * row));
  in.v.resize(in.k.size());
  for (int32_t s = 0; s < w.num_seqs; ++s) {
    in.kv_lens.push_back(w.appended[s] + q_lens[s]);
    for (int32_t t = 0; t < q_lens[s]; ++t) {
      const int32_t pos = w.appended[s] + t;
      for (int32_t g = 0; g < w.num_kv; ++g) {
        const int64_t dst = ((in.q_indptr[s] + t) * int64_t{w.num_kv} + g) * row;
        std::memcpy(in.k.data() + dst, w.keys[s][g].bytes.data() + pos * row,
                    static_cast<size_t>(row));
        std::memcpy(in.v.data() + dst, w.values[s][g].bytes.data() + pos * row,
                    static_cast<size_t>(row));
        w.mirror_write(s, g, pos);
      }
    }
  }
  return in;
}

// The append's params for one step of `w` (pools `k`/`v` of each kind passed in, so two copies
// of the world's memory can be driven by the same step).
KvAppendParams step_params(AppendWorld& w, StepInput& in, std::vector<uint8_t>& rk,
                           std::vector<uint8_t>& rv, std::vector<uint8_t>& sk,
                           std::vector<uint8_t>& sv) {
  KvAppendParams p;
  p.k = in.k.data();
  p.v = in.v.data();
  p.src_dtype = w.src_dtype;
  p.num_tokens = in.q_indptr.back();
  p.num_kv_heads = w.num_kv;
  p.head_dim = w.d;
  p.num_seqs = w.num_seqs;
  p.q_indptr = in.q_indptr.data();
  p.kv_lens = in.kv_lens.data();
  p.head_mode = w.mode.data();
  p.head_slot = w.slot.data();
  p.retrieval = w.pool(rk, rv, w.r_blocks);
  p.retrieval_blocks = w.r_table.data();
  p.retrieval_blocks_stride = w.r_stride;
  p.streaming = w.pool(sk, sv, w.s_blocks);
  p.streaming_blocks = w.s_table.data();
  p.streaming_blocks_stride = w.s_stride;
  p.num_sink_pages = w.nsink;
  p.ring_pages = w.ring.data();
  return p;
}

// The value of f16 code `c` from its fields (sign, 5-bit exponent biased by 15, 10-bit fraction,
// subnormals below 2^-14), independent of the conversions under test.
double f16_reference(uint16_t c) {
  const int e = (c >> 10) & 31, m = c & 1023;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (c & 0x8000) ? -mag : mag;
}

// f16 pages' conversion over all 65536 codes against f16_reference: every finite code's value
// converts back to that code, each midpoint between neighbours rounds to the even code,
// magnitudes past 65504 (infinities included) saturate, NaN stays NaN. Run once as one array
// (the vector path) and once element by element (the scalar tail).
TEST(KvAppend, F16PagesConvertAllCodesAndSaturate) {
  std::vector<float> in;
  std::vector<uint16_t> want;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto c = static_cast<uint16_t>(b);
    if (((c >> 10) & 31) == 31) continue;  // inf / NaN codes: below
    in.push_back(static_cast<float>(f16_reference(c)));
    want.push_back(c);
    if ((c & 0x7fff) < 0x7bff) {  // midpoint to the next code away from zero
      const double mid = (f16_reference(c) + f16_reference(static_cast<uint16_t>(c + 1))) / 2;
      in.push_back(static_cast<float>(mid));  // 12 significant bits: exact in f32
      want.push_back((c & 1) ? static_cast<uint16_t>(c + 1) : c);
    }
  }
  for (float big : {65504.0f, 65519.0f, 65520.0f, 70000.0f, 1e30f,
                    std::numeric_limits<float>::infinity()}) {
    in.push_back(big);
    want.push_back(0x7bff);
    in.push_back(-big);
    want.push_back(0xfbff);
  }
  // Counted: the 2 x 5 values past 65504 (65519 would round to 65504 even unsaturated).
  const int64_t before = cpu::kv_f16_saturated_total();
  std::vector<uint16_t> got(in.size());
  cpu::kv_store_f16(in.data(), got.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(cpu::kv_f16_saturated_total() - before, 10);
  std::vector<uint16_t> one(in.size());
  for (size_t i = 0; i < in.size(); ++i) cpu::kv_store_f16(&in[i], &one[i], 1);
  EXPECT_EQ(cpu::kv_f16_saturated_total() - before, 20);
  size_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (got[i] != want[i] || one[i] != want[i]) {
      if (++bad < 10) {
        ADD_FAILURE() << "in=" << in[i] << " want=" << want[i] << " vector=" << got[i]
                      << " scalar=" << one[i];
      }
    }
  }
  EXPECT_EQ(bad, 0u);
  // The pages' reader widens every finite code to its value.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto c = static_cast<uint16_t>(b);
    if (((c >> 10) & 31) == 31) continue;
    ASSERT_EQ(static_cast<double>(f16_to_f32(c)), f16_reference(c)) << b;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> nans(11, nan);
  std::vector<uint16_t> nan_codes(11);
  cpu::kv_store_f16(nans.data(), nan_codes.data(), 11);
  for (uint16_t c : nan_codes) EXPECT_TRUE(std::isnan(f16_to_f32(c))) << c;
}

// An append into f16 pages stores out-of-range keys and values saturated, finite.
TEST(KvAppend, F16PagesSaturateOutOfRangeTokens) {
  std::mt19937 rng(44);
  const int32_t pt = 16;
  AppendWorld w = make_world(rng, DType::kF32, DType::kF16, pt, {3, 1, 2});
  StepInput in = make_step(w, {3, 1, 2});
  for (std::vector<uint8_t>* bytes : {&in.k, &in.v}) {
    auto* f = reinterpret_cast<float*>(bytes->data());
    for (size_t i = 0; i < bytes->size() / 4; ++i) f[i] = (i % 2 ? -1.0f : 1.0f) * 1e6f;
  }
  const int64_t before = cpu::kv_f16_saturated_total();
  cpu::kv_append(step_params(w, in, w.r_k, w.r_v, w.s_k, w.s_v), pool2());
  EXPECT_EQ(cpu::kv_f16_saturated_total() - before, int64_t{6} * w.num_kv * w.d * 2);
  size_t saturated = 0;
  for (const std::vector<uint8_t>* pool : {&w.r_k, &w.r_v, &w.s_k, &w.s_v}) {
    const auto* h = reinterpret_cast<const uint16_t*>(pool->data());
    for (size_t i = 0; i < pool->size() / 2; ++i) {
      EXPECT_FALSE(std::isinf(f16_to_f32(h[i]))) << i;
      saturated += h[i] == 0x7bff || h[i] == 0xfbff;
    }
  }
  // 6 tokens x num_kv heads x head_dim elements, K and V.
  EXPECT_EQ(saturated, size_t{6} * static_cast<size_t>(w.num_kv) * static_cast<size_t>(w.d) * 2);
}

TEST(KvAppend, PoolsMatchNaiveMirrorAfterChunksAndDecodeSteps) {
  std::mt19937 rng(41);
  for (auto [src, dst] : {std::pair{DType::kF32, DType::kF32},
                          {DType::kF32, DType::kBF16},
                          {DType::kF32, DType::kF16},
                          {DType::kBF16, DType::kF32},
                          {DType::kBF16, DType::kBF16},
                          {DType::kBF16, DType::kF16}}) {
    for (int32_t pt : {16, 64}) {
      SCOPED_TRACE(std::string(dtype_name(src)) + "->" + std::string(dtype_name(dst)) +
                   " pt=" + std::to_string(pt));
      const std::vector<std::vector<int32_t>> steps = {
          {3 * pt + 5, 1, 0}, {pt + 2, 2, 7}, {1, 1, 1}, {1, 0, 5 * pt}, {1, 1, 1}};
      std::vector<int32_t> totals(3, 0);
      for (const auto& st : steps) {
        for (size_t s = 0; s < 3; ++s) totals[s] += st[s];
      }
      AppendWorld w = make_world(rng, src, dst, pt, totals);
      for (const auto& q_lens : steps) {
        StepInput in = make_step(w, q_lens);
        cpu::kv_append(step_params(w, in, w.r_k, w.r_v, w.s_k, w.s_v), pool2());
        for (int32_t s = 0; s < w.num_seqs; ++s) w.appended[s] += q_lens[s];
        // Byte-for-byte (NaN poison included): nothing written outside the mirror's writes.
        ASSERT_EQ(w.r_k, w.m_r_k);
        ASSERT_EQ(w.r_v, w.m_r_v);
        ASSERT_EQ(w.s_k, w.m_s_k);
        ASSERT_EQ(w.s_v, w.m_s_v);
      }
    }
  }
}

// Quantized pools: the append quantizes each token row on the way in exactly as the reference
// quantizer does at that row's place in its page (codes and parameters), and writes nothing else.
TEST(KvAppend, QuantizedPoolsMatchReferenceQuantizerMirror) {
  std::mt19937 rng(43);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (DType src : {DType::kF32, DType::kBF16}) {
      for (int32_t pt : {16, 64}) {
        SCOPED_TRACE(std::string(kv_quant_name(q)) + " src=" + std::string(dtype_name(src)) +
                     " pt=" + std::to_string(pt));
        const std::vector<std::vector<int32_t>> steps = {
            {3 * pt + 5, 1, 0}, {pt + 2, 2, 7}, {1, 1, 1}, {1, 0, 5 * pt}, {1, 1, 1}};
        std::vector<int32_t> totals(3, 0);
        for (const auto& st : steps) {
          for (size_t s = 0; s < 3; ++s) totals[s] += st[s];
        }
        AppendWorld w = make_world(rng, src, DType::kF32, pt, totals, q);
        for (const auto& q_lens : steps) {
          StepInput in = make_step(w, q_lens);
          cpu::kv_append(step_params(w, in, w.r_k, w.r_v, w.s_k, w.s_v), pool2());
          for (int32_t s = 0; s < w.num_seqs; ++s) w.appended[s] += q_lens[s];
          ASSERT_EQ(w.r_k, w.m_r_k);
          ASSERT_EQ(w.r_v, w.m_r_v);
          ASSERT_EQ(w.s_k, w.m_s_k);
          ASSERT_EQ(w.s_v, w.m_s_v);
        }
      }
    }
  }
}

// The summary update of one step, spelled out field by field (not through summary_update_of, the
// mapping the fused append uses, so the fused test checks that mapping too).
SummaryUpdateParams summary_params(AppendWorld& w, StepInput& in, DType src, int32_t pt,
                                   const PageSummaries& summaries) {
  SummaryUpdateParams p;
  p.k = in.k.data();
  p.src_dtype = src;
  p.num_tokens = in.q_indptr.back();
  p.num_kv_heads = w.num_kv;
  p.head_dim = w.d;
  p.num_seqs = w.num_seqs;
  p.q_indptr = in.q_indptr.data();
  p.kv_lens = in.kv_lens.data();
  p.head_mode = w.mode.data();
  p.head_slot = w.slot.data();
  p.page_tokens = pt;
  p.heads_per_block = w.hpb;
  p.retrieval_blocks = w.r_table.data();
  p.retrieval_blocks_stride = w.r_stride;
  p.summaries = summaries;
  return p;
}

TEST(PageSummary, MinMaxExactAfterEveryCallAndNeverReadsStaleMemory) {
  std::mt19937 rng(42);
  for (DType sum_dtype : {DType::kF32, DType::kBF16}) {
    for (auto [pt, lpt] : {std::pair{16, 16}, {16, 8}, {64, 16}}) {
      SCOPED_TRACE(std::string(dtype_name(sum_dtype)) + " pt=" + std::to_string(pt) +
                   " lpt=" + std::to_string(lpt));
      const std::vector<std::vector<int32_t>> steps = {
          {2 * pt + 3, 1, 9}, {5, 1, pt}, {1, 1, 1}, {lpt - 1, 1, 1}, {1, 1, 2}};
      std::vector<int32_t> totals(3, 0);
      for (const auto& st : steps) {
        for (size_t s = 0; s < 3; ++s) totals[s] += st[s];
      }
      AppendWorld w = make_world(rng, DType::kF32, DType::kF32, pt, totals);
      const int32_t lpp = pt / lpt;
      const int64_t rows = int64_t{w.r_blocks} * w.hpb * lpp;
      std::vector<uint8_t> kmin(static_cast<size_t>(dtype_nbytes(sum_dtype, rows * w.d))),
          kmax(kmin.size());
      poison(kmin.data(), sum_dtype, rows * w.d);
      poison(kmax.data(), sum_dtype, rows * w.d);
      for (const auto& q_lens : steps) {
        StepInput in = make_step(w, q_lens);
        cpu::page_summary_update(
            summary_params(w, in, DType::kF32, pt,
                           PageSummaries{kmin.data(), kmax.data(), sum_dtype, lpt, lpp}),
            pool2());
        for (int32_t s = 0; s < w.num_seqs; ++s) w.appended[s] += q_lens[s];

        // Every logical page holding tokens of a retrieval head: exact min/max of its tokens.
        // Slot 1 (used by no retrieval head) stays untouched.
        std::vector<bool> touched(static_cast<size_t>(rows), false);
        for (int32_t s = 0; s < w.num_seqs; ++s) {
          for (int32_t g = 0; g < w.num_kv; ++g) {
            if (w.mode[g] == static_cast<int32_t>(HeadMode::kStreaming)) continue;
            for (int32_t lp = 0; lp * lpt < w.appended[s]; ++lp) {
              const int32_t block = w.r_table[s * w.r_stride + lp / lpp];
              const int64_t row = (int64_t{block} * w.hpb + w.slot[g]) * lpp + lp % lpp;
              touched[static_cast<size_t>(row)] = true;
              std::vector<float> lo(w.d, INFINITY), hi(w.d, -INFINITY);
              for (int32_t pos = lp * lpt; pos < std::min(w.appended[s], (lp + 1) * lpt); ++pos) {
                for (int32_t e = 0; e < w.d; ++e) {
                  lo[e] = std::min(lo[e], w.keys[s][g].values[static_cast<size_t>(pos * w.d + e)]);
                  hi[e] = std::max(hi[e], w.keys[s][g].values[static_cast<size_t>(pos * w.d + e)]);
                }
              }
              std::vector<float> got_lo(w.d), got_hi(w.d), want_lo(w.d), want_hi(w.d);
              const int64_t off = dtype_nbytes(sum_dtype, row * w.d);
              convert_to_f32(sum_dtype, kmin.data() + off, got_lo.data(), w.d);
              convert_to_f32(sum_dtype, kmax.data() + off, got_hi.data(), w.d);
              // The stored value is the min/max rounded to the summary dtype.
              std::vector<uint8_t> tmp(static_cast<size_t>(dtype_nbytes(sum_dtype, w.d)));
              convert_from_f32(lo.data(), sum_dtype, tmp.data(), w.d);
              convert_to_f32(sum_dtype, tmp.data(), want_lo.data(), w.d);
              convert_from_f32(hi.data(), sum_dtype, tmp.data(), w.d);
              convert_to_f32(sum_dtype, tmp.data(), want_hi.data(), w.d);
              ASSERT_EQ(got_lo, want_lo) << "seq " << s << " head " << g << " logical page " << lp;
              ASSERT_EQ(got_hi, want_hi) << "seq " << s << " head " << g << " logical page " << lp;
            }
          }
        }
        for (int64_t row = 0; row < rows; ++row) {
          if (touched[static_cast<size_t>(row)]) continue;
          std::vector<float> f(w.d);
          convert_to_f32(sum_dtype, kmin.data() + dtype_nbytes(sum_dtype, row * w.d), f.data(),
                         w.d);
          for (float x : f)
            ASSERT_TRUE(std::isnan(x)) << "row " << row << " written but holds no token";
        }
      }
    }
  }
}

TEST(KvAppend, IndexRequestEqualsAppendThenSummaryUpdate) {
  std::mt19937 rng(43);
  for (DType src : {DType::kBF16, DType::kF16}) {
    for (DType sum_dtype : {DType::kF32, DType::kBF16}) {
      for (auto [pt, lpt] : {std::pair{16, 16}, {64, 16}}) {
        SCOPED_TRACE(std::string(dtype_name(src)) + " summaries " +
                     std::string(dtype_name(sum_dtype)) + " pt=" + std::to_string(pt) +
                     " lpt=" + std::to_string(lpt));
        // Prefill chunks across logical and physical pages, then decode tokens into partly
        // filled logical pages and onto fresh ones.
        const std::vector<std::vector<int32_t>> steps = {
            {2 * pt + 3, 1, 9}, {5, 1, pt + 7}, {1, 1, 1}, {lpt - 1, 1, 1}, {1, 1, 2}};
        std::vector<int32_t> totals(3, 0);
        for (const auto& st : steps) {
          for (size_t s = 0; s < 3; ++s) totals[s] += st[s];
        }
        AppendWorld w = make_world(rng, src, DType::kBF16, pt, totals);
        const int32_t lpp = pt / lpt;
        const int64_t rows = int64_t{w.r_blocks} * w.hpb * lpp;
        std::vector<uint8_t> kmin(static_cast<size_t>(dtype_nbytes(sum_dtype, rows * w.d))),
            kmax(kmin.size());
        poison(kmin.data(), sum_dtype, rows * w.d);
        poison(kmax.data(), sum_dtype, rows * w.d);
        // The two-call path works on copies of every array.
        std::vector<uint8_t> rk = w.r_k, rv = w.r_v, sk = w.s_k, sv = w.s_v, kmin2 = kmin,
                             kmax2 = kmax;
        for (const auto& q_lens : steps) {
          StepInput in = make_step(w, q_lens);
          KvAppendParams fused = step_params(w, in, w.r_k, w.r_v, w.s_k, w.s_v);
          fused.summaries = PageSummaries{kmin.data(), kmax.data(), sum_dtype, lpt, lpp};
          cpu::kv_append(fused, pool2());

          cpu::kv_append(step_params(w, in, rk, rv, sk, sv), pool2());
          cpu::page_summary_update(
              summary_params(w, in, src, pt,
                             PageSummaries{kmin2.data(), kmax2.data(), sum_dtype, lpt, lpp}),
              pool2());
          for (int32_t s = 0; s < w.num_seqs; ++s) w.appended[s] += q_lens[s];

          // Byte for byte, NaN poison included.
          ASSERT_EQ(w.r_k, rk);
          ASSERT_EQ(w.r_v, rv);
          ASSERT_EQ(w.s_k, sk);
          ASSERT_EQ(w.s_v, sv);
          ASSERT_EQ(kmin, kmin2);
          ASSERT_EQ(kmax, kmax2);
          ASSERT_EQ(w.r_k, w.m_r_k);  // and the append itself is still right
        }
        // Summaries were really written (not both left poisoned).
        std::vector<float> f(static_cast<size_t>(rows * w.d));
        convert_to_f32(sum_dtype, kmin.data(), f.data(), rows * w.d);
        EXPECT_TRUE(std::any_of(f.begin(), f.end(), [](float x) { return !std::isnan(x); }));
      }
    }
  }
}

}  // namespace
}  // namespace ls::kernels::test
