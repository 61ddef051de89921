#pragma once
// Internal to kernels/cpu: the decode-tile arithmetic (rows layout, kernels/cpu/attention_tile.h)
// on int8 / int4 head-pages with AVX2 integer dot products, without a dequantized copy of the
// page. Decode attention is compute-bound on the CPU (one layer at 16K reads a few GB/s), so a
// quantized page pays only if it costs fewer instructions than bf16, not just fewer bytes.
//
// A key or value row is x^ = scale * c + zero (c the u8 / u4 codes, kernels/kv_quant.h), so
//   score  s[r, j] = q_r · x^_j = scale_j * (q_r · c_j) + zero_j * Σ_e q_r[e]
//   output o[r]  += Σ_j p[r, j] x^_j = Σ_j (p[r, j] * scale_j) c_j + Σ_j p[r, j] * zero_j.
// Both products run on the codes as 16-bit integers (vpmaddwd, i32 sums):
//  - queries are quantized once per tile, per row, to int16: q^ = rint(q / qs), qs = max|q| /
//    32767; the score is then exactly qs * scale_j * (q^ · c_j) + zero_j * qs * Σ q^ up to f32
//    rounding, i.e. the score of q^ · x^: |q - q^ * qs| <= qs / 2 = max|q| / 65534 per element;
//  - per page and row, p'[j] = p[r, j] * scale_j is quantized to int16 against the row's largest
//    p' on the page (ps = max p' / 32767); |p' - p'^ * ps| <= ps / 2 per key. The zero point's
//    term Σ_j p[r, j] * zero_j stays f32.
// So the result differs from attention on the dequantized pages by those two roundings (about
// 2^-16 of the largest query element and of the page's largest p', against bf16 pages' 2^-9 of
// every K and V element), plus f32 summation order. i32 sums cannot overflow (see the limits
// below).
//
// int4 codes hold element 2i in the low nibble of byte i and 2i + 1 in the high nibble; the
// query rows are stored with each 32-element block's even elements first, then its odd ones,
// so the nibbles are used where they lie (an and / a shift, no interleave), and the P·V sums of
// even and odd elements are interleaved once per page.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/simd.h"
#include "kernels/kv_quant.h"

#if defined(LS_KERNELS_HAVE_AVX2)

