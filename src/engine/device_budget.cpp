#include "engine/device_budget.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "engine/sequence.h"
#include "engine/working_set.h"
#include "kv/kv_tier_config.h"
#include "model/step_executor.h"

namespace ls {

std::vector<BudgetSegment> measured_hit_curve(const DecodeWindow& w, int64_t soft_floor,
                                              int64_t budget, int64_t working_set, int64_t cap) {
  const int64_t top = std::min(std::max(working_set, soft_floor), cap);
  const double base = std::min(w.reused, w.hits);
  std::vector<HitPoint> points{{soft_floor, base}};
  double slope = 0.0;
  if (budget > soft_floor) {
    // Hits beyond one step's reuse are re-reads from older steps that the buffer kept.
    slope = std::max(0.0, w.hits - base) / static_cast<double>(budget - soft_floor);
    points.push_back({budget, std::max(w.hits, base)});
  } else {
    // Nothing measured above the floor: assume one more step's worth of pages would turn half of
    // the step's other misses into hits (explores; the next plan measures it).
    slope = 0.5 * std::max(0.0, w.selected - base) / static_cast<double>(std::max<int64_t>(1, soft_floor));
  }
  const int64_t from = std::max(budget, soft_floor);
  if (top > from && slope > 0.0) {
    // Beyond what was measured, half the measured slope up to the working set, and never more
    // hits than pages read.
    const double h = std::max(w.hits, base) + 0.5 * slope * static_cast<double>(top - from);
    points.push_back({top, std::min(w.selected, h)});
  }
  return concave_hit_curve(soft_floor, std::move(points));
}

Result<std::vector<int64_t>> plan_device_budgets(const std::vector<BudgetDemand>& demands,
                                                 int64_t cache) {
  const size_t n = demands.size();
  std::vector<int64_t> b(n, 0);
  int64_t hard = 0, extra = 0;
  for (const BudgetDemand& d : demands) {
    if (d.hard_floor < 0 || d.soft_floor < d.hard_floor || d.cap < d.soft_floor) {
      return invalid_argument("device budget demand: floors {} / {}, cap {}", d.hard_floor,
                              d.soft_floor, d.cap);
    }
    hard += d.hard_floor;
    extra += d.soft_floor - d.hard_floor;
  }
  if (hard > cache) {
    return resource_exhausted("the running requests need {} device cache slots for one layer "
                              "each, the cache has {}",
                              hard, cache);
  }
  int64_t avail = cache - hard;
  for (size_t i = 0; i < n; ++i) b[i] = demands[i].hard_floor;
  if (extra > avail) {
    // The soft floors do not all fit: each request gets the same share of what it lacks.
    int64_t given = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t want = demands[i].soft_floor - demands[i].hard_floor;
      const int64_t share = want * avail / extra;  // < 2^31 slots each: no overflow
      b[i] += share;
      given += share;
    }
    for (size_t i = 0; i < n && given < avail; ++i) {  // the rounding remainder, in row order
      if (b[i] < demands[i].soft_floor) {
        ++b[i];
        ++given;
      }
    }
    return b;
  }
  for (size_t i = 0; i < n; ++i) b[i] = demands[i].soft_floor;
  avail -= extra;

  // The steepest segments first (ties: the earlier request, then its earlier segment).
  struct Piece {
    double gain;
    size_t row;
    size_t k;
    int64_t pages;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<BudgetSegment>& s = demands[i].segments;
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k].gain > 0.0 && s[k].pages > 0) pieces.push_back({s[k].gain, i, k, s[k].pages});
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) {
    if (x.gain != y.gain) return x.gain > y.gain;
    if (x.row != y.row) return x.row < y.row;
    return x.k < y.k;
  });
  for (const Piece& p : pieces) {
    if (avail == 0) break;
    const int64_t take = std::min({p.pages, avail, demands[p.row].cap - b[p.row]});
    if (take <= 0) continue;
    b[p.row] += take;
    avail -= take;
  }
  // What no curve gains from: equal shares up to the caps.
  while (avail > 0) {
    int64_t open = 0;
    for (size_t i = 0; i < n; ++i) open += b[i] < demands[i].cap ? 1 : 0;
    if (open == 0) break;
    const int64_t share = avail / open;
    for (size_t i = 0; i < n && avail > 0; ++i) {
      const int64_t take = std::min({std::max<int64_t>(share, 1), avail, demands[i].cap - b[i]});
      if (take <= 0) continue;
      b[i] += take;
      avail -= take;
    }
  }
  return b;
}

double modelled_hits(const BudgetDemand& d, int64_t budget) {
  int64_t above = budget - d.soft_floor;
  double hits = 0.0;
  for (const BudgetSegment& s : d.segments) {
    if (above <= 0) break;
    const int64_t take = std::min(above, s.pages);
    hits += static_cast<double>(take) * s.gain;
    above -= take;
  }
  return hits;
}

