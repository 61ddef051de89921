// Two-level page selection (PageSummaries::group_pages > 0) against the one-level selection and a
// brute-force oracle: the rule in kernels/cpu/page_select_two_level.cpp must choose exactly the
// one-level pages for every input, ties included, and prune (read fewer fine summaries) where the
// coarse bound proves it safe. Data kinds: small integers (exact bounds, many ties), continuous,
// planted top groups (the coarse level prunes), and flat (every bound equal: nothing may be
// pruned, the lowest pages win the ties). Also: the summary update keeps the coarse rows equal to
// the min / max of their member logical pages' rows.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/page_select.h"
#include "kernels/cpu/page_summary.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

enum class Data { kIntegers, kContinuous, kPlanted, kFlat };

const char* data_name(Data k) {
  switch (k) {
    case Data::kIntegers: return "integers";
    case Data::kContinuous: return "continuous";
    case Data::kPlanted: return "planted";
    case Data::kFlat: return "flat";
  }
  return "?";
}

struct Case {
  int32_t d = 64, group = 1, num_kv = 2, pt = 16, lpt = 16, budget = 4, gp = 4;
  DType dtype = DType::kF32;
  std::vector<int32_t> kv_lens, q_lens, out_rows, coarse_rows, mode, slot;
  int32_t hpb = 2, stride = 0, num_blocks = 0, num_rows = 0, max_selected = 0, max_pages = 0;
  int32_t max_groups = 0, num_coarse_rows = 0;
  std::vector<int32_t> table, q_indptr;
  TypedArray q, kmin, kmax, cmin, cmax;

  int32_t lpp() const { return pt / lpt; }
  int32_t num_seqs() const { return static_cast<int32_t>(kv_lens.size()); }
};

// Coarse rows as the summary update leaves them: per (coarse row, slot, group), the min / max of
// the member logical pages that hold tokens and have a block.
void build_coarse(Case& c) {
  const int64_t n = int64_t{c.num_coarse_rows} * c.hpb * c.max_groups * c.d;
  c.cmin.resize(n, c.dtype);
  c.cmax.resize(n, c.dtype);
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
          c.cmin.set(crow_off + e, lo[e] == INFINITY ? 0.0f : lo[e]);
          c.cmax.set(crow_off + e, hi[e] == -INFINITY ? 0.0f : hi[e]);
        }
      }
    }
  }
}

Case make_case(std::mt19937& rng, int32_t d, int32_t group, int32_t pt, int32_t lpt,
               int32_t budget, int32_t gp, DType dtype, Data kind) {
  Case c;
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
  c.q.resize(q_n, DType::kF32);
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

Output run(const Case& c, bool two_level, ThreadPool& pool, Isa isa) {
  Output out;
  out.selected.assign(static_cast<size_t>(c.num_rows) * c.num_kv * c.max_selected, -7);
  out.num_selected.assign(static_cast<size_t>(c.num_rows) * c.num_kv, -7);
  out.refined.assign(static_cast<size_t>(c.num_seqs()) * c.num_kv, -7);
  out.scores.assign(static_cast<size_t>(c.num_seqs()) * c.num_kv * c.max_pages, kNaN);
  PageSelectParams p;
  p.q = c.q.data();
  p.q_dtype = DType::kF32;
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
    p.summaries.coarse_kmin = const_cast<void*>(c.cmin.data());
    p.summaries.coarse_kmax = const_cast<void*>(c.cmax.data());
    p.summaries.group_pages = c.gp;
    p.summaries.max_groups = c.max_groups;
    p.summaries.num_rows = c.num_coarse_rows;
    p.summaries.rows = c.coarse_rows.data();
  }
  p.budget_pages = c.budget;
  p.out_rows = c.out_rows.data();
  p.selected = out.selected.data();
  p.num_selected = out.num_selected.data();
  p.max_selected = c.max_selected;
  p.page_scores = out.scores.data();
  p.max_pages = c.max_pages;
  p.refined_pages = out.refined.data();
  cpu::page_select(p, pool, isa);
  return out;
}

