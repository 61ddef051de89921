// page_select against a brute-force oracle: every Quest bound computed naively in double, the
// group / physical-page reductions written out literally, candidates sorted with the tie rule.
// Small-integer data make every bound exact in fp32, so the comparison is exact and ties are
// frequent; a continuous-data test checks the chosen set is optimal up to rounding.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/page_select.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

struct SelectCase {
  int32_t d = 64, group = 1, num_kv = 2, pt = 16, lpt = 16, budget = 4;
  int32_t keep_first = 0;  // PageSelectParams::keep_first_page
  DType sum_dtype = DType::kF32, q_dtype = DType::kF32;
  std::vector<int32_t> kv_lens, q_lens, out_rows, mode, slot;
  int32_t hpb = 0, stride = 0, num_blocks = 0, num_rows = 0, max_selected = 0, max_pages = 0;
  std::vector<int32_t> table, q_indptr;
  TypedArray q, kmin, kmax;  // q: [tokens, heads, d]; summaries [head_pages, lpp, d]

  int32_t lpp() const { return pt / lpt; }
};

SelectCase make_case(std::mt19937& rng, int32_t d, int32_t group, int32_t pt, int32_t lpt,
                     int32_t budget, DType sum_dtype, bool integers) {
  SelectCase c;
  c.d = d;
  c.group = group;
  c.pt = pt;
  c.lpt = lpt;
  c.budget = budget;
  c.sum_dtype = sum_dtype;
  c.num_kv = 3;
  c.mode = {static_cast<int32_t>(HeadMode::kSelected), static_cast<int32_t>(HeadMode::kStreaming),
            static_cast<int32_t>(HeadMode::kSelected)};
  c.slot = {1, 0, 0};
  c.hpb = 2;
  // Lengths around the budget, partial pages and partial logical pages, one empty context.
  c.kv_lens = {1, budget * pt, budget * pt + 1, 7 * pt + lpt / 2 + 1, 23 * pt - 3, 0};
  c.q_lens = {1, 1, 5, 1, 1, 0};
  c.out_rows = {4, 0, 2, -1, 5, 1};  // sequence 3 reuses its selection: untouched
  const int32_t num_seqs = static_cast<int32_t>(c.kv_lens.size());
  c.num_rows = 6;
  c.q_indptr = {0};
  for (int32_t q : c.q_lens) c.q_indptr.push_back(c.q_indptr.back() + q);
  int32_t max_pages = 1;
  for (int32_t l : c.kv_lens) max_pages = std::max(max_pages, (l + pt - 1) / pt);
  c.stride = max_pages;
  c.num_blocks = num_seqs * max_pages;
  c.table.resize(static_cast<size_t>(c.num_blocks));
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  c.max_selected = std::max(3, budget) + 2;
  c.max_pages = max_pages + 3;

  const int64_t q_n = int64_t{c.q_indptr.back()} * c.num_kv * group * d;
  const int64_t s_n = int64_t{c.num_blocks} * c.hpb * c.lpp() * d;
  c.q.resize(q_n, c.q_dtype);
  c.kmin.resize(s_n, sum_dtype);
  c.kmax.resize(s_n, sum_dtype);
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  for (int64_t i = 0; i < q_n; ++i)
    c.q.set(i, integers ? static_cast<float>(small(rng)) : real(rng));
  for (int64_t i = 0; i < s_n; ++i) {
    float a = integers ? static_cast<float>(small(rng)) : real(rng);
    float b = integers ? static_cast<float>(small(rng)) : real(rng);
    if (a > b) std::swap(a, b);
    c.kmin.set(i, a);
    c.kmax.set(i, b);
  }
  if (integers) {  // duplicate some logical pages' summaries verbatim: exact ties across pages
    for (int64_t row = 1; row < int64_t{c.num_blocks} * c.hpb * c.lpp(); row += 3) {
      for (int32_t e = 0; e < d; ++e) {
        c.kmin.set(row * d + e, c.kmin.values[static_cast<size_t>((row - 1) * d + e)]);
        c.kmax.set(row * d + e, c.kmax.values[static_cast<size_t>((row - 1) * d + e)]);
      }
    }
  }
  return c;
}

struct Oracle {
  std::vector<int32_t> selected;
  std::vector<double> page_scores;
};