namespace ls::kernels::cpu {

// i32 lane sums: a lane of q^·c adds head_dim / 8 products of |q^| <= 32767 and c <= 255
// (2^31 / (32767 * 255) = 257 of them: head_dim <= 2056; the limit below keeps a margin); a lane of P·V adds one product of
// p'^ <= 32767 and c <= 255 per key (page_tokens <= 256). Both bound |sum| by the count times
// the largest product, so they hold for any data, not just typical data.
inline constexpr int32_t kIntDecodeMaxHeadDim = 1024;
inline constexpr int32_t kIntDecodeMaxPageTokens = 256;

// Whether the integer decode path covers a pool of this format and shape (else the tile runs
// the f32 kernel on dequantized pages).
inline bool int_decode_supported(KvQuant q, int32_t head_dim, int32_t page_tokens) {
  // Even page_tokens: the last key pair of a page with an odd key count then reads a code row
  // that exists (times p'^ = 0).
  return (q == KvQuant::kInt8 || q == KvQuant::kInt4) && head_dim % 32 == 0 &&
         head_dim <= kIntDecodeMaxHeadDim && page_tokens % 2 == 0 &&
         page_tokens <= kIntDecodeMaxPageTokens;
}

// Per-thread buffers of the integer path, grown on demand and kept across calls.
struct IntDecodeScratch {
  std::vector<int16_t> q;   // [rows, head_dim] quantized query rows (int4: block-permuted)
  std::vector<float> qs;    // [rows] query scale
  std::vector<float> qsum;  // [rows] qs * Σ q^
  std::vector<int16_t> p;   // [rows, ldp] quantized p' of the current page (ldp even)
  std::vector<float> ps;    // [rows] p' scale of the current page
  std::vector<float> zsum;  // [rows] Σ_j p[r, j] * zero_j of the current page
  std::vector<float> pf;    // [ldp] one row's p' (f32)
  std::vector<float> ksc, kzr;  // [ldp + 4] scale / zero of the page's rows (K, then V)
  int32_t ldp = 0;
};

inline IntDecodeScratch& int_decode_scratch() {
  thread_local IntDecodeScratch scratch;
  return scratch;
}

// Keeps an integer operand in a register (see simd::Avx2::pinned).
inline __m256i int_pinned(__m256i v) {
  asm("" : "+x"(v));
  return v;
}

// Quantizes the tile's (pre-scaled, f32) query rows and sizes the page buffers.
inline void int_decode_begin(const TileState& t, KvQuant quant, int32_t page_tokens,
                             IntDecodeScratch& sc) {
  const int32_t d = t.head_dim;
  const auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  sc.ldp = (page_tokens + 1) / 2 * 2;
  grow(sc.q, int64_t{t.rows} * d);
  grow(sc.qs, t.rows);
  grow(sc.qsum, t.rows);
  grow(sc.p, int64_t{t.rows} * sc.ldp);
  grow(sc.ps, t.rows);
  grow(sc.zsum, t.rows);
  grow(sc.pf, sc.ldp);
  grow(sc.ksc, sc.ldp + 4);
  grow(sc.kzr, sc.ldp + 4);
  const bool int4 = quant == KvQuant::kInt4;
  for (int32_t r = 0; r < t.rows; ++r) {
    const float* x = t.q + int64_t{r} * d;
    float amax = 0.0f;
    bool finite = true;
    for (int32_t e = 0; e < d; ++e) {
      finite = finite && std::isfinite(x[e]);
      amax = std::max(amax, std::fabs(x[e]));
    }
    // A row so small that amax / 32767 underflows to 0 quantizes as a zero row (scale 1), not
    // through an infinite inverse (0 * inf would be NaN).
    const float scaled = amax / 32767.0f;
    const float qs = !finite ? NAN : (scaled > 0.0f ? scaled : 1.0f);
    const float inv = finite && scaled > 0.0f ? 1.0f / qs : 0.0f;
    int16_t* dst = sc.q.data() + int64_t{r} * d;
    int64_t sum = 0;
    for (int32_t e = 0; e < d; ++e) {
      const float v = std::fmin(32767.0f, std::fmax(-32767.0f, std::rint(x[e] * inv)));
      const auto qi = static_cast<int16_t>(finite ? v : 0.0f);
      sum += qi;
      const int32_t pos = int4 ? (e & ~31) + ((e & 1) << 4) + ((e & 31) >> 1) : e;
      dst[pos] = qi;
    }
    sc.qs[static_cast<size_t>(r)] = qs;
    sc.qsum[static_cast<size_t>(r)] = qs * static_cast<float>(sum);
  }
}

// Codes of 16 elements as i16 (int8: elements [e, e + 16) from bytes [e, e + 16)).
inline __m256i int_widen16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// out[r][j] = q^_r · c_j (i32) for kRows query rows and 4 key rows (code row pointers).
template <bool kInt4, int kRows>
inline void int_dot_block(const int16_t* q, int32_t d, const uint8_t* const* keys,
                          int32_t out[][4]) {
  __m256i acc[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_si256();
  }
  const auto accumulate = [&](const __m256i* c, int32_t qe) {
    for (int r = 0; r < kRows; ++r) {
      const __m256i qv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + int64_t{r} * d + qe));
      for (int j = 0; j < 4; ++j)
        acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(qv, c[j]));
    }
  };
  if constexpr (!kInt4) {
    for (int32_t e = 0; e < d; e += 16) {
      __m256i c[4];
      for (int j = 0; j < 4; ++j) c[j] = int_pinned(int_widen16(keys[j] + e));
      accumulate(c, e);
    }
  } else {
    const __m256i low = _mm256_set1_epi16(0x0f);
    for (int32_t e = 0; e < d; e += 32) {  // bytes [e / 2, e / 2 + 16): elements [e, e + 32)
      __m256i c[4];
      for (int j = 0; j < 4; ++j) c[j] = int_pinned(_mm256_and_si256(int_widen16(keys[j] + e / 2), low));
      accumulate(c, e);  // even elements
      for (int j = 0; j < 4; ++j) c[j] = int_pinned(_mm256_srli_epi16(int_widen16(keys[j] + e / 2), 4));
      accumulate(c, e + 16);  // odd elements
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const __m256i h =
        _mm256_hadd_epi32(_mm256_hadd_epi32(acc[r][0], acc[r][1]),
                          _mm256_hadd_epi32(acc[r][2], acc[r][3]));
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[r]), s);
  }
}

