#pragma once
// Per-request device budgets of the host KV tier's device page cache (Spin's buffer elasticity;
// docs/device-cache-budgets.md). Control plane only: from the working-set tracker's per-row
// measurements it plans how many cache slots each running request's partition gets, and the
// executor applies the plan (KvCacheTier::set_row_budgets); the residency op reads the resulting
// partition offsets, never this state.
//
// The rule. Every running request first gets its hard floor (one layer's pages at the context it
// may reach before the next plan: what the residency op must hold at once), then, if the cache
// allows, its soft floor (one decode step's pages over all layers: below that, LRU over the
// layers evicts each page before the next step can reuse it), scaled down in proportion when the
// soft floors do not all fit. The rest goes where the modelled marginal hit gain is largest: each
// request's hits per step as a function of its budget is a concave piecewise-linear curve above
// its soft floor (the upper concave hull of what was measured, DeviceHitCurve), and filling the
// steepest segments first maximises the summed modelled hits (the greedy is exact for separable
// concave objectives under one capacity). Slots no curve gains from are shared equally up to each
// request's cap (all of its pages: more buys nothing).

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_geometry.h"
#include "kv/kv_tier_config.h"

namespace ls {

struct Sequence;
class StepExecutor;
class WorkingSetTracker;

// One straight piece of a hit curve: `pages` more slots each gain `gain` hits per decode step.
struct BudgetSegment {
  int64_t pages = 0;
  double gain = 0.0;
};

struct BudgetDemand {
  int64_t hard_floor = 0;  // must hold: one layer's pages at the horizon
  int64_t soft_floor = 0;  // >= hard_floor: one decode step's pages over all layers
  int64_t cap = 0;         // >= soft_floor: all of the request's pages at the horizon
  std::vector<BudgetSegment> segments;  // above soft_floor, gains non-increasing
};

// Budgets for `demands` within `cache` slots (sum <= cache, hard_floor <= b <= cap). Refuses when
// the hard floors alone do not fit (start-up sizing makes that unreachable).
Result<std::vector<int64_t>> plan_device_budgets(const std::vector<BudgetDemand>& demands,
                                                 int64_t cache);
// The modelled hits per step of `d` at `budget` slots: the curve's height above its soft floor.
double modelled_hits(const BudgetDemand& d, int64_t budget);

// A measured point of a request's hit curve: `hits` per decode step with `budget` slots.
struct HitPoint {
  int64_t budget = 0;
  double hits = 0.0;
};
// The upper concave hull of `points` at budgets >= `from`, made non-decreasing (more slots never
// lose hits), as segments starting at `from`. Points below `from` are ignored; the hull starts at
// the first point at `from` or its height 0 when there is none.
std::vector<BudgetSegment> concave_hit_curve(int64_t from, std::vector<HitPoint> points);

struct DecodeWindow;
// A request's hit curve from its last decode steps `w`, measured with `budget` slots: one step's
// reuse at the soft floor (LRU over the layers keeps the previous step's pages until they are
// read again), the measured hits at `budget`, and beyond it half the measured slope (diminishing
// returns) up to its working set (at most `cap`), never above the pages it reads per step. A
// request measured at its floor gets an exploring slope (half its other misses per step's worth
// of pages).
std::vector<BudgetSegment> measured_hit_curve(const DecodeWindow& w, int64_t soft_floor,
                                              int64_t budget, int64_t working_set, int64_t cap);

// The engine's driver: plans budgets from the tracker between steps and applies them.
class DeviceBudgetPlanner {
 public:
  // `interval`: decode steps between plans; `decode_pages_per_head`: the policy's per-step
  // selection (0: dense).
  DeviceBudgetPlanner(KvGeometry geometry, int64_t cache_pages, int32_t num_rows,
                      int32_t max_model_len, int32_t decode_pages_per_head, int32_t interval);

  // Before a step that runs `running` (the scheduler's running sequences): re-plans when one of
  // them lacks its hard floor for this step, the set of running rows changed, or `interval`
  // steps passed, and applies a changed plan through `executor`.
  Status before_step(const std::vector<Sequence*>& running, const WorkingSetTracker& tracker,
                     StepExecutor& executor);

  const std::vector<int32_t>& budgets() const { return budgets_; }  // [rows] slots now
  int64_t num_changes() const { return num_changes_; }      // plans that changed a budget
  int64_t moved_slots() const { return moved_slots_; }      // slots that changed owner, summed
  // Budgets of the rows in `rows`, sorted ascending (for min / median / max).
  std::vector<int32_t> sorted_budgets(const std::vector<int32_t>& rows) const;
  // Hard floor of a request that may reach `context` tokens.
  int64_t hard_floor(int32_t context) const;

 private:
  KvGeometry geometry_;
  int64_t cache_pages_;
  int32_t max_model_len_;
  int32_t decode_pages_per_head_;
  int32_t interval_;
  int32_t steps_since_plan_ = 0;
  std::vector<int32_t> budgets_;
  std::vector<SlotSpan> spans_;  // where the executor's partitions are (tier_layout)
  std::vector<int32_t> planned_rows_;  // running rows at the last plan, ascending
  int64_t num_changes_ = 0;
  int64_t moved_slots_ = 0;
};

}  // namespace ls
