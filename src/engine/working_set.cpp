#include "engine/working_set.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "kernels/page_residency.h"
#include "kv/kv_tier_config.h"

namespace ls {

WorkingSetTracker::WorkingSetTracker(KvGeometry geometry, int32_t window, int64_t cache_pages,
                                     int32_t decode_pages_per_head, int32_t num_rows)
    : geometry_(std::move(geometry)),
      window_(std::max(1, window)),
      cache_pages_(cache_pages),
      decode_pages_per_head_(decode_pages_per_head),
      rows_(static_cast<size_t>(std::max(0, num_rows))) {
  for (Row& r : rows_) r.last.assign(kernels::kRowCounters, 0);
}

int64_t WorkingSetTracker::prefill_pages(int32_t prompt_end) const {
  // Its last chunk reads one layer's pages of the whole prompt at a time; its first decode steps
  // read one step's selection over every layer.
  return std::max<int64_t>(tier_slots_for_layer(geometry_, prompt_end),
                           tier_slots_for_step(geometry_, prompt_end, decode_pages_per_head_));
}

int64_t WorkingSetTracker::decode_pages(int32_t slot, int32_t context) const {
  const int64_t one_step = tier_slots_for_step(geometry_, context, decode_pages_per_head_);
  const int64_t all_pages = tier_slots_for_step(geometry_, context, 0);
  if (slot < 0 || slot >= static_cast<int32_t>(rows_.size())) return one_step;
  const std::deque<DecodeStep>& h = rows_[static_cast<size_t>(slot)].history;
  if (h.empty()) return one_step;
  int64_t max_selected = 0, fresh = 0;
  for (const DecodeStep& d : h) {
    max_selected = std::max(max_selected, d.selected);
    fresh += d.fresh;
  }
  // The oldest step's fresh pages are inside its own S; the later ones add to the union.
  const auto n = static_cast<int64_t>(h.size());
  if (n > 1) fresh -= h.front().fresh;
  const int64_t later = n > 1 ? n - 1 : 1;
  const int64_t added = n > 1 ? (fresh * (window_ - 1) + later - 1) / later : 0;
  return std::min(all_pages, max_selected + added);
}

DecodeWindow WorkingSetTracker::decode_window(int32_t slot) const {
  DecodeWindow w;
  if (slot < 0 || slot >= static_cast<int32_t>(rows_.size())) return w;
  const std::deque<DecodeStep>& h = rows_[static_cast<size_t>(slot)].history;
  if (h.empty()) return w;
  w.steps = static_cast<int32_t>(h.size());
  w.min_fresh = h.front().fresh;
  for (const DecodeStep& d : h) {
    w.selected += static_cast<double>(d.selected);
    w.hits += static_cast<double>(d.hits);
    w.reused += static_cast<double>(d.reused);
    w.min_fresh = std::min(w.min_fresh, d.fresh);
  }
  const auto n = static_cast<double>(h.size());
  w.selected /= n;
  w.hits /= n;
  w.reused /= n;
  return w;
}

void WorkingSetTracker::observe(const std::vector<RowStep>& steps,
                                const std::vector<int64_t>& row_counters) {
  for (const RowStep& st : steps) {
    if (st.slot < 0 || st.slot >= static_cast<int32_t>(rows_.size())) continue;
    Row& r = rows_[static_cast<size_t>(st.slot)];
    const size_t base = static_cast<size_t>(st.slot) * kernels::kRowCounters;
    if (base + kernels::kRowCounters > row_counters.size()) continue;
    int64_t d[kernels::kRowCounters];
    for (int32_t k = 0; k < kernels::kRowCounters; ++k) {
      d[k] = row_counters[base + static_cast<size_t>(k)] - r.last[static_cast<size_t>(k)];
      r.last[static_cast<size_t>(k)] = row_counters[base + static_cast<size_t>(k)];
    }
    if (st.starts) {
      r.history.clear();
      r.locality = {};
    }
    if (!st.decode) {
      r.after_prefill = true;
      continue;
    }
    const bool after_prefill = std::exchange(r.after_prefill, false);
    // The first decode step after a prefill counts pages the prefill read as reused; for the
    // working set they are all new (else the estimate max|S| + (w-1) mean(new) comes out low).
    const int64_t reused = after_prefill ? 0 : d[kernels::kRowReused];
    DecodeStep ds{d[kernels::kRowMandatory], d[kernels::kRowMandatory] - reused,
                  d[kernels::kRowHits], reused};
    r.history.push_back(ds);
    while (static_cast<int32_t>(r.history.size()) > window_) r.history.pop_front();
    for (SelectionLocality* l : {&r.locality, &total_}) {
      ++l->decode_steps;
      if (!after_prefill) {
        l->selected_pages += d[kernels::kRowMandatory];
        l->reused_pages += d[kernels::kRowReused];
      }
      l->hits += d[kernels::kRowHits];
      l->misses += d[kernels::kRowMisses];
    }
    // Runtime debug level (LS_LOG_LEVEL=debug), not compiled out: the locality log of issue 22.
    if (!spdlog::should_log(spdlog::level::debug)) continue;
    spdlog::debug("request {}: decode step selects {} pages, overlap {}, hit ratio {:.3f}",
                 st.request_id ? *st.request_id : std::string(), d[kernels::kRowMandatory],
                 after_prefill ? std::string("- (first step after prefill)")
                 : d[kernels::kRowMandatory] > 0
                     ? fmt::format("{:.3f}", static_cast<double>(d[kernels::kRowReused]) /
                                                 static_cast<double>(d[kernels::kRowMandatory]))
                     : std::string("0.000"),
                 d[kernels::kRowHits] + d[kernels::kRowMisses] > 0
                     ? static_cast<double>(d[kernels::kRowHits]) /
                           static_cast<double>(d[kernels::kRowHits] + d[kernels::kRowMisses])
                     : 0.0);
  }
}

}  // namespace ls
