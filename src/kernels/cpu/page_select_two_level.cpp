// Two-level page selection (PageSummaries::group_pages > 0): score the coarse groups, refine
// (read the fine per-logical-page summaries of) only the groups that can still matter, and choose
// exactly the pages the one-level selection chooses.
//
// Notation for one (sequence, kv head): CB_h(g) the Quest bound of query head h on group g's
// coarse row, b_h(lp) on logical page lp's fine row; CB_h(g) >= b_h(lp) for every lp of g (the
// coarse row is the members' min / max as stored, and the bound code is monotone in the summary
// values).
// The one-level score of a physical page is max over its logical pages and heads of
// b_h(lp) - M_h, M_h = max over all logical pages of b_h. Three rounds, each refining a set of
// groups (all its logical pages' fine bounds computed exactly as one level does):
//  1. seed: for every head, the group with the largest CB_h (the first on ties);
//  2. maxima: m_h = max of the refined b_h; refine every group with CB_h(g) > m_h for some h.
//     Afterwards no unrefined group can hold a logical page above m_h, so m_h == M_h exactly;
//  3. rank: with the exact M_h, the scores of refined pages are the one-level scores. T = the
//     (k - 1)-th best refined candidate (all pages but the last; -inf when fewer are refined);
//     refine every group with U(g) = max_h (CB_h(g) - M_h) >= T. Afterwards every unrefined page
//     scores <= U(g) < T, strictly below k - 1 refined candidates, so it cannot be chosen (nor
//     tie: ties go to the lower page, but a strict inequality leaves no tie to break), and T never
//     falls as pages are added, so one round suffices.
// Unrefined pages then score -inf and the one-level top-K runs on the page scores unchanged.
// Non-finite bounds (NaN or inf - inf) count as "must refine", so the result equals one level
// for every input; pruning only happens when the coarse level proves it safe. A sequence whose
// coarse row is missing (rows[s] out of range, or more groups than max_groups) refines every
// group (one level).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/page_select_common.h"

