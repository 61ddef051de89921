#include "kernels/cpu/page_select.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int32_t kPagesPerUnit = 64;  // physical pages scored per parallel work unit
constexpr int32_t kPrefetchPages = 8;  // how far ahead summaries are requested (~1 us of work)

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

// bounds[h][lp] = sum_d max(q_h[d] * kmax[lp][d], q_h[d] * kmin[lp][d]) for four heads at a
// time (the query scratch is padded to a multiple of four heads with zeros).
template <class S, DType kDt>
void score_logical_pages(const PageSelectParams& p, const SelectItem& it, const float* q,
                         int32_t padded_heads, int32_t page_begin, int32_t page_end,
                         float* bounds) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
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
      for (int32_t h0 = 0; h0 < padded_heads; h0 += 4) {
        V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
        int64_t e = 0;
        for (; e + kW <= d; e += kW) {
          const V kx = simd::load_as_f32<S, kDt>(p.summaries.kmax, row + e);
          const V kn = simd::load_as_f32<S, kDt>(p.summaries.kmin, row + e);
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
            sums[j] +=
                std::max(qv * simd::load_as_f32<simd::Scalar, kDt>(p.summaries.kmax, row + t),
                         qv * simd::load_as_f32<simd::Scalar, kDt>(p.summaries.kmin, row + t));
          }
          bounds[(h0 + j) * int64_t{it.num_logical} + lp] = sums[j];
        }
      }
    }
  }
}

// Group scores, physical-page max, top-K with the tie rule; writes the item's outputs.
void choose_pages(const PageSelectParams& p, const SelectItem& it, int32_t group,
                  const float* bounds, std::vector<float>& page_score,
                  std::vector<int32_t>& order) {
  const int32_t n_lp = it.num_logical;
  const int32_t lpp = p.summaries.logical_per_page;
  page_score.assign(static_cast<size_t>(it.num_pages), kNegInf);
  for (int32_t h = 0; h < group; ++h) {
    const float* b = bounds + h * int64_t{n_lp};
    float best = kNegInf;
    for (int32_t lp = 0; lp < n_lp; ++lp) best = std::max(best, b[lp]);
    for (int32_t lp = 0; lp < n_lp; ++lp) {
      float score = b[lp] - best;
      if (score != score) score = kNegInf;  // NaN ranks last
      float& ps = page_score[static_cast<size_t>(lp / lpp)];
      ps = std::max(ps, score);
    }
  }
  if (p.page_scores) {
    float* out =
        p.page_scores + (static_cast<int64_t>(it.seq) * p.num_kv_heads + it.kv_head) * p.max_pages;
    for (int32_t i = 0; i < p.max_pages; ++i) {
      out[i] = i < it.num_pages ? page_score[static_cast<size_t>(i)] : kNegInf;
    }
  }

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
      const float sa = page_score[static_cast<size_t>(a)], sb = page_score[static_cast<size_t>(b)];
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

void clear_head(const PageSelectParams& p, int32_t seq, int32_t row, int32_t g) {
  int32_t* sel = p.selected + (static_cast<int64_t>(row) * p.num_kv_heads + g) * p.max_selected;
  for (int32_t i = 0; i < p.max_selected; ++i) sel[i] = -1;
  p.num_selected[static_cast<int64_t>(row) * p.num_kv_heads + g] = 0;
  if (p.page_scores) {
    float* out = p.page_scores + (static_cast<int64_t>(seq) * p.num_kv_heads + g) * p.max_pages;
    for (int32_t i = 0; i < p.max_pages; ++i) out[i] = kNegInf;
  }
}

// Kept across calls so decode steps do not reallocate.
struct SelectScratch {
  std::vector<SelectItem> items;
  std::vector<float> q;       // [items, padded_heads, head_dim] f32
  std::vector<float> bounds;  // [items, padded_heads, num_logical] f32
};

SelectScratch& caller_scratch() {
  thread_local SelectScratch scratch;
  return scratch;
}

}  // namespace

