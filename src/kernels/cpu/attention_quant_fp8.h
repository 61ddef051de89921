#pragma once
// Internal to kernels/cpu: the decode-tile arithmetic (rows layout, kernels/cpu/attention_tile.h)
// on fp8 e4m3 head-pages with AVX2, without a dequantized copy of the page: each code row is
// widened in registers and used by every query row of the tile (one pass over the keys for up
// to 4 rows), where the dequantizing path decoded it into an f32 page and re-read it per pair
// of rows.
//
// Widening: an e4m3 code placed in the high byte of a 16-bit lane and shifted right
// arithmetically by one is the f16 of the same sign, exponent and mantissa with exponent bias 15
// instead of 7 once the duplicated sign bit is cleared (and 0xbf80): value / 2^8 exactly, the
// subnormal codes included (both formats' subnormals are m · 2^(1 - bias - 3)). vcvtph2ps then
// gives the f32. The 2^8 is folded into the row's scale:
//   s[r, j] = (scale_j * 2^8) * (q_r · f16(c_j)),   o[r] += Σ_j (p[r, j] * scale_j * 2^8) f16(c_j).
// Exact values, so the result differs from the dequantized pages by f32 summation order only.
// Codes 0x7f / 0xff (NaN in e4m3; the quantizer never writes them: a non-finite row gets a NaN
// scale instead) read as ±480 · scale here rather than NaN.
//
// fp8 cannot gain on bf16 pages here the way int8 / int4 do (kernels/cpu/attention_quant_int.h):
// e4m3 values need 19 bits as integers, so there is no int16 dot product on the codes, and the
// widening above costs more than bf16's (one shift); what this path removes is the dequantized
// page's store and reloads.

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/simd.h"

#if defined(LS_KERNELS_HAVE_AVX2)

