#pragma once
// Internal to kernels/cpu: the arithmetic of one attention tile, R = (query tokens x the GQA
// group's heads) rows against one head-page at a time, with online softmax. Rows are
// token-major (r = t * group + h) so a tile's queries and outputs are contiguous rows of q/out.
//
// Per page:  S = Q·K^T (dot_tile, K widened from the page's dtype in registers)
//            mask S per row to the visible keys (-inf elsewhere and in the row padding)
//            m' = max(m, rowmax S); alpha = e^(m - m'); P = e^(S - m'); l = l·alpha + rowsum P
//            O = O·alpha + P·V      (V widened in registers, kAxpyRows x kAxpyVecs accumulators)
// Q is pre-scaled by the softmax scale. A row that has seen no visible key keeps m = -inf,
// l = 0, O = 0.

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

// Per-thread working set of one tile (all f32, row stride in the comment).
struct TileState {
  int32_t rows = 0;
  int32_t head_dim = 0;
  int32_t ld_s = 0;        // page_tokens rounded up to the vector width
  float* q = nullptr;      // [rows, head_dim] scaled queries
  float* s = nullptr;      // [rows, ld_s] scores, then probabilities
  float* o = nullptr;      // [rows, head_dim] unnormalised output
  float* m = nullptr;      // [rows] running max
  float* l = nullptr;      // [rows] running sum
  float* alpha = nullptr;  // [rows] rescale factor of the current page
};

template <class S, DType kKv, int kRows, int kVecs>
inline void pv_block(const TileState& t, int32_t r0, int32_t keys, const void* v, int64_t v_row0,
                     int64_t e0) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  const int64_t d = t.head_dim;
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    const V a = S::set1(t.alpha[r0 + r]);
    for (int c = 0; c < kVecs; ++c)
      acc[r][c] = S::mul(S::load(t.o + (r0 + r) * d + e0 + c * kW), a);
  }
  for (int32_t j = 0; j < keys; ++j) {
    V vv[kVecs];
    for (int c = 0; c < kVecs; ++c)
      vv[c] = simd::load_as_f32<S, kKv>(v, (v_row0 + j) * d + e0 + c * kW);
    for (int r = 0; r < kRows; ++r) {
      const V pr = S::set1(t.s[(r0 + r) * static_cast<int64_t>(t.ld_s) + j]);
      for (int c = 0; c < kVecs; ++c) acc[r][c] = S::fma(pr, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kVecs; ++c) S::store(t.o + (r0 + r) * d + e0 + c * kW, acc[r][c]);
  }
}

template <class S, DType kKv, int kRows>
inline void pv_rows(const TileState& t, int32_t r0, int32_t keys, const void* v, int64_t v_row0) {
  constexpr int kVecs = S::kAxpyVecs;
  constexpr int64_t kW = S::kWidth;
  const int64_t vecs = t.head_dim / kW;
  int64_t c = 0;
  for (; c + kVecs <= vecs; c += kVecs)
    pv_block<S, kKv, kRows, kVecs>(t, r0, keys, v, v_row0, c * kW);
  for (; c < vecs; ++c) pv_block<S, kKv, kRows, 1>(t, r0, keys, v, v_row0, c * kW);
}

// O[r] = O[r] * alpha[r] + sum_j P[r, j] V[j] for all rows; keys beyond `keys` have P = 0.
// Requires head_dim % S::kWidth == 0 (the caller falls back to Scalar otherwise).
template <class S, DType kKv>
inline void pv_update(const TileState& t, int32_t keys, const void* v, int64_t v_row0) {
  constexpr int kR = S::kAxpyRows;
  int32_t r = 0;
  for (; r + kR <= t.rows; r += kR) pv_rows<S, kKv, kR>(t, r, keys, v, v_row0);
  for (; r < t.rows; ++r) pv_rows<S, kKv, 1>(t, r, keys, v, v_row0);
}

// Online-softmax update of every row from its masked scores; turns S into P in place.
template <class S>
inline void softmax_update(const TileState& t) {
  using V = typename S::V;
  constexpr int32_t kW = S::kWidth;
  for (int32_t r = 0; r < t.rows; ++r) {
    float* row = t.s + static_cast<int64_t>(r) * t.ld_s;
    V mx = S::set1(simd::kNegInf);
    for (int32_t j = 0; j < t.ld_s; j += kW) mx = S::max(mx, S::load(row + j));
    const float row_max = S::reduce_max(mx);
    const float m_new = std::max(t.m[r], row_max);
    if (m_new == simd::kNegInf) {  // nothing visible yet: keep O, l untouched
      t.alpha[r] = 1.0f;
      for (int32_t j = 0; j < t.ld_s; ++j) row[j] = 0.0f;
      continue;
    }
    const float alpha = S::reduce_max(S::exp(S::set1(t.m[r] - m_new)));
    const V vm = S::set1(m_new);
    V sum = S::zero();
    for (int32_t j = 0; j < t.ld_s; j += kW) {
      const V e = S::exp(S::sub(S::load(row + j), vm));
      S::store(row + j, e);
      sum = S::add(sum, e);
    }
    t.alpha[r] = alpha;
    t.l[r] = t.l[r] * alpha + S::reduce_add(sum);
    t.m[r] = m_new;
  }
}

}  // namespace ls::kernels::cpu
