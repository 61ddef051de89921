// Per-request device budgets (docs/device-cache-budgets.md), control plane only:
//  - plans never exceed the cache, keep every hard floor (and the soft floors when they fit) and
//    every cap, and hand out everything unless every request is at its cap;
//  - the greedy fill of the steepest hit-curve segments reaches the brute-force optimum of the
//    summed modelled hits on small cases;
//  - the concave hull lies on or above every measured point and is concave and non-decreasing;
//  - through the planner, a request with a larger working set (a longer context, or more hits
//    from its buffer) gets more than one with a smaller one, and the plan reaches the executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/device_budget.h"
#include "engine/sequence.h"
#include "engine/working_set.h"
#include "kernels/page_residency.h"
#include "kv/kv_tier_config.h"
#include "model/step_executor.h"

namespace ls {
namespace {

// Random demands whose curves come from random measured points.
std::vector<BudgetDemand> random_demands(std::mt19937& rng, int32_t n, int64_t max_floor,
                                         int64_t max_extra) {
  std::vector<BudgetDemand> out;
  for (int32_t i = 0; i < n; ++i) {
    BudgetDemand d;
    d.hard_floor = static_cast<int64_t>(rng() % static_cast<uint32_t>(max_floor + 1));
    d.soft_floor = d.hard_floor + static_cast<int64_t>(rng() % 3);
    d.cap = d.soft_floor + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_extra + 1));
    std::vector<HitPoint> pts;
    const int32_t k = static_cast<int32_t>(rng() % 4);
    for (int32_t j = 0; j < k; ++j) {
      pts.push_back({d.soft_floor + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_extra + 1)),
                     static_cast<double>(rng() % 20)});
    }
    d.segments = concave_hit_curve(d.soft_floor, pts);
    out.push_back(std::move(d));
  }
  return out;
}

TEST(DeviceBudget, PlansStayWithinTheCacheFloorsAndCaps) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto n = static_cast<int32_t>(1 + rng() % 6);
    const std::vector<BudgetDemand> demands = random_demands(rng, n, 20, 40);
    int64_t hard = 0, soft = 0, cap = 0;
    for (const BudgetDemand& d : demands) {
      hard += d.hard_floor;
      soft += d.soft_floor;
      cap += d.cap;
    }
    const int64_t cache = hard + static_cast<int64_t>(rng() % static_cast<uint32_t>(cap - hard + 20));
    auto plan = plan_device_budgets(demands, cache);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    int64_t sum = 0;
    bool all_capped = true;
    for (size_t i = 0; i < demands.size(); ++i) {
      const int64_t b = (*plan)[i];
      sum += b;
      EXPECT_GE(b, demands[i].hard_floor);
      EXPECT_LE(b, demands[i].cap);
      if (soft <= cache) {
        EXPECT_GE(b, demands[i].soft_floor);
      }
      all_capped &= b == demands[i].cap;
    }
    EXPECT_LE(sum, cache) << "trial " << trial;
    if (sum < cache) {
      EXPECT_TRUE(all_capped) << "trial " << trial << ": slots left unassigned";
    }
  }
  // Hard floors beyond the cache are refused, never silently overrun.
  BudgetDemand big;
  big.hard_floor = big.soft_floor = big.cap = 10;
  EXPECT_FALSE(plan_device_budgets({big, big}, 19).ok());
}

// Brute force: every allocation between the soft floors and caps within the cache.
double best_hits(const std::vector<BudgetDemand>& d, int64_t cache) {
  double best = -1.0;
  std::vector<int64_t> b(d.size());
  std::function<void(size_t, int64_t)> go = [&](size_t i, int64_t left) {
    if (i == d.size()) {
      double h = 0.0;
      for (size_t j = 0; j < d.size(); ++j) h += modelled_hits(d[j], b[j]);
      best = std::max(best, h);
      return;
    }
    for (int64_t x = d[i].soft_floor; x <= d[i].cap && x <= left; ++x) {
      b[i] = x;
      go(i + 1, left - x);
    }
  };
  go(0, cache);
  return best;
}

TEST(DeviceBudget, GreedyMatchesTheBruteForceOptimumOnSmallCases) {
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const auto n = static_cast<int32_t>(1 + rng() % 3);
    const std::vector<BudgetDemand> demands = random_demands(rng, n, 3, 9);
    int64_t soft = 0, cap = 0;
    for (const BudgetDemand& d : demands) {
      soft += d.soft_floor;
      cap += d.cap;
    }
    const int64_t cache = soft + static_cast<int64_t>(rng() % static_cast<uint32_t>(cap - soft + 3));
    auto plan = plan_device_budgets(demands, cache);
    ASSERT_TRUE(plan.ok());
    double got = 0.0;
    for (size_t i = 0; i < demands.size(); ++i) got += modelled_hits(demands[i], (*plan)[i]);
    EXPECT_NEAR(got, best_hits(demands, cache), 1e-9) << "trial " << trial;
    ++checked;
  }
  EXPECT_EQ(checked, 600);
}