namespace ls::kernels::cpu {

// 16 e4m3 codes as f32 / 2^8: elements [0, 8) in lo, [8, 16) in hi.
inline void fp8_widen16(const uint8_t* c, __m256& lo, __m256& hi) {
  const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
  const __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1),
                                     _mm256_set1_epi16(static_cast<int16_t>(0xbf80)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// dots[r][j] = q_r · f16(c_j) for kRows rows (q: [rows, d] f32) and 2 code rows.
template <int kRows>
inline void fp8_dot_block(const float* q, int32_t d, const uint8_t* k0, const uint8_t* k1,
                          float dots[][2]) {
  using A = simd::Avx2;
  __m256 acc[kRows][2];
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int32_t e = 0; e < d; e += 16) {
    __m256 a0, a1, b0, b1;
    fp8_widen16(k0 + e, a0, a1);
    fp8_widen16(k1 + e, b0, b1);
    a0 = A::pinned(a0);
    a1 = A::pinned(a1);
    b0 = A::pinned(b0);
    b1 = A::pinned(b1);
    for (int r = 0; r < kRows; ++r) {
      const float* qr = q + int64_t{r} * d + e;
      const __m256 q0 = _mm256_loadu_ps(qr), q1 = _mm256_loadu_ps(qr + 8);
      acc[r][0] = _mm256_fmadd_ps(q1, a1, _mm256_fmadd_ps(q0, a0, acc[r][0]));
      acc[r][1] = _mm256_fmadd_ps(q1, b1, _mm256_fmadd_ps(q0, b0, acc[r][1]));
    }
  }
  int r = 0;
  for (; r + 2 <= kRows; r += 2) {
    float s[4];
    A::reduce_add4(acc[r][0], acc[r][1], acc[r + 1][0], acc[r + 1][1], s);
    dots[r][0] = s[0];
    dots[r][1] = s[1];
    dots[r + 1][0] = s[2];
    dots[r + 1][1] = s[3];
  }
  if (r < kRows) {
    float s[4];
    A::reduce_add4(acc[r][0], acc[r][1], A::zero(), A::zero(), s);
    dots[r][0] = s[0];
    dots[r][1] = s[1];
  }
}

// S[r, j] = scale_j * 2^8 * (q_r · f16(c_j)) for the page's keys j < keys; `codes` are the page's
// code rows (head_dim bytes each), `scales` its [page_tokens] f32 scales.
inline void fp8_scores(const TileState& t, const uint8_t* codes, const float* scales,
                       int32_t keys) {
  const int32_t d = t.head_dim;
  for (int32_t j0 = 0; j0 < keys; j0 += 2) {
    const int32_t n = std::min(2, keys - j0);
    const uint8_t* k0 = codes + int64_t{j0} * d;
    const uint8_t* k1 = codes + int64_t{j0 + n - 1} * d;
    for (int32_t r0 = 0; r0 < t.rows; r0 += 4) {
      float dots[4][2];
      const float* q = t.q + int64_t{r0} * d;
      const int32_t nr = std::min(4, t.rows - r0);
      switch (nr) {
        case 4:
          fp8_dot_block<4>(q, d, k0, k1, dots);
          break;
        case 3:
          fp8_dot_block<3>(q, d, k0, k1, dots);
          break;
        case 2:
          fp8_dot_block<2>(q, d, k0, k1, dots);
          break;
        default:
          fp8_dot_block<1>(q, d, k0, k1, dots);
          break;
      }
      for (int32_t rr = 0; rr < nr; ++rr) {
        float* srow = t.s + int64_t{r0 + rr} * t.ld_s + j0;
        for (int32_t j = 0; j < n; ++j) srow[j] = dots[rr][j] * (scales[j0 + j] * 256.0f);
      }
    }
  }
}

template <int kRows>
inline void fp8_pv_chunk(const TileState& t, int32_t r0, const uint8_t* codes, int32_t keys,
                         int32_t e, PagePrefetch* prefetch) {
  const int32_t d = t.head_dim;
  __m256 acc[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    const __m256 a = _mm256_set1_ps(t.alpha[r0 + r]);
    const float* o = t.o + int64_t{r0 + r} * d + e;
    acc[r][0] = _mm256_mul_ps(_mm256_loadu_ps(o), a);
    acc[r][1] = _mm256_mul_ps(_mm256_loadu_ps(o + 8), a);
  }
  for (int32_t j = 0; j < keys; ++j) {
    if (prefetch) prefetch->step();
    __m256 v0, v1;
    fp8_widen16(codes + int64_t{j} * d + e, v0, v1);
    v0 = simd::Avx2::pinned(v0);
    v1 = simd::Avx2::pinned(v1);
    for (int r = 0; r < kRows; ++r) {
      const __m256 p = _mm256_broadcast_ss(t.s + int64_t{r0 + r} * t.ld_s + j);
      acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float* o = t.o + int64_t{r0 + r} * d + e;
    _mm256_storeu_ps(o, acc[r][0]);
    _mm256_storeu_ps(o + 8, acc[r][1]);
  }
}

// O[r] = O[r] * alpha[r] + P·V over the page's keys j < keys; scales P in place (t.s).
inline void fp8_pv(const TileState& t, const uint8_t* codes, const float* scales, int32_t keys) {
  for (int32_t r = 0; r < t.rows; ++r) {
    float* prow = t.s + int64_t{r} * t.ld_s;
    for (int32_t j = 0; j < keys; ++j) prow[j] *= scales[j] * 256.0f;
  }
  for (int32_t r0 = 0; r0 < t.rows; r0 += 4) {
    const int32_t nr = std::min(4, t.rows - r0);
    for (int32_t e = 0; e < t.head_dim; e += 16) {
      PagePrefetch* pf = e == 0 ? t.prefetch : nullptr;
      switch (nr) {
        case 4:
          fp8_pv_chunk<4>(t, r0, codes, keys, e, pf);
          break;
        case 3:
          fp8_pv_chunk<3>(t, r0, codes, keys, e, pf);
          break;
        case 2:
          fp8_pv_chunk<2>(t, r0, codes, keys, e, pf);
          break;
        default:
          fp8_pv_chunk<1>(t, r0, codes, keys, e, pf);
          break;
      }
    }
  }
}

}  // namespace ls::kernels::cpu

#endif  // LS_KERNELS_HAVE_AVX2
