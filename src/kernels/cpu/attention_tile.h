#pragma once
// Internal to kernels/cpu: the arithmetic of one attention tile, R = (query tokens x the GQA
// group's heads) rows against one head-page at a time, with online softmax. Rows are
// token-major (r = t * group + h) so a tile's queries and outputs are contiguous rows of q/out.
//
// Per page:  S = Q·K^T
//            mask S per row to the visible keys (-inf elsewhere)
//            m' = max(m, rowmax S); alpha = e^(m - m'); P = e^(S - m'); l = l·alpha + rowsum P
//            O = O·alpha + P·V      (V widened in registers, kAxpyRows x kAxpyVecs accumulators)
// Q is pre-scaled by the softmax scale. A row that has seen no visible key keeps m = -inf,
// l = 0, O = 0.
//
// Two layouts for the scores, chosen per tile:
//  - rows layout (decode, few rows): S is [rows, ld_s]; Q·K^T is dot_tile (head_dim in lanes,
//    4-way horizontal sums), which reads each key once whatever the row count;
//  - lanes layout (prefill tiles, >= kLanesMinRows rows): queries are transposed once per tile
//    to [head_dim, padded_rows] and S is [keys, padded_rows], so Q·K^T is broadcast-FMA with
//    rows in lanes (no horizontal sums) and the softmax statistics are plain vector ops.
// P·V is the same kernel for both, reading P through (row, column) strides.

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

inline constexpr int32_t kLanesMinRows = 16;

// Streams the next page's K and V towards L2 a few lines at a time from inside the P·V loop,
// so decode keeps memory busy while it computes (a burst of prefetches at the page start
// stalls on the miss buffers instead).
struct PagePrefetch {
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t bytes = 0;  // of each of k and v
  int64_t next = 0;   // next byte offset to request
  int64_t lines_per_step = 1;

  void step() {
    for (int64_t i = 0; i < lines_per_step && next < bytes; ++i, next += 64) {
      simd::prefetch_l2(k + next, 1);
      simd::prefetch_l2(v + next, 1);
    }
  }
};

// Per-thread working set of one tile (all f32).
struct TileState {
  int32_t rows = 0;
  int32_t padded_rows = 0;  // rows rounded up to the vector width (lanes layout), else rows
  int32_t head_dim = 0;
  int32_t ld_s = 0;        // rows layout: page_tokens rounded up to the vector width
  bool lanes = false;      // lanes layout (see above)
  float* q = nullptr;      // rows: [rows, head_dim]; lanes: [head_dim, padded_rows] (scaled)
  float* s = nullptr;      // rows: [rows, ld_s]; lanes: [page_tokens, padded_rows]
  float* kf = nullptr;     // lanes, non-f32 pools: [page_tokens, head_dim] widened key page
  float* o = nullptr;      // [rows, head_dim] unnormalised output
  float* m = nullptr;      // [padded_rows] running max
  float* l = nullptr;      // [padded_rows] running sum
  float* alpha = nullptr;  // [padded_rows] rescale factor of the current page
  PagePrefetch* prefetch = nullptr;  // next page, stepped once per key of each P·V block

  int64_t p_row_stride() const { return lanes ? 1 : ld_s; }
  int64_t p_col_stride() const { return lanes ? padded_rows : 1; }
  float& score(int32_t r, int32_t j) const { return s[r * p_row_stride() + j * p_col_stride()]; }
};

// ---- scores, lanes layout ----

// S[j, :] = K[j] · Q^T for j < keys; kf is the key page in f32.
template <class S>
inline void lanes_scores(const TileState& t, const float* kf, int32_t keys) {
  lanes_tile<S>(t.q, t.padded_rows, t.padded_rows / S::kWidth, kf, t.head_dim, keys, t.head_dim,
                t.s, t.padded_rows);
}

// Online-softmax update, lanes layout: column-wise max / exp / sum over the page's keys.
template <class S>
inline void lanes_softmax(const TileState& t, int32_t keys) {
  using V = typename S::V;
  constexpr int32_t kW = S::kWidth;
  const int64_t ld = t.padded_rows;
  for (int32_t c = 0; c < t.padded_rows; c += kW) {
    V mx = S::set1(simd::kNegInf);
    for (int32_t j = 0; j < keys; ++j) mx = S::max(mx, S::load(t.s + j * ld + c));
    const V m_old = S::load(t.m + c);
    const V m_new = S::max(m_old, mx);
    const V m_safe = S::neg_inf_to_zero(m_new);  // rows with nothing visible yet: P = 0
    const V alpha = S::exp(S::sub(m_old, m_safe));
    V sum = S::zero();
    for (int32_t j = 0; j < keys; ++j) {
      const V e = S::exp(S::sub(S::load(t.s + j * ld + c), m_safe));
      S::store(t.s + j * ld + c, e);
      sum = S::add(sum, e);
    }
    S::store(t.alpha + c, alpha);
    S::store(t.l + c, S::fma(S::load(t.l + c), alpha, sum));
    S::store(t.m + c, m_new);
  }
}

// ---- softmax, rows layout ----

// Online-softmax update of every row from its masked scores (padding included, -inf);
// turns S into P in place.
template <class S>
inline void rows_softmax(const TileState& t) {
  using V = typename S::V;
  constexpr int32_t kW = S::kWidth;
  for (int32_t r = 0; r < t.rows; ++r) {
    float* row = t.s + static_cast<int64_t>(r) * t.ld_s;
    V mx = S::set1(simd::kNegInf);
    for (int32_t j = 0; j < t.ld_s; j += kW) mx = S::max(mx, S::load(row + j));
    const float m_new = std::max(t.m[r], S::reduce_max(mx));
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

// ---- O = O * alpha + P V ----

template <class S, DType kKv, int kRows, int kVecs>
inline void pv_block(const TileState& t, int32_t r0, int32_t keys, const void* v, int64_t v_row0,
                     int64_t e0) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  const int64_t d = t.head_dim, pr = t.p_row_stride(), pc = t.p_col_stride();
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    const V a = S::set1(t.alpha[r0 + r]);
    for (int c = 0; c < kVecs; ++c)
      acc[r][c] = S::mul(S::load(t.o + (r0 + r) * d + e0 + c * kW), a);
  }
  for (int32_t j = 0; j < keys; ++j) {
    if (t.prefetch) t.prefetch->step();
    V vv[kVecs];
    for (int c = 0; c < kVecs; ++c) {
      vv[c] = S::pinned(simd::load_as_f32<S, kKv>(v, (v_row0 + j) * d + e0 + c * kW));
    }
    for (int r = 0; r < kRows; ++r) {
      const V p = S::set1(t.s[(r0 + r) * pr + j * pc]);
      for (int c = 0; c < kVecs; ++c) acc[r][c] = S::fma(p, vv[c], acc[r][c]);
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

}  // namespace ls::kernels::cpu
