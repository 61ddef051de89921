#include "kernels/cpu/page_residency.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ls::kernels::cpu {

namespace {

// The replacement class of an evictable slot: higher is evicted first (free slots highest).
int32_t victim_class(const PageResidencyParams& p, int32_t slot, int32_t now) {
  if (p.slot_page[slot] < 0) return p.num_buckets;
  const int32_t age = now - p.slot_stamp[slot];
  const int32_t bucket = age / p.bucket_ticks;
  return bucket < p.num_buckets - 1 ? bucket : p.num_buckets - 1;
}

struct RowScratch {
  std::vector<int64_t> misses;
  std::vector<int32_t> victims;
  std::vector<int32_t> class_count;
};

// Victims for `want` misses among the partition's evictable slots, in replacement order.
void choose_victims(const PageResidencyParams& p, int32_t begin, int32_t end, int32_t now,
                    int32_t want, RowScratch& sc) {
  sc.victims.clear();
  auto evictable = [&](int32_t slot) { return p.slot_page[slot] < 0 || p.slot_stamp[slot] != now; };
  if (p.replacement == Replacement::kBucketedLru) {
    // Histogram of classes, then walk classes from the oldest: every slot of a class above the
    // threshold class, and the lowest-indexed ones of the threshold class.
    sc.class_count.assign(static_cast<size_t>(p.num_buckets) + 1, 0);
    for (int32_t slot = begin; slot < end; ++slot) {
      if (evictable(slot)) ++sc.class_count[static_cast<size_t>(victim_class(p, slot, now))];
    }
    int32_t threshold = p.num_buckets;
    int32_t above = 0;  // evictable slots in classes above `threshold`
    while (threshold >= 0 && above + sc.class_count[static_cast<size_t>(threshold)] < want) {
      above += sc.class_count[static_cast<size_t>(threshold)];
      --threshold;
    }
    // One more pass places the victims: classes above the threshold in order (counting sort),
    // then the threshold class by slot index until `want`.
    const auto taken = static_cast<size_t>(want);
    sc.victims.assign(taken, -1);
    std::vector<int32_t> next(static_cast<size_t>(p.num_buckets) + 1, 0);
    int32_t offset = 0;
    for (int32_t c = p.num_buckets; c > threshold; --c) {
      next[static_cast<size_t>(c)] = offset;
      offset += sc.class_count[static_cast<size_t>(c)];
    }
    int32_t at_threshold = offset;
    for (int32_t slot = begin; slot < end; ++slot) {
      if (!evictable(slot)) continue;
      const int32_t c = victim_class(p, slot, now);
      if (c > threshold) {
        sc.victims[static_cast<size_t>(next[static_cast<size_t>(c)]++)] = slot;
      } else if (c == threshold && at_threshold < want) {
        sc.victims[static_cast<size_t>(at_threshold++)] = slot;
      }
    }
    if (threshold < 0) sc.victims.resize(static_cast<size_t>(offset));  // too few evictable
    return;
  }
  // Plain LRU: free slots by index, then repeatedly the oldest stamp (lowest index on ties).
  std::vector<bool> taken(static_cast<size_t>(end - begin), false);
  for (int32_t slot = begin; slot < end && static_cast<int32_t>(sc.victims.size()) < want; ++slot) {
    if (p.slot_page[slot] < 0) {
      sc.victims.push_back(slot);
      taken[static_cast<size_t>(slot - begin)] = true;
    }
  }
  while (static_cast<int32_t>(sc.victims.size()) < want) {
    int32_t best = -1;
    for (int32_t slot = begin; slot < end; ++slot) {
      if (taken[static_cast<size_t>(slot - begin)] || !evictable(slot)) continue;
      if (best < 0 || p.slot_stamp[slot] < p.slot_stamp[best]) best = slot;
    }
    if (best < 0) return;
    taken[static_cast<size_t>(best - begin)] = true;
    sc.victims.push_back(best);
  }
}

}  // namespace

