#pragma once
// Internal to kernels/cpu: dequantizes token rows of a quantized head-page (kernels/kv_quant.h)
// into f32, bit for bit the values kv_dequantize_element gives. The attention kernel runs it per
// page visit into its per-thread tile buffers, so the arithmetic after it is the f32 kernel
// unchanged. With AVX2 the rows are decoded 8 / 16 values at a time (below): GCC leaves the
// fp8 table lookup scalar and the int4 nibble interleave poorly vectorised, and at long context
// this loop touches every K/V element of a decode step.

#include <array>
#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LS_KV_DEQUANT_AVX2 1
#endif

#include "kernels/kv_quant.h"

namespace ls::kernels::cpu {

#if defined(LS_KV_DEQUANT_AVX2)
// e4m3 values of 8 codes (the low 8 bytes of c8), as e4m3_to_f32: normal codes by moving the
// 4-bit exponent and 3-bit mantissa into an f32 and rebiasing the exponent (7 -> 127, exact),
// subnormal codes (exponent 0) as m * 2^-9, 0x7f / 0xff as NaN, then the sign bit.
inline __m256 e4m3x8_to_f32(__m128i c8) {
  const __m256i c = _mm256_cvtepu8_epi32(c8);
  const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
  const __m256 normal = _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0.001953125f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
  __m256 v = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(is_sub));
  const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
  v = _mm256_blendv_ps(v, _mm256_set1_ps(NAN), _mm256_castsi256_ps(is_nan));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

// o[0, head_dim) of one row; returns the first element left for the scalar tail. The same
// operations per element as the scalar loops (one multiply, resp. one fma), so the same bits.
inline int32_t dequantize_row_avx2(KvQuant q, const uint8_t* c, float scale, float zero,
                                   int32_t head_dim, float* o) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256 vz = _mm256_set1_ps(zero);
  int32_t e = 0;
  if (q == KvQuant::kFp8) {
    for (; e + 8 <= head_dim; e += 8) {
      const __m128i c8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + e));
      _mm256_storeu_ps(o + e, _mm256_mul_ps(e4m3x8_to_f32(c8), vs));
    }
    return e;
  }
  if (q == KvQuant::kInt8) {
    for (; e + 8 <= head_dim; e += 8) {
      const __m128i c8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + e));
      const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c8));
      _mm256_storeu_ps(o + e, _mm256_fmadd_ps(x, vs, vz));
    }
    return e;
  }
  // int4: 8 bytes hold elements [e, e + 16): low nibble 2i, high nibble 2i + 1.
  const __m128i low4 = _mm_set1_epi8(0x0f);
  for (; e + 16 <= head_dim; e += 16) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + e / 2));
    const __m128i lo = _mm_and_si128(b, low4);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
    const __m128i x = _mm_unpacklo_epi8(lo, hi);  // elements e .. e + 15 in order
    const __m256 x0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
    const __m256 x1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)));
    _mm256_storeu_ps(o + e, _mm256_fmadd_ps(x0, vs, vz));
    _mm256_storeu_ps(o + e + 8, _mm256_fmadd_ps(x1, vs, vz));
  }
  return e;
}
#endif

// The 256 fp8 e4m3 values.
inline const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

// out[r, e] for rows [0, rows) of head-page `page` of the quantized array `base`:
// out is [rows, head_dim] f32.
inline void dequantize_page_rows(KvQuant q, const void* base, int64_t page, int32_t page_tokens,
                                 int32_t head_dim, int32_t rows, float* out) {
  const float* fp8 = q == KvQuant::kFp8 ? e4m3_table() : nullptr;
  for (int32_t r = 0; r < rows; ++r) {
    const KvQuantRow row =
        kv_quant_row(q, const_cast<void*>(base), page, r, page_tokens, head_dim);
    const uint8_t* c = row.codes;
    const float scale = row.params[0];
    const float zero = q == KvQuant::kFp8 ? 0.0f : row.params[1];
    float* o = out + int64_t{r} * head_dim;
    int32_t e0 = 0;  // first element the scalar loops below still decode
#if defined(LS_KV_DEQUANT_AVX2)
    e0 = dequantize_row_avx2(q, c, scale, zero, head_dim, o);
#endif
    if (q == KvQuant::kFp8) {
      for (int32_t e = e0; e < head_dim; ++e) o[e] = fp8[c[e]] * scale;
      continue;
    }
    if (q == KvQuant::kInt8) {
      for (int32_t e = e0; e < head_dim; ++e) o[e] = std::fma(static_cast<float>(c[e]), scale, zero);
      continue;
    }
    for (int32_t i = e0 / 2; i < head_dim / 2; ++i) {
      o[2 * i] = std::fma(static_cast<float>(c[i] & 0xf), scale, zero);
      o[2 * i + 1] = std::fma(static_cast<float>(c[i] >> 4), scale, zero);
    }
    if (head_dim % 2 != 0) {
      o[head_dim - 1] = std::fma(static_cast<float>(c[head_dim / 2] & 0xf), scale, zero);
    }
  }
}

}  // namespace ls::kernels::cpu