Oracle oracle(const SelectCase& c, int32_t s, int32_t g) {
  Oracle o;
  const int32_t len = c.kv_lens[s];
  const int32_t pages = (len + c.pt - 1) / c.pt, logical = (len + c.lpt - 1) / c.lpt;
  const int64_t token = c.q_indptr[s + 1] - 1;
  std::vector<std::vector<double>> bound(static_cast<size_t>(c.group),
                                         std::vector<double>(static_cast<size_t>(logical)));
  for (int32_t h = 0; h < c.group; ++h) {
    const int32_t hq = g * c.group + h;
    for (int32_t lp = 0; lp < logical; ++lp) {
      const int32_t block = c.table[s * c.stride + lp / c.lpp()];
      const int64_t row = (int64_t{block} * c.hpb + c.slot[g]) * c.lpp() + lp % c.lpp();
      double b = 0;
      for (int32_t e = 0; e < c.d; ++e) {
        const double qv =
            c.q.values[static_cast<size_t>((token * c.num_kv * c.group + hq) * c.d + e)];
        b += std::max(qv * c.kmax.values[static_cast<size_t>(row * c.d + e)],
                      qv * c.kmin.values[static_cast<size_t>(row * c.d + e)]);
      }
      bound[h][lp] = b;
    }
  }
  o.page_scores.assign(static_cast<size_t>(pages), -INFINITY);
  for (int32_t h = 0; h < c.group; ++h) {
    const double best = *std::max_element(bound[h].begin(), bound[h].end());
    for (int32_t lp = 0; lp < logical; ++lp) {
      o.page_scores[lp / c.lpp()] = std::max(o.page_scores[lp / c.lpp()], bound[h][lp] - best);
    }
  }
  if (pages <= c.budget) {
    for (int32_t i = 0; i < pages; ++i) o.selected.push_back(i);
    return o;
  }
  const int32_t k = std::min(std::max(3, c.budget), pages);
  // A kept first page ranks above every score; the reported scores stay the bounds.
  std::vector<double> rank = o.page_scores;
  if (c.keep_first != 0) rank[0] = INFINITY;
  std::vector<int32_t> cand(static_cast<size_t>(pages - 1));
  std::iota(cand.begin(), cand.end(), 0);
  std::sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) {
    return rank[a] != rank[b] ? rank[a] > rank[b] : a < b;
  });
  o.selected.assign(cand.begin(), cand.begin() + (k - 1));
  o.selected.push_back(pages - 1);
  std::sort(o.selected.begin(), o.selected.end());
  return o;
}

struct SelectOutput {
  std::vector<int32_t> selected, num_selected;
  std::vector<float> scores;
};

SelectOutput run_select(const SelectCase& c, ThreadPool& pool, Isa isa) {
  const int32_t num_seqs = static_cast<int32_t>(c.kv_lens.size());
  SelectOutput out;
  out.selected.assign(static_cast<size_t>(c.num_rows) * c.num_kv * c.max_selected, -7);
  out.num_selected.assign(static_cast<size_t>(c.num_rows) * c.num_kv, -7);
  out.scores.assign(static_cast<size_t>(num_seqs) * c.num_kv * c.max_pages, kNaN);
  PageSelectParams p;
  p.q = c.q.data();
  p.q_dtype = c.q_dtype;
  p.num_seqs = num_seqs;
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
                              c.sum_dtype, c.lpt, c.lpp()};
  p.budget_pages = c.budget;
  p.keep_first_page = c.keep_first;
  p.out_rows = c.out_rows.data();
  p.selected = out.selected.data();
  p.num_selected = out.num_selected.data();
  p.max_selected = c.max_selected;
  p.page_scores = out.scores.data();
  p.max_pages = c.max_pages;
  cpu::page_select(p, pool, isa);
  return out;
}

