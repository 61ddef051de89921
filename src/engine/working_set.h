#pragma once
// WorkingSetTracker: selection locality and working sets of the requests, measured from the host
// KV tier's per-row residency counters (docs/working-set-scheduling.md). It is the
// WorkingSetModel the scheduler's admission reads when --kv-offload is on, and the source of the
// selection-overlap metrics. Control plane only: it sees counters, never KV memory.
//
// Per decode step of a request (all layers): S = mandatory pages, R = those also read by the same
// layer one step earlier (still resident), new = S - R, overlap = R / S. The decode working set
// over a window of w steps, |S_t-w+1 ∪ ... ∪ S_t| <= max|S| + (sum of new over the later w - 1
// steps), is estimated from the last w steps seen as max|S| + (w - 1) x mean(new), capped by the
// pages the request has: the bound when w steps were seen, an extrapolation before. The first
// decode step after a prefill chunk is left out of the overlap (R / S) and its debug line says
// so: its "step earlier" is the prefill, which read every page, so R = S would say nothing about
// decode locality.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_geometry.h"

namespace ls {

struct SelectionLocality {
  int64_t decode_steps = 0;     // request-steps of decode observed
  int64_t selected_pages = 0;   // sum of S over them (but the first step after a prefill)
  int64_t reused_pages = 0;     // sum of R
  int64_t hits = 0;             // mandatory pages found resident (decode steps)
  int64_t misses = 0;
  double overlap() const {
    return selected_pages > 0 ? static_cast<double>(reused_pages) / static_cast<double>(selected_pages) : 0.0;
  }
  double hit_ratio() const {
    return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0;
  }
};

// A request's last decode steps (at most the window), per step: what elastic device budgets
// plan from (engine/device_budget.h).
struct DecodeWindow {
  int32_t steps = 0;       // decode steps in the window
  double selected = 0.0;   // mean mandatory pages per step (all layers)
  double hits = 0.0;       // mean of them found resident
  double reused = 0.0;     // mean read one step earlier too
  int64_t min_fresh = 0;   // fewest pages per step not read one step earlier (or evicted)
};

// One request row's part of a step, as the engine scheduled it.
struct RowStep {
  int32_t slot = 0;
  bool starts = false;  // the row's sequence (re)starts from token 0 in this step
  bool decode = false;  // one decode token (not a prefill chunk)
  const std::string* request_id = nullptr;  // for the debug log
};

class WorkingSetTracker final : public WorkingSetModel {
 public:
  WorkingSetTracker(KvGeometry geometry, int32_t window, int64_t cache_pages,
                    int32_t decode_pages_per_head, int32_t num_rows);

  int64_t cache_pages() const override { return cache_pages_; }
  int64_t prefill_pages(int32_t prompt_end) const override;
  int64_t decode_pages(int32_t slot, int32_t context) const override;

  // After a step: `row_counters` are the tier's cumulative [rows, kRowCounters] counters.
  void observe(const std::vector<RowStep>& rows, const std::vector<int64_t>& row_counters);
  const SelectionLocality& total() const { return total_; }
  // The request now in `slot` (since it last started).
  const SelectionLocality& row(int32_t slot) const { return rows_[static_cast<size_t>(slot)].locality; }
  int32_t window() const { return window_; }
  DecodeWindow decode_window(int32_t slot) const;

 private:
  struct DecodeStep {
    int64_t selected = 0;
    int64_t fresh = 0;  // selected - reused
    int64_t hits = 0;
    int64_t reused = 0;
  };
  struct Row {
    std::vector<int64_t> last;        // cumulative counters at the last observe
    std::deque<DecodeStep> history;   // the last `window_` decode steps, oldest first
    bool after_prefill = false;       // the last step observed for the row was a prefill chunk
    SelectionLocality locality;
  };

  KvGeometry geometry_;
  int32_t window_;
  int64_t cache_pages_;
  int32_t decode_pages_per_head_;
  std::vector<Row> rows_;
  SelectionLocality total_;
};

}  // namespace ls