namespace ls::kernels::cpu::detail {

namespace {

constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Per item: its coarse bounds [padded_heads, num_groups] and which groups are refined.
struct GroupState {
  int32_t num_groups = 0;
  bool coarse_ok = false;
  std::vector<float> coarse;     // [padded_heads, num_groups] CB_h(g)
  std::vector<uint8_t> refined;  // [num_groups]
  std::vector<int32_t> pending;  // groups to refine in the current round
};

// m_h over the refined logical pages of the item (NaN ignored, as one level's max).
void refined_maxima(const SelectItem& it, const GroupState& st, int32_t group_lp, int32_t group,
                    const float* bounds, std::vector<float>& m) {
  m.assign(static_cast<size_t>(group), kNegInf);
  for (int32_t gi = 0; gi < st.num_groups; ++gi) {
    if (!st.refined[static_cast<size_t>(gi)]) continue;
    const int32_t lp_end = std::min(it.num_logical, (gi + 1) * group_lp);
    for (int32_t h = 0; h < group; ++h) {
      const float* b = bounds + h * int64_t{it.num_logical};
      float& mh = m[static_cast<size_t>(h)];
      for (int32_t lp = gi * group_lp; lp < lp_end; ++lp) mh = std::max(mh, b[lp]);
    }
  }
}

// One-level page scores of the refined pages (max over logical pages and heads of b - M, NaN
// -inf); pages of unrefined groups -inf.
void refined_page_scores(const PageSelectParams& p, const SelectItem& it, const GroupState& st,
                         int32_t group, const float* bounds, const std::vector<float>& m,
                         std::vector<float>& page_score) {
  const int32_t lpp = p.summaries.logical_per_page;
  const int32_t gp = p.summaries.group_pages;
  page_score.assign(static_cast<size_t>(it.num_pages), kNegInf);
  for (int32_t gi = 0; gi < st.num_groups; ++gi) {
    if (!st.refined[static_cast<size_t>(gi)]) continue;
    const int32_t lp_end = std::min(it.num_logical, (gi + 1) * gp * lpp);
    for (int32_t h = 0; h < group; ++h) {
      const float* b = bounds + h * int64_t{it.num_logical};
      const float best = m[static_cast<size_t>(h)];
      for (int32_t lp = gi * gp * lpp; lp < lp_end; ++lp) {
        float score = b[lp] - best;
        if (score != score) score = kNegInf;  // NaN ranks last
        float& ps = page_score[static_cast<size_t>(lp / lpp)];
        ps = std::max(ps, score);
      }
    }
  }
}

}  // namespace

void select_two_level(const PageSelectParams& p, const std::vector<SelectItem>& items,
                      const std::vector<float>& q_scratch, std::vector<float>& bounds,
                      int32_t group, int32_t padded_heads, ThreadPool& pool, Isa isa) {
  const PageSummaries& sm = p.summaries;
  const int32_t gp = sm.group_pages;
  const int32_t group_lp = gp * sm.logical_per_page;
  const int64_t d = p.head_dim;
  const int64_t n_items = static_cast<int64_t>(items.size());
  std::vector<GroupState> states(items.size());

  // Coarse bounds of every group (all groups fully refined where the coarse row is missing).
  simd::dispatch_isa(isa, [&]<class S>() {
    pool.parallel_for(n_items, 1, [&](int64_t i0, int64_t i1) {
      std::vector<float> lo(static_cast<size_t>(d)), hi(static_cast<size_t>(d));
      for (int64_t i = i0; i < i1; ++i) {
        const SelectItem& it = items[static_cast<size_t>(i)];
        GroupState& st = states[static_cast<size_t>(i)];
        st.num_groups = (it.num_pages + gp - 1) / gp;
        st.refined.assign(static_cast<size_t>(st.num_groups), 0);
        st.pending.clear();
        const int32_t crow = sm.rows[it.seq];
        st.coarse_ok = crow >= 0 && crow < sm.num_rows && st.num_groups <= sm.max_groups;
        if (!st.coarse_ok || it.num_pages <= p.budget_pages) {
          // No coarse row: refine everything. Within the budget every page is chosen anyway.
          if (!st.coarse_ok) {
            for (int32_t g = 0; g < st.num_groups; ++g) st.pending.push_back(g);
          }
          continue;
        }
        st.coarse.resize(static_cast<size_t>(padded_heads) * st.num_groups);
        const int32_t slot = p.head_slot[it.kv_head];
        for (int32_t g = 0; g < st.num_groups; ++g) {
          // The coarse row's keys back to floats (exactly the members' stored extremes).
          const int64_t row =
              ((static_cast<int64_t>(crow) * p.heads_per_block + slot) * sm.max_groups + g) * d;
          const auto* cmax = static_cast<const uint32_t*>(sm.coarse_kmax) + row;
          const auto* cmin = static_cast<const uint32_t*>(sm.coarse_kmin) + row;
          for (int64_t e = 0; e < d; ++e) {
            hi[static_cast<size_t>(e)] = coarse_value(cmax[e]);
            lo[static_cast<size_t>(e)] = -coarse_value(cmin[e]);
          }
          row_bounds<S, DType::kF32>(hi.data(), lo.data(), 0, d, q_scratch.data() + it.q_offset,
                                     padded_heads, st.coarse.data() + g, st.num_groups);
        }
        // Round 1 (seed): each head's best group.
        for (int32_t h = 0; h < group; ++h) {
          const float* cb = st.coarse.data() + h * int64_t{st.num_groups};
          int32_t arg = -1;
          for (int32_t g = 0; g < st.num_groups; ++g) {
            if (cb[g] == cb[g] && (arg < 0 || cb[g] > cb[arg])) arg = g;
          }
          if (arg >= 0 &&
              std::find(st.pending.begin(), st.pending.end(), arg) == st.pending.end()) {
            st.pending.push_back(arg);
          }
        }
      }
    });
  });

  // Computes the fine bounds of every pending group and marks it refined.
  std::vector<std::pair<int32_t, int32_t>> units;  // (item, group)
  const auto refine_pending = [&]() {
    units.clear();
    for (int32_t i = 0; i < static_cast<int32_t>(n_items); ++i) {
      GroupState& st = states[static_cast<size_t>(i)];
      for (int32_t g : st.pending) {
        if (!st.refined[static_cast<size_t>(g)]) units.emplace_back(i, g);
        st.refined[static_cast<size_t>(g)] = 1;
      }
      st.pending.clear();
    }
    simd::dispatch_isa(isa, [&]<class S>() {
      simd::dispatch_float_dtype(sm.dtype, [&]<DType kDt>() {
        pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int64_t u0, int64_t u1) {
          for (int64_t u = u0; u < u1; ++u) {
            const auto [i, g] = units[static_cast<size_t>(u)];
            const SelectItem& it = items[static_cast<size_t>(i)];
            score_logical_pages<S, kDt>(p, it, q_scratch.data() + it.q_offset, padded_heads, g * gp,
                                        std::min(it.num_pages, (g + 1) * gp),
                                        bounds.data() + it.bounds_offset);
          }
        });
      });
    });
  };
  refine_pending();

  // Round 2 (maxima): groups whose coarse bound exceeds a head's refined maximum.
  pool.parallel_for(n_items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> m;
    for (int64_t i = i0; i < i1; ++i) {
      const SelectItem& it = items[static_cast<size_t>(i)];
      GroupState& st = states[static_cast<size_t>(i)];
      if (!st.coarse_ok || it.num_pages <= p.budget_pages) continue;
      refined_maxima(it, st, group_lp, group, bounds.data() + it.bounds_offset, m);
      for (int32_t g = 0; g < st.num_groups; ++g) {
        if (st.refined[static_cast<size_t>(g)]) continue;
        for (int32_t h = 0; h < group; ++h) {
          if (!(st.coarse[static_cast<size_t>(h * int64_t{st.num_groups} + g)] <=
                m[static_cast<size_t>(h)])) {
            st.pending.push_back(g);
            break;
          }
        }
      }
    }
  });
  refine_pending();

  // Round 3 (rank): groups whose bound reaches the (k - 1)-th best refined candidate.
  pool.parallel_for(n_items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> m, page_score, cand;
    for (int64_t i = i0; i < i1; ++i) {
      const SelectItem& it = items[static_cast<size_t>(i)];
      GroupState& st = states[static_cast<size_t>(i)];
      if (!st.coarse_ok || it.num_pages <= p.budget_pages) continue;
      refined_maxima(it, st, group_lp, group, bounds.data() + it.bounds_offset, m);
      refined_page_scores(p, it, st, group, bounds.data() + it.bounds_offset, m, page_score);
      int32_t k = std::min(std::max(3, p.budget_pages), it.num_pages);
      k = std::min(k, p.max_selected);
      const int32_t take = std::max(0, std::min(k - 1, it.num_pages - 1));
      cand.clear();
      for (int32_t pg = 0; pg + 1 < it.num_pages; ++pg) {
        if (st.refined[static_cast<size_t>(pg / gp)] || (pg == 0 && p.keep_first_page != 0))
          cand.push_back(ranking_score(p, page_score, pg));
      }
      float threshold = kNegInf;
      if (take > 0 && static_cast<int32_t>(cand.size()) >= take) {
        std::nth_element(cand.begin(), cand.begin() + (take - 1), cand.end(),
                         [](float a, float b) { return a > b; });
        threshold = cand[static_cast<size_t>(take - 1)];
      }
      if (take == 0) threshold = kPosInf;  // only the last page is chosen: prune every group
      for (int32_t g = 0; g < st.num_groups; ++g) {
        if (st.refined[static_cast<size_t>(g)]) continue;
        float u = kNegInf;
        bool nan = false;
        for (int32_t h = 0; h < group; ++h) {
          const float diff = st.coarse[static_cast<size_t>(h * int64_t{st.num_groups} + g)] -
                             m[static_cast<size_t>(h)];
          if (diff != diff) nan = true;
          u = std::max(u, diff);
        }
        if (nan || !(u < threshold)) st.pending.push_back(g);
      }
    }
  });
  refine_pending();

  // Choose from the refined pages' scores.
  pool.parallel_for(n_items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> m, page_score;
    std::vector<int32_t> order;
    for (int64_t i = i0; i < i1; ++i) {
      const SelectItem& it = items[static_cast<size_t>(i)];
      const GroupState& st = states[static_cast<size_t>(i)];
      refined_maxima(it, st, group_lp, group, bounds.data() + it.bounds_offset, m);
      refined_page_scores(p, it, st, group, bounds.data() + it.bounds_offset, m, page_score);
      write_page_scores(p, it, page_score);
      choose_from_scores(p, it, page_score, order);
      if (p.refined_pages) {
        int32_t n = 0;
        for (int32_t g = 0; g < st.num_groups; ++g) {
          if (st.refined[static_cast<size_t>(g)])
            n += std::min(it.num_pages, (g + 1) * gp) - g * gp;
        }
        p.refined_pages[static_cast<int64_t>(it.seq) * p.num_kv_heads + it.kv_head] = n;
      }
    }
  });
}

}  // namespace ls::kernels::cpu::detail
