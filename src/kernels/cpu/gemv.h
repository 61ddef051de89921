#pragma once
// Internal to kernels/cpu: the decode GEMV, y[r, j] = x[r, :] · w[j, :] for few rows of x and a
// contiguous range of weight rows. The weight rows are one contiguous byte range, read once
// as a single forward stream with software prefetch kGemvPrefetchBytes ahead.
//
// Why the prefetch: decode weights (K = 512..1408 bf16: 1-3 KiB rows) are read four rows at a
// time, i.e. four short interleaved streams per block; the hardware prefetchers retrain at
// every block and at every 4 KiB, and the measured rate was 72% of the read bandwidth
// (bench/kernels, BM_MatmulDecodeChain). Requesting the bytes 8 KiB ahead of the block being
// computed keeps enough misses in flight to run at the bandwidth. The non-temporal hint keeps
// the streamed weights from displacing activations and KV from the caches (measured faster
// than prefetching into L1 at every distance tried).

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

inline constexpr int64_t kGemvPrefetchBytes = 8192;

// c[r * ldc + j] = a[r * lda + :] · b[(b_row0 + j) * k + :] for r < kRows, j < kCols (kCols
// <= 4). While computing, prefetches the block's bytes shifted kGemvPrefetchBytes ahead, as
// long as they lie before pf_end.
template <class S, DType kB, int kRows, int kCols>
inline void gemv_block(const float* a, int64_t lda, const void* b, int64_t b_row0, int64_t k,
                       float* c, int64_t ldc, const char* pf, const char* pf_end) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  constexpr int64_t kStepBytes = kCols * kW * (kB == DType::kF32 ? 4 : 2);
  V acc[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = S::zero();
  }
  int64_t e = 0;
  for (; e + kW <= k; e += kW) {
    if (pf < pf_end) simd::prefetch_nta(pf, kStepBytes);
    pf += kStepBytes;
    V bv[kCols];
    for (int j = 0; j < kCols; ++j)
      bv[j] = S::pinned(simd::load_as_f32<S, kB>(b, (b_row0 + j) * k + e));
    for (int r = 0; r < kRows; ++r) {
      const V av = S::load(a + r * lda + e);
      for (int j = 0; j < kCols; ++j) acc[r][j] = S::fma(av, bv[j], acc[r][j]);
    }
  }
  // The tail (k % width) is at most width - 1 elements of each row: prefetch what the vector
  // loop did not cover.
  if (e < k && pf < pf_end) simd::prefetch_nta(pf, kCols * (k - e) * (kB == DType::kF32 ? 4 : 2));
  for (int r = 0; r < kRows; ++r) {
    float sums[4];
    S::reduce_add4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], sums);
    for (int j = 0; j < kCols; ++j) {
      for (int64_t t = e; t < k; ++t) {
        sums[j] += a[r * lda + t] * simd::load_as_f32<simd::Scalar, kB>(b, (b_row0 + j) * k + t);
      }
      c[r * ldc + j] = sums[j];
    }
  }
}

// All row groups of x (S::kDotRows at a time) against weight rows [j, j + kCols): the block's
// bytes come from memory once, for the first group, and from L1 for the others.
template <class S, DType kB, int kCols>
inline void gemv_cols(const float* x, int64_t m, int64_t k, const void* w, int64_t j, float* y,
                      int64_t ldy, const char* pf, const char* pf_end) {
  constexpr int kR = S::kDotRows;
  for (int64_t r = 0; r < m; r += kR) {
    const int64_t rows = std::min<int64_t>(kR, m - r);
    const float* xr = x + r * k;
    float* yr = y + r * ldy + j;
    if (rows == kR) {
      gemv_block<S, kB, kR, kCols>(xr, k, w, j, k, yr, ldy, pf, pf_end);
    } else if (rows == 1) {
      gemv_block<S, kB, 1, kCols>(xr, k, w, j, k, yr, ldy, pf, pf_end);
    } else if constexpr (kR > 2) {
      if (rows == 2) {
        gemv_block<S, kB, 2, kCols>(xr, k, w, j, k, yr, ldy, pf, pf_end);
      } else {
        gemv_block<S, kB, 3, kCols>(xr, k, w, j, k, yr, ldy, pf, pf_end);
      }
    }
    pf_end = pf;  // later groups read the block from cache: nothing more to prefetch
  }
}

// y[r * ldy + j] = x[r * k + :] · w[j * k + :] for r < m and j in [row0, row1); w is [N, k] in
// its storage dtype kB.
template <class S, DType kB>
inline void gemv_rows(const float* x, int64_t m, int64_t k, const void* w, int64_t row0,
                      int64_t row1, float* y, int64_t ldy) {
  constexpr int64_t kElem = kB == DType::kF32 ? 4 : 2;
  const char* base = static_cast<const char*>(w);
  const char* end = base + row1 * k * kElem;
  const char* start = base + row0 * k * kElem;
  // The first blocks' bytes, before the blocks' own prefetches take over.
  simd::prefetch_nta(start, std::min<int64_t>(kGemvPrefetchBytes, end - start));
  int64_t j = row0;
  for (; j + 4 <= row1; j += 4) {
    gemv_cols<S, kB, 4>(x, m, k, w, j, y, ldy, base + j * k * kElem + kGemvPrefetchBytes, end);
  }
  for (; j < row1; ++j) {
    gemv_cols<S, kB, 1>(x, m, k, w, j, y, ldy, base + j * k * kElem + kGemvPrefetchBytes, end);
  }
}

}  // namespace ls::kernels::cpu
