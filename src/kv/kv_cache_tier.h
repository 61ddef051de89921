#pragma once
// KvCacheTier: the data-plane state of the hierarchical KV memory's device page cache
// (docs/hierarchical-kv.md) — cache slots, the residency table and replacement state, the copy
// list — and the two ops of a layer that keep it: residency (lookup + replacement) and the copies
// it lists. Everything lives in backend memory, so a recorded decode step runs both without a host
// round trip. KvPool owns one when the tier is on.

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "kernels/paged_kv.h"
#include "kv/kv_geometry.h"
#include "kv/kv_tier_config.h"

namespace ls {

struct KvTierCounters {
  int64_t hits = 0;    // mandatory pages found resident
  int64_t misses = 0;  // pages copied from their homes
  // [num_rows, kernels::kRowCounters] per request row, accumulated since start: mandatory pages,
  // those reused from the previous step, hits, misses (kernels/page_residency.h)
  std::vector<int64_t> rows;
};

class KvCacheTier {
 public:
  KvCacheTier() = default;
  // `num_home_pages` retrieval head-pages have homes (the host pool).
  static Result<KvCacheTier> create(const KvGeometry& geometry, Backend& backend,
                                    int64_t num_home_pages, const KvTierConfig& config);

  const KvTierConfig& config() const { return config_; }
  int64_t bytes() const;  // device bytes: cache slots and tables
  // Turns the retrieval pool view (homes) into the tiered view kernels take: k/v the cache,
  // page_slot the residency table, home_k/home_v the homes.
  kernels::PagedKvPool tiered_view(const kernels::PagedKvPool& homes) const;

  // Before one layer's attention `params` (tiered retrieval view): makes every retrieval page it
  // reads resident in its sequence's partition (`cache_rows`: [num_seqs] device, the request row
  // of each sequence) and copies the misses in, both enqueued on the backend.
  void retrieve(Backend& backend, const kernels::AttentionParams& params,
                const int32_t* cache_rows) const;
  // Empties the partition of `row` (a request ended, aborted or its row is reused).
  void reset_row(Backend& backend, int32_t row) const;
  // Elastic budgets: row r's partition becomes `slots[r]` slots ([num_rows], sum at most the
  // cache), placed by tier_layout (each row near where it was). Every slot a row gives up is
  // freed first (its page goes back to being only in its home), so a page is only ever resident
  // in its own row's partition; the slots a row keeps keep their pages. Refused in even mode or
  // for sizes that do not fit.
  // Const like the other ops: the state it changes is the cache's, not the configuration.
  Status set_row_budgets(Backend& backend, const std::vector<int32_t>& slots) const;
  // Slots of each row now ([num_rows]), and where they are.
  std::vector<int32_t> row_budgets() const;
  const std::vector<SlotSpan>& row_spans() const { return spans_; }
  // Waits for the backend and reads the counters into `counters`; returns an error if some step
  // overflowed a partition since the last call (and clears the flag). One small read per step.
  Status finish_step(Backend& backend, KvTierCounters& counters) const;
  KvTierCounters counters(Backend& backend) const;
  int64_t page_bytes() const { return page_bytes_; }
  // Host snapshots of the residency state, for tests and metrics (waits for the backend).
  std::vector<int32_t> page_slots(Backend& backend) const;
  std::vector<int32_t> slot_pages(Backend& backend) const;

 private:
  KvTierConfig config_;
  int64_t num_home_pages_ = 0;
  int64_t page_bytes_ = 0;
  Buffer cache_k_;     // [num_cache_slots, page_tokens, head_dim] dtype
  Buffer cache_v_;     // same
  Buffer page_slot_;   // [num_home_pages] i32, -1: not resident
  Buffer slot_page_;   // [num_cache_slots] i32, -1: free
  Buffer slot_stamp_;  // [num_cache_slots] i32
  Buffer row_clock_;   // [num_rows] i32
  Buffer copy_src_;    // [num_cache_slots] i32
  Buffer copy_dst_;    // [num_cache_slots] i32
  Buffer scratch_;     // [num_cache_slots] i32, the GPU op's per-row miss lists
  Buffer small_;       // [copy_count i32, error i32, hits i64, misses i64]
  Buffer row_counters_;  // [num_rows, kernels::kRowCounters] i64
  Buffer row_slots_;     // [num_rows, 2] i32 partition (begin, end) (elastic budgets only)
  mutable std::vector<SlotSpan> spans_;  // host copy of row_slots_ (even in even mode)
};

}  // namespace ls
