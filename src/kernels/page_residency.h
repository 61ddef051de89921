#pragma once
// Residency lookup and replacement for the device page cache of the hierarchical KV memory
// (docs/hierarchical-kv.md): the data-plane op that, before one layer's attention, makes every
// retrieval head-page the attention will read resident in its request's partition of the cache
// and lists the copies that bring the misses in (home page -> cache slot) for copy_pages. All of
// its state lives in the backend's memory and the copy count stays there, so a recorded decode
// step runs it without a host round trip. CPU (kernels/cpu/page_residency.cpp) and CUDA
// (kernels/cuda/page_residency.cu) implement the same rule.
//
// Per sequence s (row r = cache_rows[s], partition slots [r * slots_per_row, (r+1) * slots_per_row),
// or [row_slots[2r], row_slots[2r+1]) when the plan sizes the partitions per request):
//  1. now = ++row_clock[r];
//  2. the mandatory pages: for each kv head g with head_mode[g] != kStreaming, the head-pages
//     collect_visible_pages lists for the sequence's whole query range (kSelected with a
//     selection: listed pages plus every page after the last listed one; otherwise every page);
//  3. hit: page_slot[p] is a slot of the partition and slot_page[that slot] == p: stamp = now;
//  4. the m misses, in (head, page) order, take the first m victims of the partition in
//     replacement order among slots that are free (slot_page == -1) or not stamped `now`:
//       bucketed LRU: free first, then bucket = min(num_buckets - 1, (now - stamp) / bucket_ticks)
//                     descending (oldest first), then slot index ascending;
//       plain LRU:    free first, then stamp ascending, then slot index ascending;
//     the i-th miss takes the i-th of these victims in ascending slot order (so a parallel
//     implementation pairs them with two prefix scans, no sort); the victim's old page loses its
//     slot (page_slot = -1 if it still points there), the miss gets it (page_slot, slot_page,
//     stamp = now) and (home page, slot) joins the copy list (rows in any order);
//  5. fewer victims than misses: *error = 1 (overflow), the sequence's misses stay non-resident.
// Partitions are disjoint and a head-page belongs to one sequence, so sequences are independent.

#include <cstdint>

#include "kernels/paged_kv.h"

namespace ls::kernels {

enum class Replacement : int32_t {
  kBucketedLru = 0,  // Spin: coarse age buckets, no global ordering
  kPlainLru = 1,     // exact timestamps
};

inline constexpr int32_t kResidencyOverflow = 1;

struct PageResidencyParams {
  // which pages the attention reads (the fields of the layer's AttentionParams)
  int32_t num_seqs = 0;
  const int32_t* kv_lens = nullptr;    // [num_seqs]
  int32_t num_kv_heads = 0;
  const int32_t* head_mode = nullptr;  // [num_kv_heads]
  const int32_t* head_slot = nullptr;  // [num_kv_heads] slot within a retrieval block
  int32_t page_tokens = 0;
  int32_t heads_per_block = 0;
  int32_t num_blocks = 0;                     // retrieval blocks (homes)
  const int32_t* retrieval_blocks = nullptr;  // [num_seqs, retrieval_blocks_stride]
  int32_t retrieval_blocks_stride = 0;
  const int32_t* selected_rows = nullptr;  // [num_seqs] or null
  const int32_t* selected = nullptr;       // [num_rows, num_kv_heads, max_selected]
  const int32_t* num_selected = nullptr;   // [num_rows, num_kv_heads]
  int32_t max_selected = 0;

  // cache state (device memory of the backend)
  const int32_t* cache_rows = nullptr;  // [num_seqs] partition (request row) of each sequence
  int32_t slots_per_row = 0;            // the even partition; num_rows = num_cache_slots / it
  // optional [num_rows, 2] (begin, end): row r's partition is [row_slots[2r], row_slots[2r + 1]),
  // disjoint from the others' (per-request device budgets, docs/device-cache-budgets.md); null:
  // the even partitions
  const int32_t* row_slots = nullptr;
  int32_t num_cache_slots = 0;
  int32_t* page_slot = nullptr;   // [num_blocks * heads_per_block] slot or -1
  int32_t* slot_page = nullptr;   // [num_cache_slots] head-page or -1
  int32_t* slot_stamp = nullptr;  // [num_cache_slots] row clock at the last use
  int32_t* row_clock = nullptr;   // [num_cache_slots / slots_per_row]
  Replacement replacement = Replacement::kBucketedLru;
  int32_t bucket_ticks = 1;  // clock ticks per bucket (one decode step = num_layers ticks)
  int32_t num_buckets = 64;

