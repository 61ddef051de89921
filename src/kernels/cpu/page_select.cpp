#include "kernels/cpu/page_select.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/page_select_common.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

using detail::choose_from_scores;
using detail::kNegInf;
using detail::score_logical_pages;
using detail::SelectItem;
using detail::write_page_scores;

constexpr int32_t kPagesPerUnit = 64;  // physical pages scored per parallel work unit

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
  write_page_scores(p, it, page_score);
  choose_from_scores(p, it, page_score, order);
}

void clear_head(const PageSelectParams& p, int32_t seq, int32_t row, int32_t g) {
  int32_t* sel = p.selected + (static_cast<int64_t>(row) * p.num_kv_heads + g) * p.max_selected;
  for (int32_t i = 0; i < p.max_selected; ++i) sel[i] = -1;
  p.num_selected[static_cast<int64_t>(row) * p.num_kv_heads + g] = 0;
  if (p.refined_pages) p.refined_pages[static_cast<int64_t>(seq) * p.num_kv_heads + g] = 0;
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

  if (sm.two_level()) {
    detail::select_two_level(p, items, q_scratch, bounds, group, padded_heads, pool, isa);
    return;
  }
  if (p.refined_pages) {
    for (const SelectItem& it : items)
      p.refined_pages[static_cast<int64_t>(it.seq) * p.num_kv_heads + it.kv_head] = it.num_pages;
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
