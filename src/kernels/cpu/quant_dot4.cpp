#include "kernels/cpu/quant_dot4.h"

#if defined(LS_QUANT_DOT4)
#include <immintrin.h>

#include <cstring>

namespace ls::kernels::cpu {
namespace {

inline int ld16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// The f16 values at p, p + rb, p + 2 rb, p + 3 rb as four floats.
inline __m128 f16x4(const uint8_t* p, int64_t rb) {
  __m128i h = _mm_cvtsi32_si128(ld16(p));
  h = _mm_insert_epi16(h, ld16(p + rb), 1);
  h = _mm_insert_epi16(h, ld16(p + 2 * rb), 2);
  h = _mm_insert_epi16(h, ld16(p + 3 * rb), 3);
  return _mm_cvtph_ps(h);
}

// Decode streams every weight byte from memory once: ask for the same block of the four rows
// two calls ahead (rows 8-11 from here) while this one is formed, so that four rows' streams stay
// ahead of the hardware prefetcher's reach (one call ahead gained less, three or five no more, on
// bench30m Q8_0/Q4_K decode). Prefetches never fault, so the last rows may point past the end.
template <int64_t kBytes>
inline void prefetch_next_rows(const uint8_t* b, int64_t rb) {
  for (int j = 8; j < 12; ++j) {
    for (int64_t off = 0; off < kBytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(b + j * rb + off), _MM_HINT_T0);
    }
  }
}

inline __m256 dup4(__m128 v) {
  return _mm256_set_m128(v, v);
}

// Four rows' int32 x 8 dot products -> [r0 r1 r2 r3 | r0 r1 r2 r3]: each row's sum over the
// low 128-bit half, then over the high half.
inline __m256i sum4(__m256i a, __m256i b, __m256i c, __m256i d) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
}
inline __m128 fold(__m256 v) {
  return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

// The VNNI variants (kVnni) replace maddubs + madd(1) by one vpdpbusd, and madd + add by one
// vpdpwssd. Both give the same int32 lane sums as the AVX2 sequences they replace (lane i sums
// bytes 4i..4i+3, or int16 pairs 2i, 2i+1) whenever maddubs does not saturate, which holds for
// every operand used here (|u * s| <= 128 * 127 per byte pair): so the two variants produce
// identical results. Where the compiler does not target AVX512_VNNI + AVX512VL these helpers are
// the AVX2 sequences, so the kVnni kernels are built and tested on every AVX2 machine too.
// acc + per int32 lane, the sum of 4 u8 x s8 products.
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
#if defined(LS_QUANT_DOT4_VNNI)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                 _mm256_set1_epi16(1)));
#endif
}
// acc + per int32 lane, the sum of 2 s16 x s16 products.
inline __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
#if defined(LS_QUANT_DOT4_VNNI)
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

inline __m256i nibbles32(const uint8_t* p, __m256i low4) {  // 16 bytes -> low nibbles, then high
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), low4);
}

// Each kernel below takes kM activation rows (1 or 2; act + t * as, outputs at out + t * os):
// with two, every weight block is loaded, unpacked and its scales decoded once for both rows
// (the prefill case), which is where a GEMM gains over repeated GEMVs.