  // out
  int32_t* copy_src = nullptr;    // [max_copies] home head-page to copy
  int32_t* copy_dst = nullptr;    // [max_copies] cache slot it goes to
  int32_t* copy_count = nullptr;  // [1] set to the number of copies
  int32_t max_copies = 0;         // >= num_cache_slots
  int32_t* error = nullptr;       // [1] set to kResidencyOverflow on overflow (never cleared)
  int32_t* scratch = nullptr;     // [num_cache_slots] GPU: each row's miss list; CPU: unused
  int64_t* counters = nullptr;    // optional [2]: hits, misses, accumulated
  // optional [num_rows, kRowCounters], accumulated per request row: the selection locality
  // that working-set admission and the overlap metric read (docs/working-set-scheduling.md).
  int64_t* row_counters = nullptr;
};

// Per-row counters of the residency op, in this order.
enum RowCounter : int32_t {
  kRowMandatory = 0,  // mandatory pages (|S_t| summed over layer calls)
  kRowReused = 1,     // of them, hits last stamped at most bucket_ticks ago: read by the same
                      // layer one step earlier too (|S_t ∩ S_t-1|, as far as still resident)
  kRowHits = 2,
  kRowMisses = 3,
};
inline constexpr int32_t kRowCounters = 4;

// Empties one partition: each slot of `row` that holds a page is freed (the page's page_slot
// cleared if it still points there), its stamps and the row clock are reset. With
// `num_slots` > 0 it frees the slots [first_slot, first_slot + num_slots) instead, and resets the
// row clock only if reset_clock (a partition that shrinks or moves gives those slots up).
struct ResidencyResetParams {
  int32_t row = 0;
  int32_t slots_per_row = 0;
  int32_t first_slot = 0;
  int32_t num_slots = 0;  // 0: the even partition of `row`
  bool reset_clock = true;
  int32_t* page_slot = nullptr;
  int32_t* slot_page = nullptr;
  int32_t* slot_stamp = nullptr;
  int32_t* row_clock = nullptr;
};

// The slots [begin, end) of request row `row`'s partition.
struct SlotRange {
  int32_t begin = 0;
  int32_t end = 0;
};
inline SlotRange row_partition(const PageResidencyParams& p, int32_t row) {
  if (p.row_slots != nullptr) return {p.row_slots[2 * row], p.row_slots[2 * row + 1]};
  return {row * p.slots_per_row, (row + 1) * p.slots_per_row};
}
inline SlotRange reset_range(const ResidencyResetParams& p) {
  if (p.num_slots > 0) return {p.first_slot, p.first_slot + p.num_slots};
  return {p.row * p.slots_per_row, (p.row + 1) * p.slots_per_row};
}

// The mandatory head-pages of sequence s, kv head g (step 2 above), in ascending position order,
// passed to `emit(head_page)`. Shared by the CPU op and the tests' shadow model.
template <class Emit>
void for_each_mandatory_page(const PageResidencyParams& p, int32_t s, int32_t g, Emit&& emit) {
  const int32_t mode = p.head_mode[g];
  if (mode == static_cast<int32_t>(HeadMode::kStreaming)) return;
  if (mode != static_cast<int32_t>(HeadMode::kCausal) &&
      mode != static_cast<int32_t>(HeadMode::kSelected)) {
    return;
  }
  const int32_t pt = p.page_tokens;
  const int32_t kv_len = p.kv_lens[s];
  const int32_t slot = p.head_slot[g];
  if (pt <= 0 || kv_len <= 0 || slot < 0 || slot >= p.heads_per_block) return;
  const int32_t num_pages = (kv_len - 1) / pt + 1;
  const int32_t* row = p.retrieval_blocks + static_cast<int64_t>(s) * p.retrieval_blocks_stride;
  auto push = [&](int32_t j) {
    if (j < 0 || j >= p.retrieval_blocks_stride) return;
    const int32_t block = row[j];
    if (block < 0 || block >= p.num_blocks) return;
    emit(static_cast<int64_t>(block) * p.heads_per_block + slot);
  };
  int32_t next = 0;
  if (mode == static_cast<int32_t>(HeadMode::kSelected) && p.selected_rows && p.selected &&
      p.num_selected && p.selected_rows[s] >= 0) {
    const int64_t base = static_cast<int64_t>(p.selected_rows[s]) * p.num_kv_heads + g;
    const int32_t count = p.num_selected[base] < p.max_selected ? p.num_selected[base]
                                                                 : p.max_selected;
    if (count > 0) {
      const int32_t* list = p.selected + base * p.max_selected;
      int32_t prev = -1;
      for (int32_t i = 0; i < count; ++i) {
        const int32_t j = list[i];
        if (j <= prev || j >= num_pages) continue;
        push(j);
        prev = j;
      }
      next = prev + 1;
    }
  }
  for (int32_t j = next; j < num_pages; ++j) push(j);
}

// The page set of an attention call, with the cache fields left for the tier to fill.
inline PageResidencyParams residency_of(const AttentionParams& a) {
  PageResidencyParams p;
  p.num_seqs = a.num_seqs;
  p.kv_lens = a.kv_lens;
  p.num_kv_heads = a.num_kv_heads;
  p.head_mode = a.head_mode;
  p.head_slot = a.head_slot;
  p.page_tokens = a.retrieval.page_tokens;
  p.heads_per_block = a.retrieval.heads_per_block;
  p.num_blocks = a.retrieval.num_blocks;
  p.retrieval_blocks = a.retrieval_blocks;
  p.retrieval_blocks_stride = a.retrieval_blocks_stride;
  p.selected_rows = a.selected_rows;
  p.selected = a.selected;
  p.num_selected = a.num_selected;
  p.max_selected = a.max_selected;
  return p;
}

}  // namespace ls::kernels
