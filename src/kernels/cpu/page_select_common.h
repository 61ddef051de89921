#pragma once
// Internal to kernels/cpu's page selection (page_select.cpp: one level; page_select_two_level.cpp:
// coarse groups, then the refined pages): the Quest bound of one summary row for a padded group of
// query heads, and the top-K choice from physical-page scores with the tie rule. Both levels use
// the same bound code, so a coarse row's bound dominates its members' bounds in floating point too
// (products, maxima and sums in the same order are monotone in the summary values).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu::detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One (sequence, kv head) to score.
struct SelectItem {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t row = 0;            // output row
  int32_t num_pages = 0;      // physical pages holding tokens
  int32_t num_logical = 0;    // logical pages holding tokens
  int64_t bounds_offset = 0;  // into the bounds scratch: [padded_heads, num_logical] f32
  int64_t q_offset = 0;       // into the query scratch: [padded_heads, head_dim] f32
};

// out[h * out_stride] = sum_d max(q_h[d] * kmax[row + d], q_h[d] * kmin[row + d]) for the
// padded_heads (a multiple of four; the query scratch is zero-padded) heads of `q`
// ([padded_heads, d] f32). `row` is an element offset into both summary arrays.
template <class S, DType kDt>
inline void row_bounds(const void* kmax, const void* kmin, int64_t row, int64_t d, const float* q,
                       int32_t padded_heads, float* out, int64_t out_stride) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  for (int32_t h0 = 0; h0 < padded_heads; h0 += 4) {
    V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
    int64_t e = 0;
    for (; e + kW <= d; e += kW) {
      const V kx = simd::load_as_f32<S, kDt>(kmax, row + e);
      const V kn = simd::load_as_f32<S, kDt>(kmin, row + e);
      for (int j = 0; j < 4; ++j) {
        const V qv = S::load(q + (h0 + j) * d + e);
        acc[j] = S::add(acc[j], S::max(S::mul(qv, kx), S::mul(qv, kn)));
      }
    }
    float sums[4];
    S::reduce_add4(acc[0], acc[1], acc[2], acc[3], sums);
    for (int j = 0; j < 4; ++j) {
      for (int64_t t = e; t < d; ++t) {  // head_dim tail
        const float qv = q[(h0 + j) * d + t];
        sums[j] += std::max(qv * simd::load_as_f32<simd::Scalar, kDt>(kmax, row + t),
                            qv * simd::load_as_f32<simd::Scalar, kDt>(kmin, row + t));
      }
      out[(h0 + j) * out_stride] = sums[j];
    }
  }
}

inline constexpr int32_t kPrefetchPages = 8;  // how far ahead summaries are requested

// Fine bounds of the logical pages of physical pages [page_begin, page_end) of the item:
// bounds[h][lp] = sum_d max(q_h[d] * kmax[lp][d], q_h[d] * kmin[lp][d]) for four heads at a
// time (the query scratch is padded to a multiple of four heads with zeros).
template <class S, DType kDt>
inline void score_logical_pages(const PageSelectParams& p, const SelectItem& it, const float* q,
                                int32_t padded_heads, int32_t page_begin, int32_t page_end,
                                float* bounds) {
  const int64_t d = p.head_dim;
  const int32_t lpp = p.summaries.logical_per_page;
  const int32_t slot = p.head_slot[it.kv_head];
  for (int32_t page = page_begin; page < page_end; ++page) {
    const int32_t block =
        p.retrieval_blocks[static_cast<int64_t>(it.seq) * p.retrieval_blocks_stride + page];
    const int32_t lp_end = std::min(it.num_logical, (page + 1) * lpp);
    if (page + kPrefetchPages < page_end) {  // summaries of a page ahead (pages are scattered)
      const int32_t ahead =
          p.retrieval_blocks[static_cast<int64_t>(it.seq) * p.retrieval_blocks_stride + page +
                             kPrefetchPages];
      if (ahead >= 0) {
        const int64_t row = (static_cast<int64_t>(ahead) * p.heads_per_block + slot) * lpp * d;
        const int64_t bytes = dtype_nbytes(kDt, lpp * d);
        simd::prefetch_l2(static_cast<const char*>(p.summaries.kmax) + dtype_nbytes(kDt, row),
                          bytes);
        simd::prefetch_l2(static_cast<const char*>(p.summaries.kmin) + dtype_nbytes(kDt, row),
                          bytes);
      }
    }
    for (int32_t lp = page * lpp; lp < lp_end; ++lp) {
      if (block < 0) {
        for (int32_t h = 0; h < padded_heads; ++h)
          bounds[h * int64_t{it.num_logical} + lp] = kNegInf;
        continue;
      }
      const int64_t row =
          ((static_cast<int64_t>(block) * p.heads_per_block + slot) * lpp + lp % lpp) * d;
      row_bounds<S, kDt>(p.summaries.kmax, p.summaries.kmin, row, d, q, padded_heads, bounds + lp,
                         it.num_logical);
    }
  }
}