// Q8_0, Q4_0, Q4_1: one 32-weight block per activation block.
template <QuantType kType, int kM, bool kVnni>
void dot4_q32(const uint8_t* w, int64_t rb, const Q8Block* a, int64_t as, int64_t nblocks,
              float* out, int64_t os) {
  constexpr int64_t kBytes = quant_block_bytes(kType);
  constexpr int kQuants = kType == QuantType::kQ4_1 ? 4 : 2;  // offset of q in the block
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[kM];
  __m128 mins[kM];  // Q4_1: sum over blocks of m * d_x * sum(q_x)
  for (int t = 0; t < kM; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins[t] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = w + i * kBytes;
    if constexpr (kM == 1) prefetch_next_rows<kBytes>(b, rb);
    const __m128 dw = f16x4(b, rb);
    __m256i qw[4];
    for (int j = 0; j < 4; ++j) {
      if constexpr (kType == QuantType::kQ8_0) {
        qw[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + j * rb + kQuants));
      } else {
        qw[j] = nibbles32(b + j * rb + kQuants, low4);
      }
    }
    for (int t = 0; t < kM; ++t) {
      const Q8Block& x = a[t * as + i];
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q));
      __m256i dot[4];
      for (int j = 0; j < 4; ++j) {
        if constexpr (kVnni) {
          // The same operands as below, in one vpdpbusd (unsigned first operand too).
          const __m256i zero = _mm256_setzero_si256();
          dot[j] = kType == QuantType::kQ8_0
                       ? dpbusd(zero, _mm256_sign_epi8(qw[j], qw[j]), _mm256_sign_epi8(qa, qw[j]))
                       : dpbusd(zero, qw[j], qa);
        } else if constexpr (kType == QuantType::kQ8_0) {
          // |w| * (a with w's sign): maddubs wants its first operand unsigned. The weight must
          // be that operand: |-128| = 128 is exact as an unsigned byte, while negating a -128
          // weight into the signed operand would wrap (activations stay within +-127).
          dot[j] = _mm256_madd_epi16(
              _mm256_maddubs_epi16(_mm256_sign_epi8(qw[j], qw[j]), _mm256_sign_epi8(qa, qw[j])),
              ones);
        } else {
          // Unsigned nibbles (0..15) straight into maddubs; Q4_0's -8 offset is -8 sum(q_x),
          // subtracted below in integers, so the block's integer dot is exactly row_dot's.
          dot[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(qw[j], qa), ones);
        }
      }
      __m256i s = sum4(dot[0], dot[1], dot[2], dot[3]);
      if constexpr (kType == QuantType::kQ4_0) {
        s = _mm256_sub_epi32(s, _mm256_zextsi128_si256(_mm_set1_epi32(8 * x.sum)));
      }
      if constexpr (kType == QuantType::kQ4_1) {
        mins[t] =
            _mm_fmadd_ps(f16x4(b + 2, rb), _mm_set1_ps(x.d * static_cast<float>(x.sum)), mins[t]);
      }
      acc[t] =
          _mm256_fmadd_ps(dup4(_mm_mul_ps(dw, _mm_set1_ps(x.d))), _mm256_cvtepi32_ps(s), acc[t]);
    }
  }
  for (int t = 0; t < kM; ++t) _mm_storeu_ps(out + t * os, _mm_add_ps(fold(acc[t]), mins[t]));
}

// The 6-bit scales and minimums of a Q4_K / Q5_K block (12 bytes, ggml's get_scale_min_k4
// layout) as 8 bytes each, sub-block j in byte j.
inline void k4_scales(const uint8_t* q, uint64_t* sc, uint64_t* m) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, q, 4);
  std::memcpy(&w1, q + 4, 4);
  std::memcpy(&w2, q + 8, 4);
  // Sub-blocks 0-3: the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums). Sub-blocks 4-7:
  // a nibble of bytes 8-11 below the top 2 bits of bytes 0-3 (scales) or 4-7 (minimums).
  const uint32_t sc_lo = w0 & 0x3f3f3f3fu;
  const uint32_t m_lo = w1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
  *sc = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
  *m = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// 8 bytes -> 8 int16 in both 128-bit halves, so that a byte shuffle can broadcast any of them.
inline __m256i bytes_to_i16x2(uint64_t v) {
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
}
// Broadcast int16 number j of such a vector to all 16 lanes.
inline __m256i pick_i16(__m256i v, int j) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
}

// The 8 activation blocks' sums as int16 (|sum| <= 32 * 127 fits).
inline __m128i block_sums8(const Q8Block* x) {
  return _mm_packs_epi32(_mm_setr_epi32(x[0].sum, x[1].sum, x[2].sum, x[3].sum),
                         _mm_setr_epi32(x[4].sum, x[5].sum, x[6].sum, x[7].sum));
}

// The K-quant kernels below need the 8 activation blocks under one weight block to share one
// scale d_x (quantize_activations with group 256): the integer sub-block scales then multiply
// the integer dot products in madd, the 8 sub-blocks add up in int32, and each weight block costs
// one hadd tree, one convert and one FMA per four rows.