TEST(DeviceBudget, HitCurveIsTheConcaveNonDecreasingHullOfTheMeasuredPoints) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t from = static_cast<int64_t>(rng() % 10);
    std::vector<HitPoint> pts;
    for (int j = 0, k = static_cast<int>(rng() % 6); j < k; ++j) {
      pts.push_back({static_cast<int64_t>(rng() % 40), static_cast<double>(rng() % 30)});
    }
    BudgetDemand d;
    d.soft_floor = from;
    d.cap = 100;
    d.segments = concave_hit_curve(from, pts);
    double start = 0.0;  // the curve's height at `from`: the best point there, or 0
    for (const HitPoint& p : pts) {
      if (p.budget == from) start = std::max(start, p.hits);
    }
    for (size_t i = 0; i < d.segments.size(); ++i) {
      EXPECT_GT(d.segments[i].gain, 0.0);
      EXPECT_GT(d.segments[i].pages, 0);
      if (i > 0) {
        EXPECT_LE(d.segments[i].gain, d.segments[i - 1].gain + 1e-12);
      }
    }
    for (const HitPoint& p : pts) {
      if (p.budget < from) continue;
      EXPECT_GE(start + modelled_hits(d, p.budget), p.hits - 1e-9) << "trial " << trial;
    }
    // Tight: the curve's top is the best point, not above it.
    double top = start;
    for (const HitPoint& p : pts) {
      if (p.budget >= from) top = std::max(top, p.hits);
    }
    EXPECT_NEAR(start + modelled_hits(d, 1000), top, 1e-9) << "trial " << trial;
  }
}

// Eight layers of one retrieval head each, 4-token pages.
KvGeometry geometry() {
  KvGeometry g;
  g.num_layers = 8;
  g.num_kv_heads = 1;
  g.head_dim = 4;
  g.page_tokens = 4;
  g.logical_page_tokens = 4;
  g.roles = HeadRoles(8, 1, std::vector<bool>(8, false));
  g.max_chunk_tokens = 16;
  return g;
}

class RecordingExecutor final : public StepExecutor {
 public:
  Status forward(const StepInput&, std::vector<float>&) override { return {}; }
  int32_t vocab_size() const override { return 1; }
  Status set_device_budgets(const std::vector<int32_t>& slots) override {
    applied.push_back(slots);
    return {};
  }
  std::vector<std::vector<int32_t>> applied;
};

struct Requests {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> running;
  Sequence* add(int32_t slot, int32_t context) {
    auto req = std::make_shared<RequestState>();
    req->request_id = "r" + std::to_string(slot);
    req->prompt_ids.assign(static_cast<size_t>(context), 1);
    seqs.push_back(std::make_unique<Sequence>(req, 0, 0, nullptr, 1 << 20));
    Sequence* s = seqs.back().get();
    s->slot = slot;
    s->num_computed = context - 1;
    running.push_back(s);
    return s;
  }
};

// Feeds `steps` decode steps of per-step (selected, reused, hits) to the tracker, per row.
void feed(WorkingSetTracker& t, int32_t rows, int32_t steps,
          const std::vector<std::array<int64_t, 3>>& per_step) {
  std::vector<int64_t> counters(static_cast<size_t>(rows) * kernels::kRowCounters, 0);
  for (int32_t step = 0; step < steps; ++step) {
    std::vector<RowStep> rs;
    for (int32_t r = 0; r < rows; ++r) {
      int64_t* c = counters.data() + static_cast<size_t>(r) * kernels::kRowCounters;
      const auto& p = per_step[static_cast<size_t>(r)];
      c[kernels::kRowMandatory] += p[0];
      c[kernels::kRowReused] += p[1];
      c[kernels::kRowHits] += p[2];
      c[kernels::kRowMisses] += p[0] - p[2];
      rs.push_back({r, false, true, nullptr});
    }
    t.observe(rs, counters);
  }
}