// Copies the [keys, 2] (scale, zero) parameters of a page's rows into sc.ksc / sc.kzr.
inline void int_split_params(IntDecodeScratch& sc, const float* params, int32_t keys) {
  float* ksc = sc.ksc.data();
  float* kzr = sc.kzr.data();
  int32_t j = 0;
  for (; j + 8 <= keys; j += 8) {
    const __m256 a = _mm256_loadu_ps(params + 2 * j);      // s0 z0 s1 z1 | s2 z2 s3 z3
    const __m256 b = _mm256_loadu_ps(params + 2 * j + 8);  // s4 z4 s5 z5 | s6 z6 s7 z7
    // shuffle: s0 s1 s4 s5 | s2 s3 s6 s7; the 64-bit permute restores key order.
    const __m256d sc4 = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88));
    const __m256d zr4 = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd));
    _mm256_storeu_ps(ksc + j, _mm256_castpd_ps(_mm256_permute4x64_pd(sc4, 0xd8)));
    _mm256_storeu_ps(kzr + j, _mm256_castpd_ps(_mm256_permute4x64_pd(zr4, 0xd8)));
  }
  for (; j < keys; ++j) {
    ksc[j] = params[2 * j];
    kzr[j] = params[2 * j + 1];
  }
  for (; j < keys + 4; ++j) ksc[j] = kzr[j] = 0.0f;  // a partial block of 4 keys reads these
}

// S[r, j] for the page's keys j < keys (rows layout): qs_r * scale_j * (q^_r · c_j) +
// zero_j * qsum_r. `codes` are the page's code rows, `params` its [page_tokens, 2] parameters.
template <bool kInt4>
inline void int_scores(const TileState& t, IntDecodeScratch& sc, const uint8_t* codes,
                       const float* params, int32_t keys) {
  const int32_t d = t.head_dim;
  const int64_t row_bytes = kInt4 ? d / 2 : d;
  int_split_params(sc, params, keys);
  for (int32_t j0 = 0; j0 < keys; j0 += 4) {
    const int32_t n = std::min(4, keys - j0);
    const uint8_t* k[4];
    for (int j = 0; j < 4; ++j) k[j] = codes + (j0 + std::min(j, n - 1)) * row_bytes;
    const __m128 ksc = _mm_loadu_ps(sc.ksc.data() + j0);
    const __m128 kzr = _mm_loadu_ps(sc.kzr.data() + j0);
    for (int32_t r0 = 0; r0 < t.rows; r0 += 2) {
      alignas(16) int32_t dots[2][4];
      const int16_t* q = sc.q.data() + int64_t{r0} * d;
      const int32_t nr = std::min(2, t.rows - r0);
      if (nr == 2) {
        int_dot_block<kInt4, 2>(q, d, k, dots);
      } else {
        int_dot_block<kInt4, 1>(q, d, k, dots);
      }
      for (int32_t rr = 0; rr < nr; ++rr) {
        const auto r = static_cast<size_t>(r0 + rr);
        const __m128 s4 = _mm_fmadd_ps(
            _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dots[rr]))),
            _mm_mul_ps(ksc, _mm_set1_ps(sc.qs[r])), _mm_mul_ps(kzr, _mm_set1_ps(sc.qsum[r])));
        float* srow = t.s + int64_t{r0 + rr} * t.ld_s + j0;
        if (n == 4) {
          _mm_storeu_ps(srow, s4);
        } else {
          alignas(16) float tmp[4];
          _mm_store_ps(tmp, s4);
          for (int32_t j = 0; j < n; ++j) srow[j] = tmp[j];
        }
      }
    }
  }
}

