#pragma once
// Which head-pages a block of queries can see, and which keys inside a page each query sees:
// the "iterate only over non-empty blocks" half of paged attention (LServe §3.4), kept apart
// from the arithmetic so both are tested on their own. Pure functions of AttentionParams.

#include <cstdint>
#include <vector>

#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

// One head-page a query block visits.
struct PageVisit {
  int64_t head_page = 0;   // index into the pool's k/v: [num_head_pages, page_tokens, head_dim],
                           //   or a cache slot of a tiered pool (storage_page)
  int32_t first_pos = 0;   // absolute position of the page's first token
  int32_t num_tokens = 0;  // tokens present (the last page may be partial)
};

// Appends to `pages` (after clearing it), in ascending position order, every head-page of
// sequence `seq` and kv head `kv_head` that holds a key visible to some query at an absolute
// position in [q_first, q_last]:
//  - kCausal, or kSelected without a selection row: logical pages 0 .. q_last / page_tokens;
//  - kSelected: the listed pages up to q_last's page (ascending; out-of-order, duplicate or
//    beyond-the-context entries are skipped) plus every page after the last listed one, up to
//    q_last's page;
//  - kStreaming: sink pages holding a sink token or a window key, then the window pages
//    intersecting [q_first - local + 1, q_last]; a window page whose ring slot already holds a
//    newer page (the ring was sized below window + chunk) is skipped, never read as another
//    position's keys.
// Pages whose table entry or block id is out of range are skipped (bad input never crashes).
// Returns false when the (sequence, head) itself is unusable (bad slot, mode, lengths).
bool collect_visible_pages(const AttentionParams& p, int32_t seq, int32_t kv_head, int64_t q_first,
                           int64_t q_last, std::vector<PageVisit>& pages);

// Keys of one page visible to the query at absolute position q: local indices [0, sink_end) and
// [window_begin, end), each possibly empty (end <= 0: none visible).
struct VisibleKeys {
  int32_t sink_end = 0;
  int32_t window_begin = 0;
  int32_t end = 0;
};

inline VisibleKeys visible_keys(bool streaming, int64_t q, const PageVisit& page,
                                int32_t sink_tokens, int32_t local_tokens) {
  VisibleKeys v;
  const int64_t causal_end = q - page.first_pos + 1;
  const int64_t end = causal_end < page.num_tokens ? causal_end : page.num_tokens;
  v.end = static_cast<int32_t>(end < 0 ? 0 : end);
  if (!streaming) {
    v.sink_end = v.end;
    v.window_begin = v.end;
    return v;
  }
  const int64_t sink_end = sink_tokens - static_cast<int64_t>(page.first_pos);
  const int64_t window_begin = q - local_tokens + 1 - page.first_pos;
  v.sink_end = static_cast<int32_t>(sink_end < 0 ? 0 : (sink_end > v.end ? v.end : sink_end));
  v.window_begin =
      static_cast<int32_t>(window_begin < 0 ? 0 : (window_begin > v.end ? v.end : window_begin));
  if (v.window_begin < v.sink_end) v.window_begin = v.sink_end;
  return v;
}

}  // namespace ls::kernels::cpu