TEST(DeviceBudget, LargerWorkingSetsGetMoreAndThePlanReachesTheExecutor) {
  const KvGeometry g = geometry();
  constexpr int32_t kRows = 3, kMaxLen = 512, kPagesPerHead = 4, kInterval = 4;
  const int64_t cache = 3 * 60;  // 60 slots per row when even
  WorkingSetTracker tracker(g, 12, cache, kPagesPerHead, kRows);
  DeviceBudgetPlanner planner(g, cache, kRows, kMaxLen, kPagesPerHead, kInterval);
  ASSERT_EQ(planner.budgets(), std::vector<int32_t>(kRows, 60));
  RecordingExecutor exec;
  Requests reqs;
  reqs.add(0, 40);   // short: 10 pages per layer
  reqs.add(1, 100);  // long: 25 pages per layer
  reqs.add(2, 100);
  // Per decode step all read 32 pages (8 layers x 4). Row 0 hits nearly all of them already;
  // row 1's buffer turns older re-reads into hits (hits well above one step's reuse) and it
  // still misses a third; row 2 gains nothing from its buffer (hits = one step's reuse).
  feed(tracker, kRows, 6, {{{32, 24, 28}}, {{32, 8, 20}}, {{32, 8, 8}}});
  ASSERT_TRUE(planner.before_step(reqs.running, tracker, exec).ok());
  ASSERT_EQ(exec.applied.size(), 1u);
  const std::vector<int32_t> b = exec.applied.back();
  EXPECT_EQ(b, planner.budgets());
  int64_t sum = 0;
  for (int32_t x : b) sum += x;
  EXPECT_LE(sum, cache);
  // Soft floors: one decode step's pages (32); hard floors: one layer's pages.
  for (int32_t r = 0; r < kRows; ++r) EXPECT_GE(b[static_cast<size_t>(r)], 32) << r;
  EXPECT_LE(b[0], tier_slots_for_step(g, 40 + kInterval, 0));  // never more than all its pages
  EXPECT_GT(b[1], b[0]);  // the larger working set with the larger measured gain
  EXPECT_GT(b[1], b[2]);  // same size, no gain from its buffer
  EXPECT_GT(b[0], b[2]);
  EXPECT_EQ(planner.num_changes(), 1);
  EXPECT_GT(planner.moved_slots(), 0);

  // Within the interval and with the same rows nothing is re-planned.
  ASSERT_TRUE(planner.before_step(reqs.running, tracker, exec).ok());
  EXPECT_EQ(exec.applied.size(), 1u);
  // A new request in row 0 (prefilling a long prompt) is planned at once with one layer of its
  // whole prompt at least.
  reqs.running.erase(reqs.running.begin());
  Sequence* fresh = reqs.add(0, 480);
  fresh->num_computed = 0;
  ASSERT_TRUE(planner.before_step(reqs.running, tracker, exec).ok());
  ASSERT_EQ(exec.applied.size(), 2u);
  EXPECT_GE(exec.applied.back()[0], planner.hard_floor(480));
  // Rows with no request give everything back.
  reqs.running.resize(1);
  ASSERT_TRUE(planner.before_step(reqs.running, tracker, exec).ok());
  const std::vector<int32_t> only = exec.applied.back();
  EXPECT_EQ(only[0], 0);
  EXPECT_GT(only[1], 60);
  EXPECT_EQ(only[2], 0);
}

}  // namespace
}  // namespace ls

namespace ls {
namespace {

// The first decode step after a prefill chunk says nothing about decode locality (the residency
// op counts the prefill's reads of every page as "read one step earlier"), so the tracker's
// overlap leaves it out; later steps count, and a restart starts over.
TEST(WorkingSetTracker, FirstDecodeStepAfterPrefillIsLeftOutOfTheOverlap) {
  WorkingSetTracker t(geometry(), 12, 1000, 4, 1);
  std::vector<int64_t> c(kernels::kRowCounters, 0);
  auto step = [&](bool starts, bool decode, int64_t selected, int64_t reused) {
    c[kernels::kRowMandatory] += selected;
    c[kernels::kRowReused] += reused;
    c[kernels::kRowHits] += selected;
    t.observe({{0, starts, decode, nullptr}}, c);
  };
  step(true, false, 200, 150);  // prefill chunks
  step(false, false, 200, 200);
  step(false, true, 32, 32);    // first decode step: "reuses" what the prefill read
  step(false, true, 32, 16);
  step(false, true, 32, 8);
  EXPECT_EQ(t.total().decode_steps, 3);
  EXPECT_EQ(t.total().selected_pages, 64);
  EXPECT_EQ(t.total().reused_pages, 24);
  EXPECT_DOUBLE_EQ(t.row(0).overlap(), 24.0 / 64.0);
  step(true, false, 100, 0);  // the row restarts (preempted): prefill, then decode again
  step(false, true, 32, 32);
  step(false, true, 32, 30);
  EXPECT_DOUBLE_EQ(t.row(0).overlap(), 30.0 / 32.0);
  EXPECT_EQ(t.total().reused_pages, 54);
}

}  // namespace
}  // namespace ls
