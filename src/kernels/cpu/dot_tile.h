#pragma once
// Internal to kernels/cpu: c[r, j] = a[r, :] · b[j, :] over k, the shared inner kernel of the
// small-M matmul (a = activations, b = weight rows) and of attention scores (a = queries,
// b = one page of keys). b is read in its storage dtype and widened in registers; kDotRows x 4
// vector accumulators per block, then one 4-way horizontal reduction per row. Each block of
// four b rows is streamed once per kDotRows rows of a, so for m <= kDotRows every element of b
// is read exactly once.

#include <cstdint>

#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

template <class S, DType kB, int kRows, int kCols>
inline void dot_block(const float* a, int64_t lda, const void* b, int64_t b_row0, int64_t ldb,
                      int64_t k, float* c, int64_t ldc) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  V acc[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = S::zero();
  }
  int64_t e = 0;
  for (; e + kW <= k; e += kW) {
    V bv[kCols];
    for (int j = 0; j < kCols; ++j)
      bv[j] = S::pinned(simd::load_as_f32<S, kB>(b, (b_row0 + j) * ldb + e));
    for (int r = 0; r < kRows; ++r) {
      const V av = S::load(a + r * lda + e);
      for (int j = 0; j < kCols; ++j) acc[r][j] = S::fma(av, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float sums[4];
    S::reduce_add4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], sums);
    for (int j = 0; j < kCols; ++j) {
      for (int64_t t = e; t < k; ++t) {  // k % width tail
        sums[j] += a[r * lda + t] * simd::load_as_f32<simd::Scalar, kB>(b, (b_row0 + j) * ldb + t);
      }
      c[r * ldc + j] = sums[j];
    }
  }
}

template <class S, DType kB, int kCols>
inline void dot_rows(const float* a, int64_t lda, int64_t m, const void* b, int64_t b_row0,
                     int64_t ldb, int64_t k, float* c, int64_t ldc) {
  constexpr int kR = S::kDotRows;
  int64_t r = 0;
  for (; r + kR <= m; r += kR) {
    dot_block<S, kB, kR, kCols>(a + r * lda, lda, b, b_row0, ldb, k, c + r * ldc, ldc);
  }
  // The remaining rows in one block, so b is streamed once more rather than once per row.
  const int64_t rest = m - r;
  a += r * lda;
  c += r * ldc;
  if constexpr (kR > 3) {
    if (rest == 3) return dot_block<S, kB, 3, kCols>(a, lda, b, b_row0, ldb, k, c, ldc);
  }
  if constexpr (kR > 2) {
    if (rest == 2) return dot_block<S, kB, 2, kCols>(a, lda, b, b_row0, ldb, k, c, ldc);
  }
  if (rest == 1) dot_block<S, kB, 1, kCols>(a, lda, b, b_row0, ldb, k, c, ldc);
}

// c[r * ldc + j] = sum_e a[r * lda + e] * b[(b_row0 + j) * ldb + e] for r < m, j < n.
template <class S, DType kB>
inline void dot_tile(const float* a, int64_t lda, int64_t m, const void* b, int64_t b_row0,
                     int64_t ldb, int64_t n, int64_t k, float* c, int64_t ldc) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) dot_rows<S, kB, 4>(a, lda, m, b, b_row0 + j, ldb, k, c + j, ldc);
  for (; j < n; ++j) dot_rows<S, kB, 1>(a, lda, m, b, b_row0 + j, ldb, k, c + j, ldc);
}

}  // namespace ls::kernels::cpu