// Quantizes the page's P (t.s after the softmax, keys j < keys) times each key's scale into
// sc.p, with sc.ps / sc.zsum per row; key `keys` of an odd count gets p'^ = 0.
inline void int_quantize_p(const TileState& t, IntDecodeScratch& sc, const float* params,
                           int32_t keys) {
  const int32_t ldp = sc.ldp;
  int_split_params(sc, params, keys);  // now the V rows' scale / zero
  float* pf = sc.pf.data();
  for (int32_t r = 0; r < t.rows; ++r) {
    const float* prow = t.s + int64_t{r} * t.ld_s;
    __m256 vmax = _mm256_setzero_ps(), vz = _mm256_setzero_ps();
    __m256 bad = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= keys; j += 8) {
      const __m256 p = _mm256_loadu_ps(prow + j);
      const __m256 v = _mm256_mul_ps(p, _mm256_loadu_ps(sc.ksc.data() + j));
      _mm256_storeu_ps(pf + j, v);
      vmax = _mm256_max_ps(vmax, v);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      vz = _mm256_fmadd_ps(p, _mm256_loadu_ps(sc.kzr.data() + j), vz);
    }
    float mx = simd::Avx2::reduce_max(vmax), z = simd::Avx2::reduce_add(vz);
    bool finite = _mm256_movemask_ps(bad) == 0;
    for (; j < keys; ++j) {
      pf[j] = prow[j] * sc.ksc[static_cast<size_t>(j)];
      finite = finite && !std::isnan(pf[j]);
      mx = std::max(mx, pf[j]);
      z += prow[j] * sc.kzr[static_cast<size_t>(j)];
    }
    finite = finite && std::isfinite(mx) && std::isfinite(z);
    const float ps = mx > 0.0f ? mx / 32767.0f : 0.0f;
    const float inv = ps > 0.0f ? 1.0f / ps : 0.0f;
    sc.ps[static_cast<size_t>(r)] = finite ? ps : NAN;
    sc.zsum[static_cast<size_t>(r)] = z;
    int16_t* dst = sc.p.data() + int64_t{r} * ldp;
    const __m256 vinv = _mm256_set1_ps(finite ? inv : 0.0f);
    j = 0;
    for (; j + 8 <= keys; j += 8) {
      const __m256i i = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(pf + j), vinv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                       _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
    }
    for (; j < keys; ++j) {
      dst[j] = static_cast<int16_t>(finite ? std::rint(pf[j] * inv) : 0.0f);
    }
    if (keys % 2 != 0) dst[keys] = 0;
  }
}