// The score page `page` ranks with: +inf for page 0 when the selection keeps it (it then counts
// as one of the top (k - 1) candidates, so the other k - 2 come from the scores).
inline float ranking_score(const PageSelectParams& p, const std::vector<float>& page_score,
                           int32_t page) {
  if (p.keep_first_page != 0 && page == 0) return std::numeric_limits<float>::infinity();
  return page_score[static_cast<size_t>(page)];
}

// Writes the item's selection from its physical-page scores ([num_pages], NaN already -inf):
// every page when num_pages <= budget_pages, else the top (k - 1) pages among all but the last
// (ranked by ranking_score; ties: the lower page) plus the last, ascending; the rest of the
// row -1.
inline void choose_from_scores(const PageSelectParams& p, const SelectItem& it,
                               const std::vector<float>& page_score, std::vector<int32_t>& order) {
  int32_t* sel =
      p.selected + (static_cast<int64_t>(it.row) * p.num_kv_heads + it.kv_head) * p.max_selected;
  int32_t count = 0;
  if (it.num_pages <= p.budget_pages) {
    count = std::min(it.num_pages, p.max_selected);
    for (int32_t i = 0; i < count; ++i) sel[i] = i;
  } else {
    int32_t k = std::min(std::max(3, p.budget_pages), it.num_pages);
    k = std::min(k, p.max_selected);
    const int32_t candidates = it.num_pages - 1;
    const int32_t take = std::max(0, std::min(k - 1, candidates));
    order.resize(static_cast<size_t>(candidates));
    for (int32_t i = 0; i < candidates; ++i) order[static_cast<size_t>(i)] = i;
    const auto better = [&](int32_t a, int32_t b) {
      const float sa = ranking_score(p, page_score, a), sb = ranking_score(p, page_score, b);
      return sa > sb || (sa == sb && a < b);
    };
    if (take < candidates)
      std::nth_element(order.begin(), order.begin() + take, order.end(), better);
    std::sort(order.begin(), order.begin() + take);
    for (int32_t i = 0; i < take; ++i) sel[i] = order[static_cast<size_t>(i)];
    count = take;
    if (k >= 1) sel[count++] = it.num_pages - 1;
  }
  for (int32_t i = count; i < p.max_selected; ++i) sel[i] = -1;
  p.num_selected[static_cast<int64_t>(it.row) * p.num_kv_heads + it.kv_head] = count;
}

// Copies the item's page scores to p.page_scores (when asked), -inf past num_pages.
inline void write_page_scores(const PageSelectParams& p, const SelectItem& it,
                              const std::vector<float>& page_score) {
  if (!p.page_scores) return;
  float* out =
      p.page_scores + (static_cast<int64_t>(it.seq) * p.num_kv_heads + it.kv_head) * p.max_pages;
  for (int32_t i = 0; i < p.max_pages; ++i) {
    out[i] = i < it.num_pages ? page_score[static_cast<size_t>(i)] : kNegInf;
  }
}

// Two-level selection (page_select_two_level.cpp) of the planned items: q_scratch holds their
// padded queries, bounds is sized for every logical page of every item (only refined entries are
// written). Writes the same outputs as the one-level path.
void select_two_level(const PageSelectParams& p, const std::vector<SelectItem>& items,
                      const std::vector<float>& q_scratch, std::vector<float>& bounds,
                      int32_t group, int32_t padded_heads, ThreadPool& pool, Isa isa);

}  // namespace ls::kernels::cpu::detail