void page_select(const PageSelectParams& p, ThreadPool& pool, Isa isa) {
  if (p.num_seqs <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.max_selected < 0) return;
  if (p.num_q_heads % p.num_kv_heads != 0 || !p.selected || !p.num_selected || !p.out_rows) return;
  const PageSummaries& sm = p.summaries;
  const bool geometry_ok = p.page_tokens > 0 && sm.logical_per_page > 0 &&
                           sm.logical_page_tokens * sm.logical_per_page == p.page_tokens &&
                           sm.kmin && sm.kmax && simd::is_float_dtype(sm.dtype) &&
                           simd::is_float_dtype(p.q_dtype);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t padded_heads = (group + 3) / 4 * 4;
  const int64_t d = p.head_dim;

  // Plan: items, scratch offsets, work units.
  // Caller-thread scratch shared with the workers through these references.
  SelectScratch& scratch = caller_scratch();
  std::vector<SelectItem>& items = scratch.items;
  std::vector<float>& q_scratch = scratch.q;
  std::vector<float>& bounds = scratch.bounds;
  items.clear();
  int64_t q_total = 0, bounds_total = 0;
  for (int32_t s = 0; s < p.num_seqs; ++s) {
    const int32_t row = p.out_rows[s];
    if (row < 0) continue;
    const int32_t kv_len = p.kv_lens[s];
    const int32_t num_pages =
        kv_len > 0 && p.page_tokens > 0 ? (kv_len - 1) / p.page_tokens + 1 : 0;
    for (int32_t g = 0; g < p.num_kv_heads; ++g) {
      const bool selected = p.head_mode[g] == static_cast<int32_t>(HeadMode::kSelected);
      const int32_t slot = p.head_slot[g];
      if (!selected || !geometry_ok || num_pages == 0 || num_pages > p.retrieval_blocks_stride ||
          slot < 0 || slot >= p.heads_per_block || p.q_indptr[s + 1] <= p.q_indptr[s]) {
        clear_head(p, s, row, g);
        continue;
      }
      SelectItem it;
      it.seq = s;
      it.kv_head = g;
      it.row = row;
      it.num_pages = num_pages;
      it.num_logical = (kv_len - 1) / sm.logical_page_tokens + 1;
      it.q_offset = q_total;
      it.bounds_offset = bounds_total;
      q_total += padded_heads * d;
      bounds_total += padded_heads * int64_t{it.num_logical};
      items.push_back(it);
    }
  }
  if (items.empty()) return;
  q_scratch.assign(static_cast<size_t>(q_total), 0.0f);
  bounds.resize(static_cast<size_t>(bounds_total));
  const int64_t q_row_bytes = dtype_nbytes(p.q_dtype, d);
  for (const SelectItem& it : items) {
    const int64_t token = p.q_indptr[it.seq + 1] - 1;
    const auto* src =
        static_cast<const char*>(p.q) +
        (token * p.num_q_heads + static_cast<int64_t>(it.kv_head) * group) * q_row_bytes;
    convert_to_f32(p.q_dtype, src, q_scratch.data() + it.q_offset, group * d);
  }

  // Phase 1: bounds of every logical page, in units of kPagesPerUnit physical pages.
  std::vector<std::pair<int32_t, int32_t>> units;  // (item, first page)
  for (int32_t i = 0; i < static_cast<int32_t>(items.size()); ++i) {
    for (int32_t pg = 0; pg < items[static_cast<size_t>(i)].num_pages; pg += kPagesPerUnit)
      units.emplace_back(i, pg);
  }
  simd::dispatch_isa(isa, [&]<class S>() {
    simd::dispatch_float_dtype(sm.dtype, [&]<DType kDt>() {
      pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          const SelectItem& it = items[static_cast<size_t>(units[static_cast<size_t>(u)].first)];
          const int32_t pg = units[static_cast<size_t>(u)].second;
          score_logical_pages<S, kDt>(p, it, q_scratch.data() + it.q_offset, padded_heads, pg,
                                      std::min(it.num_pages, pg + kPagesPerUnit),
                                      bounds.data() + it.bounds_offset);
        }
      });
    });
  });

  // Phase 2: per item, combine and choose.
  pool.parallel_for(static_cast<int64_t>(items.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> page_score;
    std::vector<int32_t> order;
    for (int64_t i = i0; i < i1; ++i) {
      const SelectItem& it = items[static_cast<size_t>(i)];
      choose_pages(p, it, group, bounds.data() + it.bounds_offset, page_score, order);
    }
  });
}

void page_select(const PageSelectParams& p, ThreadPool& pool) {
  page_select(p, pool, best_isa());
}

}  // namespace ls::kernels::cpu