// acc[r][0..1] += Σ over key pairs of the page of p'^ pairs times code pairs, for 16 output
// elements at e (int8: elements e .. e + 7 and e + 8 .. e + 15; int4: the even and the odd
// elements of [e, e + 16)).
template <bool kInt4, int kRows>
inline void int_pv_chunk(const IntDecodeScratch& sc, int32_t r0, const uint8_t* codes,
                         int64_t row_bytes, int32_t keys, int32_t e, PagePrefetch* prefetch,
                         __m256i acc[][2]) {
  const __m256i low = _mm256_set1_epi16(0x0f);
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int32_t j = 0; j < keys; j += 2) {
    if (prefetch) prefetch->step();
    const uint8_t* a = codes + int64_t{j} * row_bytes;
    const uint8_t* b = a + row_bytes;
    __m256i w0, w1;
    if constexpr (!kInt4) {
      const __m128i av = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + e));
      const __m128i bv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + e));
      w0 = int_pinned(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(av, bv)));
      w1 = int_pinned(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(av, bv)));
    } else {
      const __m128i av = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + e / 2));
      const __m128i bv = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + e / 2));
      const __m256i w = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(av, bv));
      w0 = int_pinned(_mm256_and_si256(w, low));
      w1 = int_pinned(_mm256_srli_epi16(w, 4));
    }
    for (int r = 0; r < kRows; ++r) {
      int32_t pair = 0;
      std::memcpy(&pair, sc.p.data() + int64_t{r0 + r} * sc.ldp + j, sizeof(pair));
      const __m256i pp = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(w0, pp));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(w1, pp));
    }
  }
}

// O[r] = O[r] * alpha[r] + P·V over the page's keys j < keys, on the codes (see the top).
template <bool kInt4>
inline void int_pv(const TileState& t, IntDecodeScratch& sc, const uint8_t* codes,
                   const float* params, int32_t keys) {
  int_quantize_p(t, sc, params, keys);
  const int32_t d = t.head_dim;
  const int64_t row_bytes = kInt4 ? d / 2 : d;
  const int32_t key_pairs = (keys + 1) / 2 * 2;
  for (int32_t r0 = 0; r0 < t.rows; r0 += 4) {
    const int32_t nr = std::min(4, t.rows - r0);
    for (int32_t e = 0; e < d; e += 16) {
      __m256i acc[4][2];
      PagePrefetch* pf = e == 0 ? t.prefetch : nullptr;
      switch (nr) {
        case 4:
          int_pv_chunk<kInt4, 4>(sc, r0, codes, row_bytes, key_pairs, e, pf, acc);
          break;
        case 3:
          int_pv_chunk<kInt4, 3>(sc, r0, codes, row_bytes, key_pairs, e, pf, acc);
          break;
        case 2:
          int_pv_chunk<kInt4, 2>(sc, r0, codes, row_bytes, key_pairs, e, pf, acc);
          break;
        default:
          int_pv_chunk<kInt4, 1>(sc, r0, codes, row_bytes, key_pairs, e, pf, acc);
          break;
      }
      for (int32_t rr = 0; rr < nr; ++rr) {
        const int32_t r = r0 + rr;
        __m256i x0 = acc[rr][0], x1 = acc[rr][1];
        if constexpr (kInt4) {  // even / odd elements -> e .. e + 7, e + 8 .. e + 15
          const __m256i lo = _mm256_unpacklo_epi32(x0, x1), hi = _mm256_unpackhi_epi32(x0, x1);
          x0 = _mm256_permute2x128_si256(lo, hi, 0x20);
          x1 = _mm256_permute2x128_si256(lo, hi, 0x31);
        }
        const __m256 alpha = _mm256_set1_ps(t.alpha[r]);
        const __m256 ps = _mm256_set1_ps(sc.ps[static_cast<size_t>(r)]);
        const __m256 z = _mm256_set1_ps(sc.zsum[static_cast<size_t>(r)]);
        float* o = t.o + int64_t{r} * d + e;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(ps, _mm256_cvtepi32_ps(x0),
                                            _mm256_fmadd_ps(_mm256_loadu_ps(o), alpha, z)));
        _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(ps, _mm256_cvtepi32_ps(x1),
                                                _mm256_fmadd_ps(_mm256_loadu_ps(o + 8), alpha, z)));
      }
    }
  }
}

}  // namespace ls::kernels::cpu

#endif  // LS_KERNELS_HAVE_AVX2
