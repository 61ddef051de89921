#pragma once
// Internal to kernels/cuda: which head-pages a block of queries of one (sequence, kv head) can
// see, on the device. The same rules as kernels/cpu/attention_pages (collect_visible_pages):
//  - kCausal, or kSelected without a selection row: logical pages 0 .. q_last / page_tokens;
//  - kSelected: the listed pages up to q_last's page (entries out of order, repeated or beyond
//    the context are skipped) plus every page after the last listed one, up to q_last's page;
//  - kStreaming: sink pages holding a sink token or a window key, then the window pages whose
//    ring slot still holds them.
// The visible pages form a *span*: an explicit list (listed pages, or sink pages; kept in shared
// memory) followed by a contiguous range of logical pages. Concatenating the span's pages gives
// a sequence of key rows; row r lies in span page r / page_tokens at offset r % page_tokens.
// Kernels walk these rows 64 at a time, so only visible pages are ever loaded; a row whose page
// has no block, or whose position is at or past kv_len, is marked invalid and zero-filled.

#include <cstdint>

#include "kernels/cuda/batch_index.cuh"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

// Explicit span entries a block can hold at most (its shared `listed` array is sized per launch
// for max(max_selected, num_sink_pages)); AttentionParams needing more are rejected on the host.
inline constexpr int kMaxListedPages = 1024;

struct HeadView {
  int32_t mode = -1;  // HeadMode
  bool streaming = false;
  int32_t page_tokens = 0;
  int32_t heads_per_block = 0;
  int32_t slot = 0;
  int32_t num_blocks = 0;
  const void* k = nullptr;  // pool base, [head_pages, page_tokens, head_dim] (tiered: cache slots)
  const void* v = nullptr;
  const int32_t* page_slot = nullptr;  // tiered pool: cache slot of each head-page; null: untiered
  const int32_t* table_row = nullptr;  // this sequence's block-table row
  int32_t table_len = 0;
  int32_t kv_len = 0;
  int32_t ring = 0;
  int32_t local = 0;
  int32_t num_sink_pages = 0;
  int32_t sink_tokens = 0;
};

// The per-(sequence, kv head) scalars resolve_head reads, loaded together (no load depends on
// another), so a kernel can issue them early, e.g. before it knows whether it will use them.
struct HeadScalars {
  int32_t mode = -1;
  int32_t slot = -1;
  int32_t kv_len = 0;
  int32_t ring = 0;   // ring_pages[seq], 0 without the array
  int32_t local = 0;  // local_tokens[seq], 0 without the array
};

__device__ inline HeadScalars load_head_scalars(const AttentionParams& p, int32_t seq,
                                                int32_t kv_head) {
  HeadScalars hs;
  hs.mode = p.head_mode[kv_head];
  hs.slot = p.head_slot[kv_head];
  hs.kv_len = p.kv_lens[seq];
  hs.ring = p.ring_pages ? p.ring_pages[seq] : 0;
  hs.local = p.local_tokens ? p.local_tokens[seq] : 0;
  return hs;
}

// Resolves the pool, table row and streaming geometry of (seq, kv_head) from its scalars; false
// when the head cannot be attended (bad mode, slot, pool, ring or lengths): the caller writes
// zero rows, as kernels/cpu does.
__device__ inline bool resolve_head(const AttentionParams& p, int32_t seq, int32_t kv_head,
                                    int64_t q_first, int64_t q_last, const HeadScalars& hs,
                                    HeadView& hv) {
  (void)kv_head;
  const int32_t mode = hs.mode;
  hv.mode = mode;
  hv.streaming = mode == static_cast<int32_t>(HeadMode::kStreaming);
  if (mode != static_cast<int32_t>(HeadMode::kCausal) && !hv.streaming &&
      mode != static_cast<int32_t>(HeadMode::kSelected)) {
    return false;
  }
  const PagedKvPool& pool = hv.streaming ? p.streaming : p.retrieval;
  hv.page_tokens = pool.page_tokens;
  hv.heads_per_block = pool.heads_per_block;
  hv.slot = hs.slot;
  hv.num_blocks = pool.num_blocks;
  hv.k = pool.k;
  hv.v = pool.v;
  hv.page_slot = pool.page_slot;
  hv.kv_len = hs.kv_len;
  hv.table_len = hv.streaming ? p.streaming_blocks_stride : p.retrieval_blocks_stride;
  const int32_t* table = hv.streaming ? p.streaming_blocks : p.retrieval_blocks;
  if (!table || !hv.k || !hv.v || hv.page_tokens <= 0 || pool.head_dim != p.head_dim ||
      hv.slot < 0 || hv.slot >= hv.heads_per_block || q_first < 0 || q_last < q_first ||
      q_last >= hv.kv_len) {
    return false;
  }
  hv.table_row = table + static_cast<int64_t>(seq) * hv.table_len;
  if (hv.streaming) {
    hv.ring = hs.ring;
    hv.local = hs.local;
    hv.num_sink_pages = p.num_sink_pages > 0 ? p.num_sink_pages : 0;
    hv.sink_tokens = p.sink_tokens;
    if (hv.ring <= 0) return false;
  }
  return true;
}