// Brute force in double (exact on integer data): the one-level selection of (s, g).
std::vector<int32_t> brute_force(const Case& c, int32_t s, int32_t g) {
  const int32_t len = c.kv_lens[s];
  const int32_t pages = (len + c.pt - 1) / c.pt, logical = (len + c.lpt - 1) / c.lpt;
  std::vector<int32_t> sel;
  if (pages <= c.budget) {
    for (int32_t i = 0; i < pages; ++i) sel.push_back(i);
    return sel;
  }
  const int64_t token = c.q_indptr[s + 1] - 1;
  std::vector<double> score(static_cast<size_t>(pages), -INFINITY);
  for (int32_t h = 0; h < c.group; ++h) {
    std::vector<double> b(static_cast<size_t>(logical), -INFINITY);
    for (int32_t lp = 0; lp < logical; ++lp) {
      const int32_t block = c.table[s * c.stride + lp / c.lpp()];
      if (block < 0) continue;
      const int64_t row = (int64_t{block} * c.hpb + c.slot[g]) * c.lpp() + lp % c.lpp();
      double v = 0;
      for (int32_t e = 0; e < c.d; ++e) {
        const double qv = c.q.values[static_cast<size_t>(
            (token * c.num_kv * c.group + g * c.group + h) * c.d + e)];
        v += std::max(qv * c.kmax.values[static_cast<size_t>(row * c.d + e)],
                      qv * c.kmin.values[static_cast<size_t>(row * c.d + e)]);
      }
      b[lp] = v;
    }
    const double best = *std::max_element(b.begin(), b.end());
    for (int32_t lp = 0; lp < logical; ++lp) {
      const double sc = b[lp] - best;
      if (sc == sc) score[lp / c.lpp()] = std::max(score[lp / c.lpp()], sc);
    }
  }
  const int32_t k = std::min(std::max(3, c.budget), pages);
  std::vector<int32_t> cand(static_cast<size_t>(pages - 1));
  std::iota(cand.begin(), cand.end(), 0);
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  sel.assign(cand.begin(), cand.begin() + (k - 1));
  sel.push_back(pages - 1);
  std::sort(sel.begin(), sel.end());
  return sel;
}

struct Pruning {
  int64_t refined = 0, pages = 0;
};

// Two-level equals one-level everywhere (selections, counts; scores of refined pages), refined
// pages are counted correctly, and on exact data both equal the brute force.
Pruning check(const Case& c, const Output& one, const Output& two, bool exact,
              const std::string& label) {
  Pruning pr;
  EXPECT_EQ(two.selected, one.selected) << label;
  EXPECT_EQ(two.num_selected, one.num_selected) << label;
  for (int32_t s = 0; s < c.num_seqs(); ++s) {
    for (int32_t g = 0; g < c.num_kv; ++g) {
      SCOPED_TRACE(label + " seq=" + std::to_string(s) + " head=" + std::to_string(g));
      const size_t item = static_cast<size_t>(s * c.num_kv + g);
      const int32_t pages = (c.kv_lens[s] + c.pt - 1) / c.pt;
      const bool scored = c.out_rows[s] >= 0 &&
                          c.mode[g] == static_cast<int32_t>(HeadMode::kSelected) && pages > 0;
      if (c.out_rows[s] < 0) {
        EXPECT_EQ(two.refined[item], -7);
        continue;
      }
      if (!scored) {
        EXPECT_EQ(two.refined[item], 0);
        continue;
      }
      EXPECT_EQ(one.refined[item], pages);
      EXPECT_GE(two.refined[item], 0);
      EXPECT_LE(two.refined[item], pages);
      int32_t finite_pages = 0;
      for (int32_t i = 0; i < pages; ++i) {
        const float t = two.scores[item * c.max_pages + i], o = one.scores[item * c.max_pages + i];
        if (t != -INFINITY) {
          EXPECT_EQ(t, o) << "page " << i;
          ++finite_pages;
        }
      }
      if (c.coarse_rows[s] < 0) {
        EXPECT_EQ(two.refined[item], pages);
      }
      if (pages > c.budget) {
        pr.refined += two.refined[item];
        pr.pages += pages;
      }
      if (exact) {
        const int32_t row = c.out_rows[s];
        const int32_t n = two.num_selected[static_cast<size_t>(row * c.num_kv + g)];
        const int32_t* sel =
            &two.selected[static_cast<size_t>((row * c.num_kv + g) * c.max_selected)];
        EXPECT_EQ(std::vector<int32_t>(sel, sel + n), brute_force(c, s, g));
      }
    }
  }
  return pr;
}

std::string label_of(Isa isa, int32_t d, int32_t group, int32_t pt, int32_t lpt, int32_t budget,
                     int32_t gp, DType dt, Data kind) {
  return isa_label(isa) + " d=" + std::to_string(d) + " g=" + std::to_string(group) +
         " pt=" + std::to_string(pt) + "/" + std::to_string(lpt) +
         " budget=" + std::to_string(budget) + " G=" + std::to_string(gp) + " " +
         std::string(dtype_name(dt)) + " " + data_name(kind);
}

