#pragma once
// The shape of the hierarchical KV memory's device page cache (docs/hierarchical-kv.md): plain
// control-plane data, no backend headers. Retrieval heads' pages have their homes in the host
// pool; the device keeps a cache partitioned per request row.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kv/kv_geometry.h"

namespace ls {

enum class KvReplacement : int32_t {
  kBucketedLru = 0,  // Spin's coarse age buckets (the default)
  kPlainLru = 1,     // exact timestamps, for comparison
};

// How the device cache is split over the request rows (docs/device-cache-budgets.md).
enum class KvBudgetMode : int32_t {
  kEven = 0,     // every row owns slots_per_row slots, fixed
  kElastic = 1,  // the engine sizes each running request's partition (Spin's buffer elasticity)
};

struct KvTierConfig {
  bool enabled = false;
  int32_t num_rows = 0;       // request rows (max sequences); each owns one partition
  int32_t slots_per_row = 0;  // per-request device budget in head-pages
  KvReplacement replacement = KvReplacement::kBucketedLru;
  int32_t bucket_ticks = 1;   // residency-op calls per bucket: num_layers = one decode step
  int32_t num_buckets = 64;
  KvBudgetMode budget = KvBudgetMode::kEven;

  int32_t num_cache_slots() const { return num_rows * slots_per_row; }
  Status validate() const;
};

// A request row's partition of the device cache: slots [begin, end).
struct SlotSpan {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const SlotSpan&) const = default;
};
// Where partitions of `sizes` slots go ([rows], sum at most `cache`) when they were at `old`
// ([rows], disjoint, in row order): in row order, each as close to its old start as the rows
// before and after it allow, so a row that keeps its size keeps its slots when there is room and
// resizing one row moves as few others as possible.
std::vector<SlotSpan> tier_layout(const std::vector<SlotSpan>& old, const std::vector<int32_t>& sizes,
                                  int32_t cache);
// Slots whose owner differs between two layouts: per row, its new slots it did not hold.
int64_t tier_slots_moved(const std::vector<SlotSpan>& from, const std::vector<SlotSpan>& to);

// Head-pages one request's partition must hold for a prefill step (or a dense decode step) at
// `context_tokens`: every page of the layer with the most retrieval heads.
int32_t tier_slots_for_layer(const KvGeometry& g, int32_t context_tokens);
// Head-pages the attention reads in one decode step over all layers when each selecting head
// reads at most `pages_per_head` pages (0: every page) at `context_tokens`.
int64_t tier_slots_for_step(const KvGeometry& g, int32_t context_tokens, int32_t pages_per_head);

}  // namespace ls