__device__ inline bool resolve_head(const AttentionParams& p, int32_t seq, int32_t kv_head,
                                    int64_t q_first, int64_t q_last, HeadView& hv) {
  return resolve_head(p, seq, kv_head, q_first, q_last, load_head_scalars(p, seq, kv_head), hv);
}

// The selection row of sequence `seq` (-1: none, or the call has no selections).
__device__ inline int32_t load_selection_row(const AttentionParams& p, int32_t seq) {
  return (p.selected_rows && p.selected && p.num_selected) ? p.selected_rows[seq] : -1;
}

struct Span {
  int32_t num_listed = 0;   // explicit pages, in the shared `listed` array
  int32_t range_begin = 0;  // then logical pages [range_begin, range_end)
  int32_t range_end = 0;
  __device__ int32_t num_pages() const {
    return num_listed + (range_end > range_begin ? range_end - range_begin : 0);
  }
};

__device__ inline int32_t floor_div(int64_t a, int64_t b) {
  return static_cast<int32_t>(a >= 0 ? a / b : -((-a + b - 1) / b));
}

// Builds the span of queries at positions [q_first, q_last] with one warp (`lane` 0..31; the
// caller synchronises before other warps read `listed`, which holds `listed_cap` entries).
// Returns the span in every lane.
// `sel_row`: load_selection_row(p, seq), which a kernel may have loaded early.
__device__ inline Span build_span(const AttentionParams& p, const HeadView& hv, int32_t seq,
                                  int32_t kv_head, int64_t q_first, int64_t q_last, int32_t* listed,
                                  int32_t listed_cap, int lane, int32_t sel_row) {
  Span sp;
  const int32_t pt = hv.page_tokens;
  const int32_t q_last_page = static_cast<int32_t>(q_last / pt);
  if (hv.streaming) {
    const int64_t window_first = q_first - hv.local + 1;
    const int32_t last_page = (hv.kv_len - 1) / pt;
    const int32_t sinks = min(hv.num_sink_pages, q_last_page + 1);
    for (int32_t j0 = 0; j0 < sinks; j0 += 32) {
      const int32_t j = j0 + lane;
      const int64_t page_last = static_cast<int64_t>(j + 1) * pt - 1;
      const bool keep = j < sinks && (static_cast<int64_t>(j) * pt < hv.sink_tokens ||
                                      (hv.local > 0 && page_last >= window_first));
      const unsigned ballot = __ballot_sync(0xffffffffu, keep);
      const int32_t idx = sp.num_listed + __popc(ballot & ((1u << lane) - 1u));
      if (keep && idx < listed_cap) listed[idx] = j;
      sp.num_listed = min(sp.num_listed + __popc(ballot), listed_cap);
    }
    if (hv.local > 0) {
      int64_t first = floor_div(window_first > 0 ? window_first : 0, pt);
      if (first < hv.num_sink_pages) first = hv.num_sink_pages;
      const int64_t oldest_kept = static_cast<int64_t>(last_page) - hv.ring + 1;
      if (first < oldest_kept) first = oldest_kept;
      sp.range_begin = static_cast<int32_t>(first);
      sp.range_end = q_last_page + 1;
    }
    return sp;
  }

  (void)seq;
  int32_t next = 0;  // first page of the trailing range
  const bool selected = hv.mode == static_cast<int32_t>(HeadMode::kSelected);
  if (selected && p.selected_rows && p.selected && p.num_selected) {
    const int32_t row = sel_row;
    if (row >= 0) {
      const int64_t base = static_cast<int64_t>(row) * p.num_kv_heads + kv_head;
      const int32_t* list = p.selected + base * p.max_selected;
      // The list's first 64 entries (the row holds max_selected) are loaded with the count, so
      // a selection of up to 64 pages costs one round trip, not two.
      const int32_t pre0 = lane < p.max_selected ? list[lane] : -1;
      const int32_t pre1 = 32 + lane < p.max_selected ? list[32 + lane] : -1;
      const int32_t count = min(p.num_selected[base], p.max_selected);
      if (count > 0) {
        const int32_t num_pages = (hv.kv_len - 1) / pt + 1;
        // An entry is accepted iff it is in [0, num_pages) and above every earlier in-range
        // entry (the CPU's "prev" is exactly that running maximum).
        int32_t running = -1;
        for (int32_t i0 = 0; i0 < count; i0 += 32) {
          const int32_t i = i0 + lane;
          const int32_t j = i >= count ? -1 : (i0 == 0 ? pre0 : (i0 == 32 ? pre1 : list[i]));
          const int32_t v = (i < count && j >= 0 && j < num_pages) ? j : -1;
          int32_t incl = v;  // inclusive prefix max over lanes
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) {
            const int32_t up = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl = max(incl, up);
          }
          int32_t excl = __shfl_up_sync(0xffffffffu, incl, 1);
          if (lane == 0) excl = -1;
          excl = max(excl, running);
          const bool accepted = v >= 0 && v > excl;
          const bool keep = accepted && v <= q_last_page;
          const unsigned ballot = __ballot_sync(0xffffffffu, keep);
          const int32_t idx = sp.num_listed + __popc(ballot & ((1u << lane) - 1u));
          if (keep && idx < listed_cap) listed[idx] = v;
          sp.num_listed = min(sp.num_listed + __popc(ballot), listed_cap);
          running = max(running, __shfl_sync(0xffffffffu, incl, 31));
        }
        next = running + 1;
      }
    }
  }
  sp.range_begin = next;
  sp.range_end = q_last_page + 1;
  return sp;
}