Status page_residency(const PageResidencyParams& p, ThreadPool& /*pool*/) {
  if (p.num_seqs <= 0) {
    if (p.copy_count) *p.copy_count = 0;
    return {};
  }
  if (!p.kv_lens || !p.head_mode || !p.head_slot || !p.retrieval_blocks || !p.cache_rows ||
      !p.page_slot || !p.slot_page || !p.slot_stamp || !p.row_clock || !p.copy_src ||
      !p.copy_dst || !p.copy_count || !p.error) {
    return invalid_argument("page_residency: missing arrays");
  }
  if (p.slots_per_row <= 0 || p.num_cache_slots % p.slots_per_row != 0 ||
      p.max_copies < p.num_cache_slots || p.bucket_ticks <= 0 || p.num_buckets <= 0) {
    return invalid_argument(
        "page_residency: {} slots per row, {} slots, {} copies, {} ticks, {} buckets", p.slots_per_row,
        p.num_cache_slots, p.max_copies, p.bucket_ticks, p.num_buckets);
  }
  const int32_t num_rows = p.num_cache_slots / p.slots_per_row;
  const int64_t num_pages = static_cast<int64_t>(p.num_blocks) * p.heads_per_block;
  RowScratch sc;
  int32_t copies = 0;
  int64_t hits = 0, misses = 0;
  for (int32_t s = 0; s < p.num_seqs; ++s) {
    const int32_t row = p.cache_rows[s];
    if (row < 0 || row >= num_rows) {
      return invalid_argument("page_residency: sequence {} has cache row {} of {}", s, row, num_rows);
    }
    // Plain variables, not a structured binding: clang 14 cannot capture those in a lambda.
    const auto partition = row_partition(p, row);
    const int32_t begin = partition.begin, end = partition.end;
    if (begin < 0 || end < begin || end > p.num_cache_slots) {
      return invalid_argument("page_residency: row {} has slots [{}, {}) of {}", row, begin, end,
                              p.num_cache_slots);
    }
    const int32_t now = ++p.row_clock[row];
    sc.misses.clear();
    int64_t row_hits = 0, reused = 0;
    for (int32_t g = 0; g < p.num_kv_heads; ++g) {
      for_each_mandatory_page(p, s, g, [&](int64_t page) {
        if (page >= num_pages) return;
        const int32_t slot = p.page_slot[page];
        if (slot >= begin && slot < end && p.slot_page[slot] == page) {
          reused += now - p.slot_stamp[slot] <= p.bucket_ticks ? 1 : 0;
          p.slot_stamp[slot] = now;
          ++row_hits;
        } else {
          sc.misses.push_back(page);
        }
      });
    }
    hits += row_hits;
    const auto want = static_cast<int32_t>(sc.misses.size());
    if (p.row_counters) {
      int64_t* rc = p.row_counters + static_cast<int64_t>(row) * kRowCounters;
      rc[kRowMandatory] += row_hits + want;
      rc[kRowReused] += reused;
      rc[kRowHits] += row_hits;
    }
    if (want == 0) continue;
    choose_victims(p, begin, end, now, want, sc);
    if (static_cast<int32_t>(sc.victims.size()) < want) {
      *p.error = kResidencyOverflow;
      continue;
    }
    if (p.row_counters) p.row_counters[static_cast<int64_t>(row) * kRowCounters + kRowMisses] += want;
    std::sort(sc.victims.begin(), sc.victims.end());  // pairing: misses with victims by slot
    for (int32_t i = 0; i < want; ++i) {
      const int32_t slot = sc.victims[static_cast<size_t>(i)];
      const int64_t page = sc.misses[static_cast<size_t>(i)];
      const int32_t old = p.slot_page[slot];
      if (old >= 0 && p.page_slot[old] == slot) p.page_slot[old] = -1;
      p.slot_page[slot] = static_cast<int32_t>(page);
      p.page_slot[page] = slot;
      p.slot_stamp[slot] = now;
      p.copy_src[copies] = static_cast<int32_t>(page);
      p.copy_dst[copies] = slot;
      ++copies;
    }
    misses += want;
  }
  *p.copy_count = copies;
  if (p.counters) {
    p.counters[0] += hits;
    p.counters[1] += misses;
  }
  return {};
}

Status page_residency_reset(const ResidencyResetParams& p) {
  if (!p.page_slot || !p.slot_page || !p.slot_stamp || !p.row_clock || p.slots_per_row <= 0 ||
      p.row < 0) {
    return invalid_argument("page_residency_reset: bad params");
  }
  const SlotRange range = reset_range(p);
  if (range.begin < 0) return invalid_argument("page_residency_reset: slot {}", range.begin);
  for (int32_t slot = range.begin; slot < range.end; ++slot) {
    const int32_t page = p.slot_page[slot];
    if (page >= 0 && p.page_slot[page] == slot) p.page_slot[page] = -1;
    p.slot_page[slot] = -1;
    p.slot_stamp[slot] = 0;
  }
  if (p.reset_clock) p.row_clock[p.row] = 0;
  return {};
}

}  // namespace ls::kernels::cpu
