#pragma once
// Two-level page-selection cases shared by the CPU test (page_select_two_level_test.cpp) and the
// GPU test (tests/cuda/page_select_two_level_test.cpp): sequences of many groups with partial
// last groups and pages, a page without a block, a sequence within the budget, an empty one, one
// reusing its selection and one without a coarse row; summaries of four kinds (small integers
// with duplicated rows, continuous, planted top pages, flat), and the coarse rows as the summary
// update leaves them (order keys of the members' extremes).

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::test {

enum class Data { kIntegers, kContinuous, kPlanted, kFlat };

inline const char* data_name(Data k) {
  switch (k) {
    case Data::kIntegers:
      return "integers";
    case Data::kContinuous:
      return "continuous";
    case Data::kPlanted:
      return "planted";
    case Data::kFlat:
      return "flat";
  }
  return "?";
}

struct Case {
  int32_t d = 64, group = 1, num_kv = 2, pt = 16, lpt = 16, budget = 4, gp = 4;
  int32_t keep_first = 0;         // PageSelectParams::keep_first_page
  int32_t max_bounds_blocks = 0;  // PageSelectParams::max_bounds_blocks
  DType dtype = DType::kF32;      // the summaries'
  DType q_dtype = DType::kF32;    // the queries' (the summaries' type: the CUDA tensor-core bounds)
  std::vector<int32_t> kv_lens, q_lens, out_rows, coarse_rows, mode, slot;
  int32_t hpb = 2, stride = 0, num_blocks = 0, num_rows = 0, max_selected = 0, max_pages = 0;
  int32_t max_groups = 0, num_coarse_rows = 0;
  std::vector<int32_t> table, q_indptr;
  TypedArray q, kmin, kmax;
  std::vector<uint32_t> cmin, cmax;  // coarse rows as order keys (PageSummaries)

  int32_t lpp() const { return pt / lpt; }
  int32_t num_seqs() const { return static_cast<int32_t>(kv_lens.size()); }
};

// Coarse rows as the summary update leaves them: per (coarse row, slot, group), the min / max of
// the member logical pages that hold tokens and have a block.
inline void build_coarse(Case& c) {
  const int64_t n = int64_t{c.num_coarse_rows} * c.hpb * c.max_groups * c.d;
  c.cmin.assign(static_cast<size_t>(n), 0u);
  c.cmax.assign(static_cast<size_t>(n), 0u);
  for (int32_t s = 0; s < c.num_seqs(); ++s) {
    const int32_t crow = c.coarse_rows[s];
    if (crow < 0) continue;
    const int32_t logical = (c.kv_lens[s] + c.lpt - 1) / c.lpt;
    for (int32_t slot = 0; slot < c.hpb; ++slot) {
      for (int32_t g = 0; g * c.gp * c.lpp() < logical; ++g) {
        std::vector<float> lo(static_cast<size_t>(c.d), INFINITY), hi(lo.size(), -INFINITY);
        for (int32_t lp = g * c.gp * c.lpp(); lp < std::min(logical, (g + 1) * c.gp * c.lpp());
             ++lp) {
          const int32_t block = c.table[s * c.stride + lp / c.lpp()];
          if (block < 0) continue;
          const int64_t row = (int64_t{block} * c.hpb + slot) * c.lpp() + lp % c.lpp();
          for (int32_t e = 0; e < c.d; ++e) {
            lo[e] = std::min(lo[e], c.kmin.values[static_cast<size_t>(row * c.d + e)]);
            hi[e] = std::max(hi[e], c.kmax.values[static_cast<size_t>(row * c.d + e)]);
          }
        }
        const int64_t crow_off = ((int64_t{crow} * c.hpb + slot) * c.max_groups + g) * c.d;
        for (int32_t e = 0; e < c.d; ++e) {
          c.cmin[static_cast<size_t>(crow_off + e)] = coarse_key(lo[e] == INFINITY ? 0.0f : -lo[e]);
          c.cmax[static_cast<size_t>(crow_off + e)] = coarse_key(hi[e] == -INFINITY ? 0.0f : hi[e]);
        }
      }
    }
  }
}

inline Case make_case(std::mt19937& rng, int32_t d, int32_t group, int32_t pt, int32_t lpt,
                      int32_t budget, int32_t gp, DType dtype, Data kind,
                      DType q_dtype = DType::kF32) {
  Case c;
  c.q_dtype = q_dtype;
  c.d = d;
  c.group = group;
  c.pt = pt;
  c.lpt = lpt;
  c.budget = budget;
  c.gp = gp;
  c.dtype = dtype;
  c.mode = {static_cast<int32_t>(HeadMode::kSelected), static_cast<int32_t>(HeadMode::kStreaming),
            static_cast<int32_t>(HeadMode::kSelected)};
  c.num_kv = 3;
  c.slot = {1, 0, 0};
  // Long contexts (many groups, a partial last group and page), one within the budget, one empty,
  // one reusing its selection (row -1), one without a coarse row (refines everything).
  c.kv_lens = {97 * pt + lpt / 2 + 1, budget * pt, 41 * pt, 130 * pt - 3, 0, 60 * pt + 1, 33 * pt};
  c.q_lens = {1, 1, 3, 1, 0, 1, 1};
  c.out_rows = {4, 0, 2, 6, 1, -1, 5};
  c.coarse_rows = {3, 0, 5, 1, 2, 4, -1};
  c.num_rows = 7;
  c.num_coarse_rows = 6;
  c.q_indptr = {0};
  for (int32_t q : c.q_lens) c.q_indptr.push_back(c.q_indptr.back() + q);
  int32_t max_pages = 1;
  for (int32_t l : c.kv_lens) max_pages = std::max(max_pages, (l + pt - 1) / pt);
  c.stride = max_pages;
  c.max_groups = (max_pages + gp - 1) / gp;
  c.num_blocks = c.num_seqs() * max_pages;
  c.table.resize(static_cast<size_t>(c.num_blocks));
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  c.table[3 * c.stride + 17] = -1;  // a page without a block: its bounds are -inf
  c.max_selected = std::max(3, budget) + 2;
  c.max_pages = max_pages + 3;

  const int64_t q_n = int64_t{c.q_indptr.back()} * c.num_kv * group * d;
  const int64_t rows = int64_t{c.num_blocks} * c.hpb * c.lpp();
  c.q.resize(q_n, q_dtype);
  c.kmin.resize(rows * d, dtype);
  c.kmax.resize(rows * d, dtype);
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  const bool ints = kind == Data::kIntegers || kind == Data::kFlat;
  for (int64_t i = 0; i < q_n; ++i) c.q.set(i, ints ? static_cast<float>(small(rng)) : real(rng));
  // Planted: a few hot physical pages per sequence, spread over a few groups, whose keys are
  // large along every query's direction; all other keys small.
  std::vector<bool> hot(static_cast<size_t>(c.num_blocks), false);
  if (kind == Data::kPlanted) {
    for (int32_t s = 0; s < c.num_seqs(); ++s) {
      const int32_t pages = (c.kv_lens[s] + pt - 1) / pt;
      if (pages == 0) continue;
      std::uniform_int_distribution<int32_t> pick(0, pages - 1);
      const int32_t centre = pick(rng);
      for (int32_t j = 0; j < budget + 2; ++j) {
        const int32_t pg = std::clamp(centre + j - budget / 2, 0, pages - 1);
        const int32_t block = c.table[s * c.stride + pg];
        if (block >= 0) hot[static_cast<size_t>(block)] = true;
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t block = static_cast<int32_t>(r / (int64_t{c.hpb} * c.lpp()));
    for (int32_t e = 0; e < d; ++e) {
      const int64_t i = r * d + e;
      float a = 0.0f, b = 0.0f;
      switch (kind) {
        case Data::kIntegers:
          a = static_cast<float>(small(rng));
          b = static_cast<float>(small(rng));
          break;
        case Data::kContinuous:
          a = real(rng);
          b = real(rng);
          break;
        case Data::kPlanted: {
          const float scale = hot[static_cast<size_t>(block)] ? 2.0f : 0.1f;
          a = scale * real(rng);
          b = scale * real(rng);
          break;
        }
        case Data::kFlat:
          a = -1.0f;
          b = 1.0f;
          break;
      }
      if (a > b) std::swap(a, b);
      c.kmin.set(i, a);
      c.kmax.set(i, b);
    }
  }
  if (kind == Data::kIntegers) {  // duplicated rows: exact ties across pages and groups
    for (int64_t r = 1; r < rows; r += 3) {
      for (int32_t e = 0; e < d; ++e) {
        c.kmin.set(r * d + e, c.kmin.values[static_cast<size_t>((r - 1) * d + e)]);
        c.kmax.set(r * d + e, c.kmax.values[static_cast<size_t>((r - 1) * d + e)]);
      }
    }
  }
  build_coarse(c);
  return c;
}

struct Output {
  std::vector<int32_t> selected, num_selected, refined;
  std::vector<float> scores;
};

// Outputs of `c`'s shape filled with sentinels (-7, NaN scores).
inline Output sentinel_output(const Case& c) {
  Output out;
  out.selected.assign(static_cast<size_t>(c.num_rows) * c.num_kv * c.max_selected, -7);
  out.num_selected.assign(static_cast<size_t>(c.num_rows) * c.num_kv, -7);
  out.refined.assign(static_cast<size_t>(c.num_seqs()) * c.num_kv, -7);
  out.scores.assign(static_cast<size_t>(c.num_seqs()) * c.num_kv * c.max_pages, kNaN);
  return out;
}

// The selection params of `c` on host memory, writing into `out`; two_level adds the coarse rows.
inline PageSelectParams host_params(const Case& c, bool two_level, Output& out) {
  PageSelectParams p;
  p.q = c.q.data();
  p.q_dtype = c.q_dtype;
  p.num_seqs = c.num_seqs();
  p.q_indptr = c.q_indptr.data();
  p.num_q_heads = c.num_kv * c.group;
  p.num_kv_heads = c.num_kv;
  p.head_dim = c.d;
  p.kv_lens = c.kv_lens.data();
  p.head_mode = c.mode.data();
  p.head_slot = c.slot.data();
  p.page_tokens = c.pt;
  p.retrieval_blocks = c.table.data();
  p.retrieval_blocks_stride = c.stride;
  p.heads_per_block = c.hpb;
  p.summaries = PageSummaries{const_cast<void*>(c.kmin.data()), const_cast<void*>(c.kmax.data()),
                              c.dtype, c.lpt, c.lpp()};
  if (two_level) {
    p.summaries.coarse_kmin = const_cast<uint32_t*>(c.cmin.data());
    p.summaries.coarse_kmax = const_cast<uint32_t*>(c.cmax.data());
    p.summaries.group_pages = c.gp;
    p.summaries.max_groups = c.max_groups;
    p.summaries.num_rows = c.num_coarse_rows;
    p.summaries.rows = c.coarse_rows.data();
  }
  p.budget_pages = c.budget;
  p.max_bounds_blocks = c.max_bounds_blocks;
  p.keep_first_page = c.keep_first;
  p.out_rows = c.out_rows.data();
  p.selected = out.selected.data();
  p.num_selected = out.num_selected.data();
  p.max_selected = c.max_selected;
  p.page_scores = out.scores.data();
  p.max_pages = c.max_pages;
  p.refined_pages = out.refined.data();
  return p;
}

}  // namespace ls::kernels::test