__device__ inline Span build_span(const AttentionParams& p, const HeadView& hv, int32_t seq,
                                  int32_t kv_head, int64_t q_first, int64_t q_last, int32_t* listed,
                                  int32_t listed_cap, int lane) {
  return build_span(p, hv, seq, kv_head, q_first, q_last, listed, listed_cap, lane,
                    load_selection_row(p, seq));
}

// Where key row `r` of a span comes from: its absolute position and element offset in the pool
// (position -1: no key here, the row is zero-filled and masked).
struct KeyRow {
  int32_t position = -1;
  int64_t offset = 0;  // elements from the pool base to the row
};

__device__ inline KeyRow locate_row(const HeadView& hv, const Span& sp, const int32_t* listed,
                                    int32_t r, int32_t head_dim) {
  KeyRow kr;
  const int32_t pt = hv.page_tokens;
  const int32_t li = r / pt;  // 32-bit: the kernels bound their block counts below 2^31 rows
  const int32_t off = r - li * pt;
  if (li >= sp.num_pages()) return kr;
  const int32_t j = li < sp.num_listed ? listed[li] : sp.range_begin + (li - sp.num_listed);
  const int64_t pos = static_cast<int64_t>(j) * pt + off;
  if (pos >= hv.kv_len) return kr;
  const int32_t t = hv.streaming ? ring_table_index(j, hv.num_sink_pages, hv.ring) : j;
  if (t < 0 || t >= hv.table_len) return kr;
  const int32_t block = hv.table_row[t];
  if (block < 0 || block >= hv.num_blocks) return kr;
  int64_t page = static_cast<int64_t>(block) * hv.heads_per_block + hv.slot;
  if (hv.page_slot != nullptr) {  // tiered: read the cache slot; a page not resident is not read
    page = hv.page_slot[page];
    if (page < 0) return kr;
  }
  kr.position = static_cast<int32_t>(pos);
  kr.offset = (page * pt + off) * head_dim;
  return kr;
}

// Λ mask / causal bound: may the query at position q see the key at position k (k >= 0)?
__device__ __forceinline__ bool key_visible(const HeadView& hv, int64_t q, int32_t k) {
  return k >= 0 && k <= q && (!hv.streaming || k < hv.sink_tokens || q - k < hv.local);
}

}  // namespace ls::kernels::cuda