TEST(PageSelectTwoLevel, EqualsOneLevelAndBruteForceWithTies) {
  std::mt19937 rng(71);
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (Data kind : {Data::kIntegers, Data::kFlat}) {
      for (int32_t group : {1, 4, 5}) {
        for (auto [pt, lpt] : {std::pair{16, 16}, {64, 16}}) {
          for (int32_t budget : {1, 9}) {
            for (int32_t gp : {1, 3, 8}) {
              if ((group + budget + gp + pt) % 2 == 1 && gp != 3) continue;  // a spread, not all
              const DType dt = (group + budget + gp) % 3 == 0 ? DType::kBF16 : DType::kF32;
              const int32_t d = (group + gp) % 2 == 0 ? 64 : 40;
              const std::string label = label_of(isa, d, group, pt, lpt, budget, gp, dt, kind);
              const Case c = make_case(rng, d, group, pt, lpt, budget, gp, dt, kind);
              const Pruning pr =
                  check(c, run(c, false, pool, isa), run(c, true, pool, isa), true, label);
              // Flat data: every page ties with every other, so no group may be skipped.
              if (kind == Data::kFlat) {
                EXPECT_EQ(pr.refined, pr.pages) << label;
              }
            }
          }
        }
      }
    }
  }
}

TEST(PageSelectTwoLevel, EqualsOneLevelOnContinuousData) {
  std::mt19937 rng(72);
  ThreadPool pool(3);
  for (Isa isa : all_isas()) {
    for (int32_t group : {1, 4}) {
      for (int32_t gp : {2, 16}) {
        for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
          const Case c = make_case(rng, 128, group, 64, 16, 8, gp, dt, Data::kContinuous);
          check(c, run(c, false, pool, isa), run(c, true, pool, isa), false,
                label_of(isa, 128, group, 64, 16, 8, gp, dt, Data::kContinuous));
        }
      }
    }
  }
}

// Planted top pages: the coarse level must skip most groups and still choose the one-level pages.
TEST(PageSelectTwoLevel, PrunesPlantedDataAndStaysExact) {
  std::mt19937 rng(73);
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (int32_t group : {1, 4}) {
      for (auto [pt, lpt] : {std::pair{16, 16}, {64, 16}}) {
        for (int32_t gp : {4, 8}) {
          const DType dt = gp == 4 ? DType::kBF16 : DType::kF32;
          const std::string label = label_of(isa, 128, group, pt, lpt, 6, gp, dt, Data::kPlanted);
          const Case c = make_case(rng, 128, group, pt, lpt, 6, gp, dt, Data::kPlanted);
          const Pruning pr =
              check(c, run(c, false, pool, isa), run(c, true, pool, isa), false, label);
          EXPECT_LT(pr.refined * 2, pr.pages) << label << ": refined " << pr.refined;
        }
      }
    }
  }
}

