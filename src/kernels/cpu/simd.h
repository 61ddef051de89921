#pragma once
// Internal to kernels/cpu: a minimal vector abstraction so each kernel is written once and
// instantiated per ISA (kernels/cpu/isa.h). An ISA struct S provides
//   S::V (a vector of S::kWidth floats), loads from f32 / bf16 / f16 memory (exact widening),
//   arithmetic, horizontal reductions and a vector exp,
// plus the register-blocking factors its kernels use (they depend on the register count).
// Scalar is the portable reference instantiation (one lane, std::exp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"

#if defined(__AVX2__) || defined(__AVX512F__)
// GCC 12 reports its own _mm512_undefined_ps() (`__m512 __Y = __Y;`) as uninitialised when the
// AVX-512 intrinsics are inlined; the diagnostic points into the header, so it is silenced there.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>  // _mm_prefetch
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define LS_KERNELS_HAVE_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LS_KERNELS_HAVE_AVX2 1
#endif

namespace ls::kernels::cpu::simd {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scalar {
  using V = float;
  static constexpr int kWidth = 1;
  static constexpr Isa kIsa = Isa::kScalar;
  // Register blocking (rows x keys for dot products, rows x vectors for row updates).
  static constexpr int kDotRows = 4;
  static constexpr int kAxpyRows = 4;
  static constexpr int kAxpyVecs = 4;
  static constexpr int kBcastKeys = 4;
  static constexpr int kBcastVecs = 4;

