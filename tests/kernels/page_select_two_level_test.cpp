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
#include "two_level_case.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

Output run(const Case& c, bool two_level, ThreadPool& pool, Isa isa) {
  Output out = sentinel_output(c);
  PageSelectParams p = host_params(c, two_level, out);
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
  if (c.keep_first != 0) score[0] = INFINITY;  // a kept first page ranks above every score
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
      const bool scored =
          c.out_rows[s] >= 0 && c.mode[g] == static_cast<int32_t>(HeadMode::kSelected) && pages > 0;
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
              // Queries of the summaries' type for part of the spread (the CUDA tensor-core
              // bounds' case, whose GPU test takes this CPU path as its oracle).
              const DType qdt = (group + pt / 16) % 2 == 0 ? dt : DType::kF32;
              Case c = make_case(rng, d, group, pt, lpt, budget, gp, dt, kind, qdt);
              c.keep_first = (group + gp) % 2;  // both selection rules over the spread
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
        for (DType dt : {gp == 2 ? DType::kF16 : DType::kF32, DType::kBF16}) {
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
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (int32_t group : {1, 4}) {
      for (auto [pt, lpt] : {std::pair{16, 16}, {64, 16}}) {
        for (int32_t gp : {4, 8}) {
          const DType dt = gp == 4 ? DType::kBF16 : DType::kF32;
          // The same data for every ISA, so each ISA is held to the same pruning.
          std::mt19937 rng(static_cast<uint32_t>(73 + 1000 * group + 10 * pt + gp));
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
// fine rows (here the keys' extremes: keys and summaries share the dtype), across prefill chunks
// that start and end anywhere and decode steps; sequences whose coarse row is -1 and streaming
// heads touch no coarse row, which stays zero (empty). Folding a sequence's stored fine rows into
// an empty coarse row (a prefix-cache hit, cpu::coarse_fold_pages) rebuilds the same bounds.
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
      TypedArray kmin, kmax;
      kmin.resize(int64_t{blocks} * hpb * lpp * d, dt);
      kmax.resize(int64_t{blocks} * hpb * lpp * d, dt);
      const int64_t cn = int64_t{num_rows} * hpb * max_groups * d;
      std::vector<uint32_t> cmin(static_cast<size_t>(cn), 0u), cmax(cmin);  // zeroed: empty
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

        // Coarse rows decoded against the keys themselves.
        std::vector<float> cmin_v(static_cast<size_t>(cn)), cmax_v(static_cast<size_t>(cn));
        for (size_t i = 0; i < cmin_v.size(); ++i) {
          cmin_v[i] = -coarse_value(cmin[i]);
          cmax_v[i] = coarse_value(cmax[i]);
        }
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
            ASSERT_EQ(cmin[r * d + e], 0u) << "coarse row " << r << " written";
            ASSERT_EQ(cmax[r * d + e], 0u) << "coarse row " << r << " written";
          }
        }
      }
      // A sequence starting from a prefix-cache hit on these pages: folding the stored fine
      // summaries of each sequence's full pages into an empty row gives the extremes of those
      // pages' keys, and for whole groups exactly the row the updates built.
      for (int32_t s = 0; s < num_seqs; ++s) {
        const int32_t row = rows[s] >= 0 ? rows[s] : 1;
        const int32_t full = done[s] / pt;
        std::vector<uint32_t> fmin(static_cast<size_t>(cn), 0u), fmax(fmin);
        CoarseFoldParams f;
        f.summaries = PageSummaries{kmin.data(), kmax.data(), dt, lpt, lpp};
        f.summaries.coarse_kmin = fmin.data();
        f.summaries.coarse_kmax = fmax.data();
        f.summaries.group_pages = gp;
        f.summaries.max_groups = max_groups;
        f.summaries.num_rows = num_rows;
        f.row = row;
        f.heads_per_block = hpb;
        f.head_dim = d;
        f.page_tokens = pt;
        f.blocks = table.data() + int64_t{s} * stride;
        f.num_pages = full;
        cpu::coarse_fold_pages(f, pool);
        for (int32_t g = 0; g < max_groups; ++g) {
          const int64_t crow = (int64_t{row} * hpb + slot[0]) * max_groups + g;
          const int32_t end = std::min(full * pt, (g + 1) * gp * pt);
          for (int32_t e = 0; e < d; ++e) {
            const size_t at = static_cast<size_t>(crow * d + e);
            if (g * gp * pt >= end) {
              ASSERT_EQ(fmin[at], 0u) << "seq " << s << " g " << g;
              continue;
            }
            float lo = INFINITY, hi = -INFINITY;
            for (int32_t pos = g * gp * pt; pos < end; ++pos) {
              const float v = keys[s][static_cast<size_t>((int64_t{pos} * num_kv + 0) * d + e)];
              lo = std::min(lo, v);
              hi = std::max(hi, v);
            }
            ASSERT_EQ(-coarse_value(fmin[at]), lo) << "seq " << s << " g " << g;
            ASSERT_EQ(coarse_value(fmax[at]), hi) << "seq " << s << " g " << g;
            if (rows[s] >= 0 && (g + 1) * gp * pt <= full * pt) {
              ASSERT_EQ(fmin[at], cmin[at]);
              ASSERT_EQ(fmax[at], cmax[at]);
            }
          }
        }
        // (Slot 0 belongs to the streaming head here and holds no summaries; in the engine every
        // slot of a retrieval block is a retrieval head's, so only slot 1 is checked.)
      }
    }
  }
}

}  // namespace
}  // namespace ls::kernels::test