// Checks every written row against the oracle; `exact` compares scores exactly, otherwise the
// chosen set must be optimal within `tol`.
void check(const SelectCase& c, const SelectOutput& out, bool exact, const std::string& label) {
  const double tol = 1e-4;
  for (int32_t s = 0; s < static_cast<int32_t>(c.kv_lens.size()); ++s) {
    const int32_t row = c.out_rows[s];
    for (int32_t g = 0; g < c.num_kv; ++g) {
      SCOPED_TRACE(label + " seq=" + std::to_string(s) + " head=" + std::to_string(g));
      const float* scores = &out.scores[static_cast<size_t>((s * c.num_kv + g) * c.max_pages)];
      if (row < 0) {  // untouched
        for (int32_t i = 0; i < c.max_pages; ++i) EXPECT_TRUE(std::isnan(scores[i]));
        continue;
      }
      const int32_t n = out.num_selected[static_cast<size_t>(row * c.num_kv + g)];
      const int32_t* sel =
          &out.selected[static_cast<size_t>((row * c.num_kv + g) * c.max_selected)];
      const std::vector<int32_t> got(sel, sel + std::max(0, n));
      for (int32_t i = std::max(0, n); i < c.max_selected; ++i) EXPECT_EQ(sel[i], -1);
      if (c.mode[g] != static_cast<int32_t>(HeadMode::kSelected) || c.kv_lens[s] == 0) {
        EXPECT_EQ(n, 0);
        for (int32_t i = 0; i < c.max_pages; ++i) EXPECT_EQ(scores[i], -INFINITY);
        continue;
      }
      const Oracle want = oracle(c, s, g);
      const int32_t pages = static_cast<int32_t>(want.page_scores.size());
      for (int32_t i = 0; i < c.max_pages; ++i) {
        if (i >= pages) {
          EXPECT_EQ(scores[i], -INFINITY);
        } else if (exact) {
          EXPECT_EQ(scores[i], want.page_scores[i]) << "page " << i;
        } else {
          EXPECT_NEAR(scores[i], want.page_scores[i], tol) << "page " << i;
        }
      }
      if (exact) {
        EXPECT_EQ(got, want.selected);
        continue;
      }
      // Continuous data: same size, ascending, last page in, and no unselected page (but the
      // last) scores clearly above a selected one.
      ASSERT_EQ(got.size(), want.selected.size());
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
      EXPECT_EQ(got.back(), pages - 1);
      if (c.keep_first != 0) {
        EXPECT_EQ(got.front(), 0);
      }
      double worst_in = INFINITY;
      for (int32_t pg : got) {
        if (pg != pages - 1 && !(pg == 0 && c.keep_first != 0))
          worst_in = std::min(worst_in, want.page_scores[pg]);
      }
      for (int32_t pg = 0; pg + 1 < pages; ++pg) {
        if (std::find(got.begin(), got.end(), pg) == got.end()) {
          EXPECT_LE(want.page_scores[pg], worst_in + tol);
        }
      }
    }
  }
}

TEST(PageSelect, MatchesBruteForceOracleWithTiesAndPartialPages) {
  std::mt19937 rng(51);
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (int32_t d : {64, 96, 128}) {
      for (int32_t group : {1, 2, 4, 8}) {
        for (auto [pt, lpt] : {std::pair{16, 16}, {64, 16}, {16, 8}}) {
          for (int32_t budget : {1, 4, 9}) {
            const DType dt = (d + group + budget) % 3 == 0
                                 ? DType::kBF16
                                 : ((d + group) % 3 == 1 ? DType::kF16 : DType::kF32);
            const std::string label =
                isa_label(isa) + " d=" + std::to_string(d) + " g=" + std::to_string(group) +
                " pt=" + std::to_string(pt) + "/" + std::to_string(lpt) +
                " budget=" + std::to_string(budget) + " " + std::string(dtype_name(dt));
            const SelectCase c = make_case(rng, d, group, pt, lpt, budget, dt, /*integers=*/true);
            check(c, run_select(c, pool, isa), /*exact=*/true, label);
          }
        }
      }
    }
  }
}

// keep_first_page: page 0 joins the last page as always chosen (the attention sink), the other
// k - 2 pages are the best scores among the rest; with the budget covering every page nothing
// changes.
TEST(PageSelect, KeepsTheFirstPageWhenAsked) {
  std::mt19937 rng(53);
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (int32_t group : {1, 4}) {
      for (auto [pt, lpt] : {std::pair{16, 16}, {64, 16}}) {
        for (int32_t budget : {1, 3, 4, 9}) {
          const std::string label = isa_label(isa) + " g=" + std::to_string(group) + " pt=" +
                                    std::to_string(pt) + " budget=" + std::to_string(budget);
          for (bool integers : {true, false}) {
            SelectCase c = make_case(rng, 64, group, pt, lpt, budget, DType::kF32, integers);
            c.keep_first = 1;
            check(c, run_select(c, pool, isa), /*exact=*/integers, label);
          }
        }
      }
    }
  }
}

TEST(PageSelect, ContinuousDataChoosesTheBestPages) {
  std::mt19937 rng(52);
  ThreadPool pool(3);
  for (Isa isa : all_isas()) {
    for (int32_t group : {1, 4}) {
      const SelectCase c = make_case(rng, 128, group, 64, 16, 5, DType::kF32, /*integers=*/false);
      check(c, run_select(c, pool, isa), /*exact=*/false,
            isa_label(isa) + " g=" + std::to_string(group));
    }
  }
}

}  // namespace
}  // namespace ls::kernels::test