std::vector<BudgetSegment> concave_hit_curve(int64_t from, std::vector<HitPoint> points) {
  std::erase_if(points, [&](const HitPoint& p) { return p.budget < from; });
  points.push_back({from, 0.0});  // the start, unless a measured point at `from` is higher
  std::sort(points.begin(), points.end(), [](const HitPoint& x, const HitPoint& y) {
    return x.budget != y.budget ? x.budget < y.budget : x.hits > y.hits;
  });
  // One point per budget (the highest), heights made non-decreasing.
  std::vector<HitPoint> mono;
  for (const HitPoint& p : points) {
    if (!mono.empty() && mono.back().budget == p.budget) continue;
    const double h = mono.empty() ? p.hits : std::max(p.hits, mono.back().hits);
    mono.push_back({p.budget, h});
  }
  // Upper hull (monotone chain): drop a middle point on or below the chord of its neighbours.
  std::vector<HitPoint> hull;
  for (const HitPoint& p : mono) {
    while (hull.size() >= 2) {
      const HitPoint& a = hull[hull.size() - 2];
      const HitPoint& m = hull.back();
      const double cross = static_cast<double>(m.budget - a.budget) * (p.hits - a.hits) -
                           (m.hits - a.hits) * static_cast<double>(p.budget - a.budget);
      if (cross < 0.0) break;  // m lies above the chord a-p: keep it
      hull.pop_back();
    }
    hull.push_back(p);
  }
  std::vector<BudgetSegment> segments;
  for (size_t i = 1; i < hull.size(); ++i) {
    const int64_t pages = hull[i].budget - hull[i - 1].budget;
    const double gain = (hull[i].hits - hull[i - 1].hits) / static_cast<double>(pages);
    if (gain <= 0.0) break;  // concave and non-decreasing: the rest is flat too
    segments.push_back({pages, gain});
  }
  return segments;
}

DeviceBudgetPlanner::DeviceBudgetPlanner(KvGeometry geometry, int64_t cache_pages,
                                         int32_t num_rows, int32_t max_model_len,
                                         int32_t decode_pages_per_head, int32_t interval)
    : geometry_(std::move(geometry)),
      cache_pages_(cache_pages),
      max_model_len_(max_model_len),
      decode_pages_per_head_(decode_pages_per_head),
      interval_(std::max(1, interval)),
      budgets_(static_cast<size_t>(std::max(0, num_rows)),
               num_rows > 0 ? static_cast<int32_t>(cache_pages / num_rows) : 0) {
  for (size_t r = 0; r < budgets_.size(); ++r) {
    const auto begin = static_cast<int32_t>(r) * budgets_[r];
    spans_.push_back({begin, begin + budgets_[r]});
  }
}

int64_t DeviceBudgetPlanner::hard_floor(int32_t context) const {
  return tier_slots_for_layer(geometry_, std::min(context, max_model_len_));
}

std::vector<int32_t> DeviceBudgetPlanner::sorted_budgets(const std::vector<int32_t>& rows) const {
  std::vector<int32_t> out;
  for (int32_t r : rows) {
    if (r >= 0 && r < static_cast<int32_t>(budgets_.size())) out.push_back(budgets_[static_cast<size_t>(r)]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status DeviceBudgetPlanner::before_step(const std::vector<Sequence*>& running,
                                        const WorkingSetTracker& tracker, StepExecutor& executor) {
  std::vector<int32_t> rows;
  bool need = ++steps_since_plan_ > interval_;
  for (const Sequence* seq : running) {
    if (seq->slot < 0 || seq->slot >= static_cast<int32_t>(budgets_.size())) continue;
    rows.push_back(seq->slot);
    // This step's context is at most num_tokens(): a decode computes the last sampled token.
    if (budgets_[static_cast<size_t>(seq->slot)] < hard_floor(seq->num_tokens())) need = true;
  }
  std::sort(rows.begin(), rows.end());
  if (rows != planned_rows_) need = true;
  if (!need) return {};

  std::vector<BudgetDemand> demands;
  demands.reserve(running.size());
  std::vector<int32_t> demand_rows;
  for (const Sequence* seq : running) {
    if (seq->slot < 0 || seq->slot >= static_cast<int32_t>(budgets_.size())) continue;
    // Prefilling: the whole prompt; decoding: the tokens until the next plan.
    const int32_t horizon = std::min(max_model_len_, seq->num_tokens() + interval_);
    BudgetDemand d;
    d.hard_floor = hard_floor(horizon);
    d.cap = std::max(d.hard_floor, tier_slots_for_step(geometry_, horizon, 0));
    d.soft_floor = std::clamp(tier_slots_for_step(geometry_, horizon, decode_pages_per_head_),
                              d.hard_floor, d.cap);
    const DecodeWindow w = tracker.decode_window(seq->slot);
    if (w.steps > 0) {
      d.segments = measured_hit_curve(w, d.soft_floor, budgets_[static_cast<size_t>(seq->slot)],
                                      std::max(d.soft_floor, tracker.decode_pages(seq->slot, seq->num_tokens())),
                                      d.cap);
    }
    demands.push_back(std::move(d));
    demand_rows.push_back(seq->slot);
  }
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> plan, plan_device_budgets(demands, cache_pages_));
  std::vector<int32_t> next(budgets_.size(), 0);
  for (size_t i = 0; i < plan.size(); ++i) {
    next[static_cast<size_t>(demand_rows[i])] = static_cast<int32_t>(plan[i]);
  }
  steps_since_plan_ = 0;
  planned_rows_ = std::move(rows);
  if (next == budgets_) return {};
  LS_RETURN_IF_ERROR(executor.set_device_budgets(next));
  ++num_changes_;
  // The executor places the partitions with tier_layout too; mirror it to count the moves.
  std::vector<SlotSpan> spans = tier_layout(spans_, next, static_cast<int32_t>(cache_pages_));
  moved_slots_ += tier_slots_moved(spans_, spans);
  spans_ = std::move(spans);
  budgets_ = std::move(next);
  return {};
}

}  // namespace ls