// Q4_K / Q5_K: per 256-weight block and row, d_x (d sum_j sc_j dot_j - dmin sum_j m_j sum_xj).
template <bool kFive, int kM, bool kVnni>
void dot4_q45k(const uint8_t* w, int64_t rb, const Q8Block* a, int64_t as, int64_t nblocks,
               float* out, int64_t os) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  constexpr int64_t kQs = kFive ? 48 : 16;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i k16 = _mm256_set1_epi8(16);
  __m256 acc[kM];
  __m128 mins[kM];
  for (int t = 0; t < kM; ++t) {
    acc[t] = _mm256_setzero_ps();
    mins[t] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = w + i * kBytes;
    if constexpr (kM == 1) prefetch_next_rows<kBytes>(b, rb);
    __m256i isum[kM][4];
    __m128i imin[kM][4];
    for (int r = 0; r < 4; ++r) {
      const uint8_t* row = b + r * rb;
      uint64_t sc8, m8;
      k4_scales(row + 4, &sc8, &m8);
      const __m256i sc = bytes_to_i16x2(sc8);
      const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(m8)));
      const uint8_t* qs = row + kQs;
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kFive) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16));
      for (int t = 0; t < kM; ++t) isum[t][r] = _mm256_setzero_si256();
      for (int j2 = 0; j2 < 4; ++j2) {  // sub-blocks 2 j2 (low nibbles) and 2 j2 + 1 (high)
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j2));
        __m256i v0 = _mm256_and_si256(q, low4);
        __m256i v1 = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if constexpr (kFive) {  // the 5th bit of sub-block j is bit j of qh
          const __m256i b0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * j2)));
          const __m256i b1 = _mm256_set1_epi8(static_cast<char>(1 << (2 * j2 + 1)));
          v0 = _mm256_or_si256(
              v0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), k16));
          v1 = _mm256_or_si256(
              v1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), k16));
        }
        const __m256i s0 = pick_i16(sc, 2 * j2);
        const __m256i s1 = pick_i16(sc, 2 * j2 + 1);
        for (int t = 0; t < kM; ++t) {
          const Q8Block* x = a + t * as + 8 * i;
          const __m256i qa0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[2 * j2].q));
          const __m256i qa1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[2 * j2 + 1].q));
          if constexpr (kVnni) {  // the scale products accumulate in vpdpwssd
            isum[t][r] = dpwssd(dpwssd(isum[t][r], _mm256_maddubs_epi16(v0, qa0), s0),
                                _mm256_maddubs_epi16(v1, qa1), s1);
          } else {
            isum[t][r] = _mm256_add_epi32(
                isum[t][r],
                _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(v0, qa0), s0),
                                 _mm256_madd_epi16(_mm256_maddubs_epi16(v1, qa1), s1)));
          }
        }
      }
      for (int t = 0; t < kM; ++t) {
        imin[t][r] = _mm_madd_epi16(m, block_sums8(a + t * as + 8 * i));  // 4 partial sums
      }
    }
    const __m128 d4 = f16x4(b, rb);
    const __m128 dmin4 = f16x4(b + 2, rb);
    for (int t = 0; t < kM; ++t) {
      const __m128 xd = _mm_set1_ps(a[t * as + 8 * i].d);
      const __m256i s = sum4(isum[t][0], isum[t][1], isum[t][2], isum[t][3]);
      acc[t] = _mm256_fmadd_ps(dup4(_mm_mul_ps(d4, xd)), _mm256_cvtepi32_ps(s), acc[t]);
      const __m128i ms = _mm_hadd_epi32(_mm_hadd_epi32(imin[t][0], imin[t][1]),
                                        _mm_hadd_epi32(imin[t][2], imin[t][3]));
      mins[t] = _mm_fmadd_ps(_mm_mul_ps(dmin4, xd), _mm_cvtepi32_ps(ms), mins[t]);
    }
  }
  for (int t = 0; t < kM; ++t) _mm_storeu_ps(out + t * os, _mm_sub_ps(fold(acc[t]), mins[t]));
}