  static V zero() { return 0.0f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static V load_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
  static V load_f16(const uint16_t* p) { return f16_to_f32(*p); }
  static void store(float* p, V v) { *p = v; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V max(V a, V b) { return a > b ? a : b; }
  static V min(V a, V b) { return a < b ? a : b; }
  static float reduce_add(V v) { return v; }
  static float reduce_max(V v) { return v; }
  static void reduce_add4(V a, V b, V c, V d, float* out) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
  }
  static V exp(V x) { return std::exp(x); }
  static V neg_inf_to_zero(V x) { return x == -std::numeric_limits<float>::infinity() ? 0.0f : x; }
  static V pinned(V v) { return v; }
};

#if defined(LS_KERNELS_HAVE_AVX2)
struct Avx2 {
  using V = __m256;
  static constexpr int kWidth = 8;
  static constexpr Isa kIsa = Isa::kAvx2;
  static constexpr int kDotRows = 2;  // 2 x 4 accumulators + 6 operands fit in 16 ymm
  static constexpr int kAxpyRows = 2;
  static constexpr int kAxpyVecs = 4;
  static constexpr int kBcastKeys = 2;  // keys x vectors of the rows-in-lanes score kernel
  static constexpr int kBcastVecs = 4;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static V load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // out[i] = sum of the lanes of the i-th argument.
  static void reduce_add4(V a, V b, V c, V d, float* out) {
    const __m256 ab = _mm256_hadd_ps(a, b);
    const __m256 cd = _mm256_hadd_ps(c, d);
    const __m256 abcd = _mm256_hadd_ps(ab, cd);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
  // Keeps a reused operand in a register: without it GCC re-loads it as a memory operand of
  // every FMA that uses it, which makes the register-blocked kernels load-bound.
  static V pinned(V v) {
    asm("" : "+x"(v));
    return v;
  }
  static V neg_inf_to_zero(V x) {
    return _mm256_andnot_ps(
        _mm256_cmp_ps(x, set1(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ), x);
  }
  // Cephes-style expf, ~1 ulp; 0 below -87.33 (including -inf), NaN stays NaN; inputs above
  // 88 are clamped (2^n is built from the exponent field, so n must stay <= 127).
  static V exp(V x) {
    const V tiny = _mm256_cmp_ps(x, set1(-87.3365447505531f), _CMP_LT_OQ);
    x = _mm256_min_ps(set1(88.0f), x);
    const V n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, set1(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, set1(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, set1(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, set1(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, set1(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set1(1.0f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
};
#endif

#if defined(LS_KERNELS_HAVE_AVX512)
struct Avx512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  static constexpr Isa kIsa = Isa::kAvx512;
  static constexpr int kDotRows = 4;  // 4 x 4 accumulators + 8 operands of 32 zmm
  static constexpr int kAxpyRows = 4;
  static constexpr int kAxpyVecs = 4;
  static constexpr int kBcastKeys = 4;
  static constexpr int kBcastVecs = 4;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  // out[i] = sum of the lanes of the i-th argument: fold 256-bit halves, then 128-bit
  // quarters, so the four partial sums end in one vector, then finish inside 128-bit lanes.
  static void reduce_add4(V a, V b, V c, V d, float* out) {
    const __m512 ab =
        _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    const __m512 cd =
        _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    __m512 t =
        _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, t)));
  }
  // Keeps a reused operand in a register: without it GCC re-loads it as a memory operand of
  // every FMA that uses it, which makes the register-blocked kernels load-bound.
  static V pinned(V v) {
    asm("" : "+v"(v));
    return v;
  }
  static V neg_inf_to_zero(V x) {
    const __mmask16 m =
        _mm512_cmp_ps_mask(x, set1(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
    return _mm512_mask_mov_ps(x, m, _mm512_setzero_ps());
  }
  // Cephes-style expf, ~1 ulp; 0 below -87.33 (including -inf), NaN stays NaN.
  static V exp(V x) {
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, set1(-87.3365447505531f), _CMP_LT_OQ);
    x = _mm512_min_ps(set1(88.3762626647949f), x);
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, set1(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, set1(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, set1(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, set1(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, set1(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set1(1.0f)));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), _mm512_scalef_ps(p, n));
  }
};
#endif

// Asks for [data, data + bytes) to be brought towards L2 (paged KV: the hardware prefetcher
// restarts at every page, so the next page is requested while the current one is computed).
inline void prefetch_l2(const void* data, int64_t bytes) {
#if defined(__SSE__)
  const char* p = static_cast<const char*>(data);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
#else
  (void)data;
  (void)bytes;
#endif
}

// Asks for [data, data + bytes) with the non-temporal hint: into the nearest cache without
// displacing what is reused (streamed weights of a decode GEMV, read once per token).
inline void prefetch_nta(const void* data, int64_t bytes) {
#if defined(__SSE__)
  const char* p = static_cast<const char*>(data);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_NTA);
#else
  (void)data;
  (void)bytes;
#endif
}

// Widening loads from a KV / weight element type to S::V.
template <class S, DType kDtype>
inline typename S::V load_as_f32(const void* base, int64_t index) {
  if constexpr (kDtype == DType::kF32) {
    return S::load(static_cast<const float*>(base) + index);
  } else if constexpr (kDtype == DType::kBF16) {
    return S::load_bf16(static_cast<const uint16_t*>(base) + index);
  } else {
    static_assert(kDtype == DType::kF16, "f32, bf16 or f16");
    return S::load_f16(static_cast<const uint16_t*>(base) + index);
  }
}

// Runs fn.template operator()<S>() with S the ISA struct for `isa` (scalar when `isa` was not
// compiled in).
template <class Fn>
inline void dispatch_isa(Isa isa, Fn&& fn) {
  switch (isa) {
#if defined(LS_KERNELS_HAVE_AVX512)
    case Isa::kAvx512:
      fn.template operator()<Avx512>();
      return;
#endif
#if defined(LS_KERNELS_HAVE_AVX2)
    case Isa::kAvx2:
      fn.template operator()<Avx2>();
      return;
#endif
    default:
      fn.template operator()<Scalar>();
      return;
  }
}

// Same for the storage dtype of a tensor (f32 / bf16 / f16; anything else is treated as f32
// by callers that validated it first).
template <class Fn>
inline void dispatch_float_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kBF16:
      fn.template operator()<DType::kBF16>();
      return;
    case DType::kF16:
      fn.template operator()<DType::kF16>();
      return;
    default:
      fn.template operator()<DType::kF32>();
      return;
  }
}

inline bool is_float_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

}  // namespace ls::kernels::cpu::simd

namespace ls::kernels::cpu::simd {

// dst[i] = float(src[i]) for n elements of a float dtype, vectorised.
template <class S>
inline void widen_to_f32(DType dtype, const void* src, float* dst, int64_t n) {
  constexpr int64_t kW = S::kWidth;
  dispatch_float_dtype(dtype, [&]<DType kDt>() {
    int64_t i = 0;
    for (; i + kW <= n; i += kW) S::store(dst + i, load_as_f32<S, kDt>(src, i));
    for (; i < n; ++i) dst[i] = load_as_f32<Scalar, kDt>(src, i);
  });
}

}  // namespace ls::kernels::cpu::simd
