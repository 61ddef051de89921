#pragma once
// A test/bench-only view of what page selection returned: SelectingPolicy calls a SelectionHook
// (when one is set; none is by default, so serving pays one null check per layer) right after
// each page_select, with the kernel's params. read_selections copies the rows the kernel wrote
// back to the host through Backend::copy_bytes (synchronous; not for a step being recorded
// into a CUDA graph). Used by bench_locality (docs/working-set-scheduling.md, "Measured
// locality") and checked against a brute-force selection in tests/model/selection_hook_test.cpp.

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "kernels/paged_kv.h"

namespace ls {

// Called with the params of one layer's page_select after it ran; `layer` is the model layer.
using SelectionHook =
    std::function<void(Backend& backend, int32_t layer, const kernels::PageSelectParams& params)>;

// One written selection row: the pages (physical page indices of the sequence, ascending) each
// kv head of the layer selected. Heads that do not select have an empty list.
struct RecordedSelection {
  int32_t layer = 0;
  int32_t seq = 0;     // index in the step's batch
  int32_t row = 0;     // selection row (the sequence's KV slot)
  int32_t kv_len = 0;  // tokens in the cache when it selected
  std::vector<std::vector<int32_t>> pages;  // [num_kv_heads][num_selected]
};

// The rows params.out_rows says the kernel wrote (sequences with out_rows[s] < 0 are skipped).
std::vector<RecordedSelection> read_selections(Backend& backend, int32_t layer,
                                               const kernels::PageSelectParams& params);

}  // namespace ls