// Q6_K: q (0..63) times the activations, minus 32 times them (once per activation block), each
// half of a 32-weight sub-block times its own int8 scale in madd, summed over the block in int32;
// then d d_x once per block.
template <int kM, bool kVnni>
void dot4_q6k(const uint8_t* w, int64_t rb, const Q8Block* a, int64_t as, int64_t nblocks,
              float* out, int64_t os) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i k32 = _mm256_set1_epi8(32);
  __m256 acc[kM];
  for (int t = 0; t < kM; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = w + i * 210;
    if constexpr (kM == 1) prefetch_next_rows<210>(b, rb);
    __m256i isum[kM][4];
    for (int r = 0; r < 4; ++r) {
      const uint8_t* row = b + r * rb;
      for (int t = 0; t < kM; ++t) isum[t][r] = _mm256_setzero_si256();
      for (int n = 0; n < 2; ++n) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 128 + 32 * n));
        for (int g = 0; g < 4; ++g) {
          const __m256i lo = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(row + 64 * n + ((g & 1) ? 32 : 0)));
          const __m256i nib =
              g < 2 ? _mm256_and_si256(lo, low4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), low4);
          const __m256i hi =
              _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), three);
          const __m256i v = _mm256_or_si256(nib, _mm256_slli_epi16(hi, 4));
          const auto* sc = reinterpret_cast<const int8_t*>(row + 192 + 8 * n + 2 * g);
          const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
          for (int t = 0; t < kM; ++t) {
            const __m256i qa = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(a[t * as + 8 * i + 4 * n + g].q));
            const __m256i off = _mm256_maddubs_epi16(k32, qa);
            if constexpr (kVnni) {
              isum[t][r] =
                  dpwssd(isum[t][r], _mm256_sub_epi16(_mm256_maddubs_epi16(v, qa), off), scales);
            } else {
              isum[t][r] = _mm256_add_epi32(
                  isum[t][r],
                  _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(v, qa), off), scales));
            }
          }
        }
      }
    }
    const __m128 d4 = f16x4(b + 208, rb);
    for (int t = 0; t < kM; ++t) {
      const __m128 xd = _mm_set1_ps(a[t * as + 8 * i].d);
      const __m256i s = sum4(isum[t][0], isum[t][1], isum[t][2], isum[t][3]);
      acc[t] = _mm256_fmadd_ps(dup4(_mm_mul_ps(d4, xd)), _mm256_cvtepi32_ps(s), acc[t]);
    }
  }
  for (int t = 0; t < kM; ++t) _mm_storeu_ps(out + t * os, fold(acc[t]));
}

template <int kM, bool kVnni>
void dispatch(QuantType type, const uint8_t* w, int64_t rb, const Q8Block* a, int64_t as,
              int64_t nblocks, float* out, int64_t os) {
  switch (type) {
    case QuantType::kQ8_0:
      return dot4_q32<QuantType::kQ8_0, kM, kVnni>(w, rb, a, as, nblocks, out, os);
    case QuantType::kQ4_0:
      return dot4_q32<QuantType::kQ4_0, kM, kVnni>(w, rb, a, as, nblocks, out, os);
    case QuantType::kQ4_1:
      return dot4_q32<QuantType::kQ4_1, kM, kVnni>(w, rb, a, as, nblocks, out, os);
    case QuantType::kQ4_K:
      if constexpr (kM <= 2) return dot4_q45k<false, kM, kVnni>(w, rb, a, as, nblocks, out, os);
      break;
    case QuantType::kQ5_K:
      if constexpr (kM <= 2) return dot4_q45k<true, kM, kVnni>(w, rb, a, as, nblocks, out, os);
      break;
    case QuantType::kQ6_K:
      if constexpr (kM <= 2) return dot4_q6k<kM, kVnni>(w, rb, a, as, nblocks, out, os);
      break;
  }
  // K-quants take at most 2 activation rows (their int32 sums fill the registers): split.
  for (int t = 0; t < kM; t += 2) {
    dispatch<2, kVnni>(type, w, rb, a + t * as, as, nblocks, out + t * os, os);
  }
}

template <bool kVnni>
void dot4_rows(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
               int64_t act_stride, int64_t nblocks, float* out, int64_t out_stride, int act_rows) {
  switch (act_rows) {
    case 1:
      return dispatch<1, kVnni>(type, w, row_bytes, act, act_stride, nblocks, out, out_stride);
    case 2:
      return dispatch<2, kVnni>(type, w, row_bytes, act, act_stride, nblocks, out, out_stride);
    default:
      return dispatch<4, kVnni>(type, w, row_bytes, act, act_stride, nblocks, out, out_stride);
  }
}

}  // namespace

int quant_dot4_rows(QuantType type) {
  return quant_block_elems(type) == 32 ? 4 : 2;
}

void quant_dot4_avx2(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
                     int64_t act_stride, int64_t nblocks, float* out, int64_t out_stride,
                     int act_rows) {
  dot4_rows<false>(type, w, row_bytes, act, act_stride, nblocks, out, out_stride, act_rows);
}

void quant_dot4_vnni(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
                     int64_t act_stride, int64_t nblocks, float* out, int64_t out_stride,
                     int act_rows) {
  dot4_rows<true>(type, w, row_bytes, act, act_stride, nblocks, out, out_stride, act_rows);
}

}  // namespace ls::kernels::cpu
#endif
