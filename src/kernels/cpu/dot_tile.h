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

namespace ls::kernels::cpu {

// ---- rows in lanes ----
// c[j, lanes] = sum_e b[j, e] * at[e, lanes]: the same products with the a operand transposed
// (at: [k, vecs * width], its rows in lanes, zero padded) and b in f32, so every FMA takes a
// broadcast element of b and a vector of at; no horizontal sums. Used for prefill-sized
// blocks (attention tiles, matmul with M >= 16); kKeys x kVecs accumulators per block, with
// more keys per block when there are fewer vectors.

template <class S, int kKeys, int kVecs>
inline void lanes_block(const float* at, int64_t lda, const float* b, int64_t ldb, int64_t k,
                        int64_t j0, int64_t c0, float* c, int64_t ldc) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  V acc[kKeys][kVecs];
  for (int j = 0; j < kKeys; ++j) {
    for (int v = 0; v < kVecs; ++v) acc[j][v] = S::zero();
  }
  for (int64_t e = 0; e < k; ++e) {
    V av[kVecs];
    for (int v = 0; v < kVecs; ++v) av[v] = S::pinned(S::load(at + e * lda + (c0 + v) * kW));
    for (int j = 0; j < kKeys; ++j) {
      const V bb = S::set1(b[(j0 + j) * ldb + e]);
      for (int v = 0; v < kVecs; ++v) acc[j][v] = S::fma(bb, av[v], acc[j][v]);
    }
  }
  for (int j = 0; j < kKeys; ++j) {
    for (int v = 0; v < kVecs; ++v) S::store(c + (j0 + j) * ldc + (c0 + v) * kW, acc[j][v]);
  }
}

template <class S, int kVecs>
inline void lanes_cols(const float* at, int64_t lda, const float* b, int64_t ldb, int64_t n,
                       int64_t k, int64_t c0, float* c, int64_t ldc) {
  constexpr int kKeys = S::kBcastKeys * S::kBcastVecs / kVecs;
  int64_t j = 0;
  for (; j + kKeys <= n; j += kKeys)
    lanes_block<S, kKeys, kVecs>(at, lda, b, ldb, k, j, c0, c, ldc);
  for (; j < n; ++j) lanes_block<S, 1, kVecs>(at, lda, b, ldb, k, j, c0, c, ldc);
}

// c[j * ldc + r] = sum_e b[j * ldb + e] * at[e * lda + r] for j < n and r < vecs * width.
template <class S>
inline void lanes_tile(const float* at, int64_t lda, int64_t vecs, const float* b, int64_t ldb,
                       int64_t n, int64_t k, float* c, int64_t ldc) {
  constexpr int kV = S::kBcastVecs;
  int64_t v = 0;
  for (; v + kV <= vecs; v += kV) lanes_cols<S, kV>(at, lda, b, ldb, n, k, v, c, ldc);
  if constexpr (kV >= 4) {
    if (v + 2 <= vecs) {
      lanes_cols<S, 2>(at, lda, b, ldb, n, k, v, c, ldc);
      v += 2;
    }
  }
  for (; v < vecs; ++v) lanes_cols<S, 1>(at, lda, b, ldb, n, k, v, c, ldc);
}

}  // namespace ls::kernels::cpu
