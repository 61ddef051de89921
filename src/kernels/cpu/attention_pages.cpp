#include "kernels/cpu/attention_pages.h"

#include <algorithm>

namespace ls::kernels::cpu {

namespace {

struct PageSource {
  const PagedKvPool* pool = nullptr;
  const int32_t* table_row = nullptr;  // this sequence's block table row
  int32_t table_len = 0;
  int32_t slot = 0;
  int32_t kv_len = 0;
};

void push_page(const PageSource& src, int32_t logical_page, int32_t table_index,
               std::vector<PageVisit>& pages) {
  if (table_index < 0 || table_index >= src.table_len) return;
  const int32_t block = src.table_row[table_index];
  if (block < 0 || block >= src.pool->num_blocks) return;
  const int32_t pt = src.pool->page_tokens;
  PageVisit v;
  // A tiered pool's page is read from its device cache slot; one that is not resident is
  // skipped, never read from stale memory (the residency op runs first).
  v.head_page = storage_page(
      *src.pool, static_cast<int64_t>(block) * src.pool->heads_per_block + src.slot);
  if (v.head_page < 0) return;
  v.first_pos = logical_page * pt;
  v.num_tokens = std::min(pt, src.kv_len - v.first_pos);
  if (v.num_tokens > 0) pages.push_back(v);
}

int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

}  // namespace

bool collect_visible_pages(const AttentionParams& p, int32_t seq, int32_t kv_head, int64_t q_first,
                           int64_t q_last, std::vector<PageVisit>& pages) {
  pages.clear();
  const int32_t mode = p.head_mode[kv_head];
  const bool streaming = mode == static_cast<int32_t>(HeadMode::kStreaming);
  if (mode != static_cast<int32_t>(HeadMode::kCausal) && !streaming &&
      mode != static_cast<int32_t>(HeadMode::kSelected)) {
    return false;
  }
  PageSource src;
  src.pool = streaming ? &p.streaming : &p.retrieval;
  src.slot = p.head_slot[kv_head];
  src.kv_len = p.kv_lens[seq];
  src.table_len = streaming ? p.streaming_blocks_stride : p.retrieval_blocks_stride;
  const int32_t* table = streaming ? p.streaming_blocks : p.retrieval_blocks;
  const int32_t pt = src.pool->page_tokens;
  if (!table || pt <= 0 || src.slot < 0 || src.slot >= src.pool->heads_per_block || q_first < 0 ||
      q_last < q_first || q_last >= src.kv_len) {
    return false;
  }
  src.table_row = table + static_cast<int64_t>(seq) * src.table_len;
  const int32_t q_last_page = static_cast<int32_t>(q_last / pt);

  if (streaming) {
    const int32_t ring = p.ring_pages[seq];
    const int64_t local = p.local_tokens[seq];
    if (ring <= 0) return false;
    const int32_t last_page = (src.kv_len - 1) / pt;
    const int64_t window_first = q_first - local + 1;  // earliest key in some query's window
    const int32_t num_sink_pages = std::max(0, p.num_sink_pages);
    for (int32_t j = 0; j < std::min(num_sink_pages, q_last_page + 1); ++j) {
      const int64_t page_last = static_cast<int64_t>(j + 1) * pt - 1;
      const bool has_sink = static_cast<int64_t>(j) * pt < p.sink_tokens;
      const bool in_window = local > 0 && page_last >= window_first;
      if (has_sink || in_window) push_page(src, j, j, pages);
    }
    if (local <= 0) return true;
    const int32_t first = static_cast<int32_t>(
        std::max<int64_t>(num_sink_pages, floor_div(std::max<int64_t>(0, window_first), pt)));
    for (int32_t j = first; j <= q_last_page; ++j) {
      if (last_page - j >= ring) continue;  // slot already reused by a newer page
      push_page(src, j, streaming_table_index(j, num_sink_pages, ring), pages);
    }
    return true;
  }

  int32_t next = 0;  // first page not yet covered
  if (mode == static_cast<int32_t>(HeadMode::kSelected) && p.selected_rows && p.selected &&
      p.num_selected) {
    const int32_t row = p.selected_rows[seq];
    if (row >= 0) {
      const int64_t base = static_cast<int64_t>(row) * p.num_kv_heads + kv_head;
      const int32_t count = std::min(p.num_selected[base], p.max_selected);
      if (count > 0) {
        const int32_t* list = p.selected + base * p.max_selected;
        // "The last listed page" is a property of the list, not of this query block: pages
        // between a block's last query and it stay invisible.
        const int32_t num_pages = (src.kv_len - 1) / pt + 1;
        int32_t prev = -1;
        for (int32_t i = 0; i < count; ++i) {
          const int32_t j = list[i];
          if (j <= prev || j >= num_pages) continue;
          if (j <= q_last_page) push_page(src, j, j, pages);
          prev = j;
        }
        next = prev + 1;
      }
    }
  }
  for (int32_t j = next; j <= q_last_page; ++j) push_page(src, j, j, pages);
  return true;
}

}  // namespace ls::kernels::cpu