// The summary update keeps each coarse row equal to the min / max of its member logical pages'
// fine rows, across prefill chunks that start and end anywhere and decode steps; sequences whose
// coarse row is -1 and streaming heads touch no coarse row.
TEST(PageSelectTwoLevel, SummaryUpdateKeepsCoarseRowsExact) {
  std::mt19937 rng(74);
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (auto [pt, lpt, gp] : {std::tuple{16, 16, 3}, {64, 16, 2}, {16, 8, 1}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " pt=" + std::to_string(pt) +
                   " G=" + std::to_string(gp));
      const int32_t d = 40, num_kv = 2, hpb = 2, lpp = pt / lpt, num_seqs = 3;
      const std::vector<int32_t> mode = {static_cast<int32_t>(HeadMode::kSelected),
                                         static_cast<int32_t>(HeadMode::kStreaming)};
      const std::vector<int32_t> slot = {1, 0};
      const std::vector<std::vector<int32_t>> steps = {{gp * pt + 5, 7, 3 * pt},
                                                       {2 * gp * pt - 3, 1, 1},
                                                       {1, pt, 1},
                                                       {1, 1, 2 * gp * pt},
                                                       {lpt, 1, 1}};
      std::vector<int32_t> total(num_seqs, 0);
      for (const auto& st : steps) {
        for (int32_t s = 0; s < num_seqs; ++s) total[s] += st[s];
      }
      const int32_t stride = (*std::max_element(total.begin(), total.end()) + pt - 1) / pt;
      const int32_t max_groups = (stride + gp - 1) / gp;
      const int32_t blocks = num_seqs * stride;
      std::vector<int32_t> table(static_cast<size_t>(blocks));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), rng);
      const std::vector<int32_t> rows = {2, -1, 0};
      const int32_t num_rows = 3;
      TypedArray kmin, kmax, cmin, cmax;
      kmin.resize(int64_t{blocks} * hpb * lpp * d, dt);
      kmax.resize(int64_t{blocks} * hpb * lpp * d, dt);
      const int64_t cn = int64_t{num_rows} * hpb * max_groups * d;
      cmin.resize(cn, dt);
      cmax.resize(cn, dt);
      for (int64_t i = 0; i < cn; ++i) {  // poison: a stale row would show
        cmin.set(i, 8192.0f);
        cmax.set(i, -8192.0f);
      }
      std::vector<std::vector<float>> keys(num_seqs);  // [pos, kv, d] f32 of each sequence
      std::vector<int32_t> done(static_cast<size_t>(num_seqs), 0);
      for (const auto& q_lens : steps) {
        std::vector<int32_t> q_indptr = {0}, kv_lens;
        for (int32_t s = 0; s < num_seqs; ++s) {
          q_indptr.push_back(q_indptr.back() + q_lens[s]);
          kv_lens.push_back(done[s] + q_lens[s]);
        }
        TypedArray k = random_array(rng, int64_t{q_indptr.back()} * num_kv * d, dt, -3.0f, 3.0f);
        for (int32_t s = 0; s < num_seqs; ++s) {
          for (int32_t t = q_indptr[s]; t < q_indptr[s + 1]; ++t) {
            for (int32_t e = 0; e < num_kv * d; ++e)
              keys[s].push_back(k.values[static_cast<size_t>(int64_t{t} * num_kv * d + e)]);
          }
        }
        SummaryUpdateParams p;
        p.k = k.data();
        p.src_dtype = dt;
        p.num_tokens = q_indptr.back();
        p.num_kv_heads = num_kv;
        p.head_dim = d;
        p.num_seqs = num_seqs;
        p.q_indptr = q_indptr.data();
        p.kv_lens = kv_lens.data();
        p.head_mode = mode.data();
        p.head_slot = slot.data();
        p.page_tokens = pt;
        p.heads_per_block = hpb;
        p.retrieval_blocks = table.data();
        p.retrieval_blocks_stride = stride;
        p.summaries = PageSummaries{kmin.data(), kmax.data(), dt, lpt, lpp};
        p.summaries.coarse_kmin = cmin.data();
        p.summaries.coarse_kmax = cmax.data();
        p.summaries.group_pages = gp;
        p.summaries.max_groups = max_groups;
        p.summaries.num_rows = num_rows;
        p.summaries.rows = rows.data();
        cpu::page_summary_update(p, pool);
        for (int32_t s = 0; s < num_seqs; ++s) done[static_cast<size_t>(s)] += q_lens[s];

        // Coarse rows read back (bytes -> values) against the keys themselves.
        std::vector<float> cmin_v(static_cast<size_t>(cn)), cmax_v(static_cast<size_t>(cn));
        convert_to_f32(dt, cmin.data(), cmin_v.data(), cn);
        convert_to_f32(dt, cmax.data(), cmax_v.data(), cn);
        std::vector<bool> touched(static_cast<size_t>(num_rows * hpb * max_groups), false);
        for (int32_t s = 0; s < num_seqs; ++s) {
          if (rows[s] < 0) continue;
          for (int32_t g = 0; g * gp * pt < done[s]; ++g) {
            const int64_t crow = (int64_t{rows[s]} * hpb + slot[0]) * max_groups + g;
            touched[static_cast<size_t>(crow)] = true;
            for (int32_t e = 0; e < d; ++e) {
              float lo = INFINITY, hi = -INFINITY;
              for (int32_t pos = g * gp * pt; pos < std::min(done[s], (g + 1) * gp * pt); ++pos) {
                const float v = keys[s][static_cast<size_t>((int64_t{pos} * num_kv + 0) * d + e)];
                lo = std::min(lo, v);
                hi = std::max(hi, v);
              }
              ASSERT_EQ(cmin_v[static_cast<size_t>(crow * d + e)], lo) << "seq " << s << " g " << g;
              ASSERT_EQ(cmax_v[static_cast<size_t>(crow * d + e)], hi) << "seq " << s << " g " << g;
            }
          }
        }
        for (size_t r = 0; r < touched.size(); ++r) {
          if (touched[r]) continue;
          for (int32_t e = 0; e < d; ++e) {
            ASSERT_EQ(cmin_v[r * d + e], 8192.0f) << "coarse row " << r << " written";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ls::kernels::test
