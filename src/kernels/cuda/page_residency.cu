// Residency lookup and replacement of the device page cache on the GPU: the rule of
// kernels/page_residency.h, bit for bit the CPU op's result (kernels/cpu/page_residency.cpp).
// One thread block per sequence owns its row's partition, so blocks never share a slot (no global
// atomics but the copy-list reservation). Within a block:
//  1. per kv head, the mandatory pages in the CPU's order (listed pages, deduplicated by one
//     thread into shared memory, then the tail or every page, in parallel chunks); hits are
//     stamped, misses are placed in order by a block-wide exclusive scan into `scratch` (the
//     row's range of it);
//  2. victims: each evictable slot gets a key whose order is the replacement order (free 0;
//     bucketed: 1 + (num_buckets - 1 - bucket); plain: the stamp). A binary search over keys with
//     block-wide counts finds the threshold key K (the smallest with count(key <= K) >= misses):
//     Spin's histogram-threshold idea, no sort. Slots below K are victims, and those equal to K
//     in slot order up to the demand;
//  3. a second scan numbers the victims in slot order; victim i takes miss i, updates the tables
//     and writes copy entry base + i (base reserved with one atomicAdd on the count, which the
//     launcher zeroes first).
// Nothing is read back on the host: one memset and one launch, both capturable in a CUDA graph.

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/page_residency.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxListed = 2048;  // selection entries one head may list (shared memory)

// Exclusive prefix sum of `v` over the block; *total gets the sum. Every thread must call it.
__device__ int block_exclusive_scan(int v, int* total, int* smem /* [kWarps + 1] */) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) smem[warp] = x;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int t = smem[w];
      smem[w] = run;
      run += t;
    }
    smem[kWarps] = run;
  }
  __syncthreads();
  const int result = smem[warp] + x - v;
  *total = smem[kWarps];
  __syncthreads();
  return result;
}

__device__ __forceinline__ int victim_key(const PageResidencyParams& p, int32_t slot, int32_t now) {
  // -1: not evictable (holds a page needed in this call)
  const int32_t page = p.slot_page[slot];
  if (page < 0) return 0;
  const int32_t stamp = p.slot_stamp[slot];
  if (stamp == now) return -1;
  if (p.replacement == Replacement::kPlainLru) return stamp < 1 ? 1 : stamp;
  const int32_t bucket = min(p.num_buckets - 1, (now - stamp) / p.bucket_ticks);
  return 1 + (p.num_buckets - 1 - bucket);
}

__global__ void __launch_bounds__(kThreads) residency_kernel(const PageResidencyParams p) {
  __shared__ int scan_smem[kWarps + 1];
  __shared__ int32_t listed[kMaxListed];
  __shared__ int32_t s_now, s_nlisted, s_next, s_overflow;
  const int s = static_cast<int>(blockIdx.x);
  const int32_t row = p.cache_rows[s];
  const int32_t begin = row * p.slots_per_row;
  const int32_t end = begin + p.slots_per_row;
  if (threadIdx.x == 0) {
    s_now = ++p.row_clock[row];
    s_overflow = 0;
  }
  __syncthreads();
  const int32_t now = s_now;
  const int32_t pt = p.page_tokens;
  const int32_t kv_len = p.kv_lens[s];
  const int32_t num_pages = kv_len > 0 && pt > 0 ? (kv_len - 1) / pt + 1 : 0;
  const int32_t* table = p.retrieval_blocks + static_cast<int64_t>(s) * p.retrieval_blocks_stride;
  const int64_t num_home = static_cast<int64_t>(p.num_blocks) * p.heads_per_block;
  int32_t* misses = p.scratch + begin;
  int num_misses = 0;
  int64_t hits = 0, reused = 0;

  for (int32_t g = 0; g < p.num_kv_heads; ++g) {
    const int32_t mode = p.head_mode[g];
    const int32_t hslot = p.head_slot[g];
    const bool reads = (mode == static_cast<int32_t>(HeadMode::kCausal) ||
                        mode == static_cast<int32_t>(HeadMode::kSelected)) &&
                       num_pages > 0 && hslot >= 0 && hslot < p.heads_per_block;
    if (!reads) continue;  // uniform over the block
    if (threadIdx.x == 0) {
      int32_t n = 0, next = 0;
      if (mode == static_cast<int32_t>(HeadMode::kSelected) && p.selected_rows && p.selected &&
          p.num_selected && p.selected_rows[s] >= 0) {
        const int64_t base = static_cast<int64_t>(p.selected_rows[s]) * p.num_kv_heads + g;
        const int32_t count = min(p.num_selected[base], p.max_selected);
        if (count > 0) {
          const int32_t* list = p.selected + base * p.max_selected;
          int32_t prev = -1;
          for (int32_t i = 0; i < count; ++i) {
            const int32_t j = list[i];
            if (j <= prev || j >= num_pages) continue;
            if (n < kMaxListed) listed[n] = j;
            ++n;
            prev = j;
          }
          next = prev + 1;
        }
      }
      if (n > kMaxListed) s_overflow = 1;  // launcher refuses such selections; belt and braces
      s_nlisted = min(n, kMaxListed);
      s_next = next;
    }
    __syncthreads();
    const int32_t nlisted = s_nlisted, next = s_next;
    const int32_t total = nlisted + max(0, num_pages - next);
    for (int32_t c0 = 0; c0 < total; c0 += kThreads) {
      const int32_t i = c0 + static_cast<int32_t>(threadIdx.x);
      int miss = 0;
      int64_t page = -1;
      if (i < total) {
        const int32_t j = i < nlisted ? listed[i] : next + (i - nlisted);
        if (j < p.retrieval_blocks_stride) {
          const int32_t block = table[j];
          if (block >= 0 && block < p.num_blocks) {
            page = static_cast<int64_t>(block) * p.heads_per_block + hslot;
            if (page >= num_home) page = -1;
          }
        }
        if (page >= 0) {
          const int32_t slot = p.page_slot[page];
          if (slot >= begin && slot < end && p.slot_page[slot] == page) {
            reused += now - p.slot_stamp[slot] <= p.bucket_ticks ? 1 : 0;
            p.slot_stamp[slot] = now;
            ++hits;
          } else {
            miss = 1;
          }
        }
      }
      int chunk_misses = 0;
      const int pos = block_exclusive_scan(miss, &chunk_misses, scan_smem);
      if (miss && num_misses + pos < p.slots_per_row) misses[num_misses + pos] = static_cast<int32_t>(page);
      num_misses += chunk_misses;
    }
    __syncthreads();  // `listed` is rewritten for the next head
  }

  if (hits != 0) atomicAdd(reinterpret_cast<unsigned long long*>(p.counters), static_cast<unsigned long long>(hits));
  auto* row_counters = p.row_counters != nullptr
                           ? reinterpret_cast<unsigned long long*>(p.row_counters + static_cast<int64_t>(row) * kRowCounters)
                           : nullptr;
  if (row_counters != nullptr) {
    if (hits != 0) {
      atomicAdd(row_counters + kRowMandatory, static_cast<unsigned long long>(hits));
      atomicAdd(row_counters + kRowHits, static_cast<unsigned long long>(hits));
    }
    if (reused != 0) atomicAdd(row_counters + kRowReused, static_cast<unsigned long long>(reused));
    if (threadIdx.x == 0 && num_misses != 0) {
      atomicAdd(row_counters + kRowMandatory, static_cast<unsigned long long>(num_misses));
    }
  }
  __syncthreads();  // every stamp of this call is written before keys are read
  const int m = num_misses;
  if (m == 0) return;
  if (m > p.slots_per_row || s_overflow) {
    if (threadIdx.x == 0) *p.error = kResidencyOverflow;
    return;
  }

  // Threshold key: smallest K with count(0 <= key <= K) >= m.
  const int max_key = p.replacement == Replacement::kPlainLru ? max(now, 1) : p.num_buckets;
  auto count_le = [&](int k) {
    int c = 0;
    for (int32_t slot = begin + static_cast<int32_t>(threadIdx.x); slot < end; slot += kThreads) {
      const int key = victim_key(p, slot, now);
      c += key >= 0 && key <= k ? 1 : 0;
    }
    int total = 0;
    block_exclusive_scan(c, &total, scan_smem);
    return total;
  };
  if (count_le(max_key) < m) {
    if (threadIdx.x == 0) *p.error = kResidencyOverflow;
    return;
  }
  int lo = 0, hi = max_key;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (count_le(mid) >= m) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int threshold = lo;
  const int above = threshold > 0 ? count_le(threshold - 1) : 0;  // strictly older: all taken
  const int take_eq = m - above;

  __shared__ int s_base;
  if (threadIdx.x == 0) {
    s_base = atomicAdd(p.copy_count, m);
    atomicAdd(reinterpret_cast<unsigned long long*>(p.counters) + 1, static_cast<unsigned long long>(m));
    if (row_counters != nullptr) atomicAdd(row_counters + kRowMisses, static_cast<unsigned long long>(m));
  }
  __syncthreads();
  const int base = s_base;
  int eq_before = 0, victims_before = 0;
  for (int32_t c0 = begin; c0 < end; c0 += kThreads) {
    const int32_t slot = c0 + static_cast<int32_t>(threadIdx.x);
    const int key = slot < end ? victim_key(p, slot, now) : -1;
    const int eq = key == threshold ? 1 : 0;
    int eq_total = 0;
    const int eq_rank = eq_before + block_exclusive_scan(eq, &eq_total, scan_smem);
    const int victim = key >= 0 && (key < threshold || (eq && eq_rank < take_eq)) ? 1 : 0;
    int victim_total = 0;
    const int idx = victims_before + block_exclusive_scan(victim, &victim_total, scan_smem);
    if (victim) {
      const int32_t page = misses[idx];
      const int32_t old = p.slot_page[slot];
      if (old >= 0 && p.page_slot[old] == slot) p.page_slot[old] = -1;
      p.slot_page[slot] = page;
      p.page_slot[page] = slot;
      p.slot_stamp[slot] = now;
      p.copy_src[base + idx] = page;
      p.copy_dst[base + idx] = slot;
    }
    eq_before += eq_total;
    victims_before += victim_total;
  }
}

__global__ void __launch_bounds__(kThreads) reset_kernel(const ResidencyResetParams p) {
  const int32_t begin = p.row * p.slots_per_row;
  for (int32_t slot = begin + static_cast<int32_t>(threadIdx.x); slot < begin + p.slots_per_row;
       slot += kThreads) {
    const int32_t page = p.slot_page[slot];
    if (page >= 0 && p.page_slot[page] == slot) p.page_slot[page] = -1;
    p.slot_page[slot] = -1;
    p.slot_stamp[slot] = 0;
  }
  if (threadIdx.x == 0) p.row_clock[p.row] = 0;
}

}  // namespace

Status page_residency(const PageResidencyParams& p, cudaStream_t stream) {
  if (!p.copy_count) return invalid_argument("page_residency: no copy count");
  LS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.copy_count, 0, sizeof(int32_t), stream));
  if (p.num_seqs <= 0) return {};
  if (!p.kv_lens || !p.head_mode || !p.head_slot || !p.retrieval_blocks || !p.cache_rows ||
      !p.page_slot || !p.slot_page || !p.slot_stamp || !p.row_clock || !p.copy_src ||
      !p.copy_dst || !p.error || !p.scratch || !p.counters) {
    return invalid_argument("page_residency: missing arrays (the GPU op needs scratch and counters)");
  }
  if (p.slots_per_row <= 0 || p.num_cache_slots % p.slots_per_row != 0 ||
      p.max_copies < p.num_cache_slots || p.bucket_ticks <= 0 || p.num_buckets <= 0 ||
      p.max_selected > kMaxListed) {
    return invalid_argument("page_residency: {} slots per row, {} slots, {} copies, {} ticks, {} "
                            "buckets, {} selected (at most {})",
                            p.slots_per_row, p.num_cache_slots, p.max_copies, p.bucket_ticks,
                            p.num_buckets, p.max_selected, kMaxListed);
  }
  residency_kernel<<<p.num_seqs, kThreads, 0, stream>>>(p);
  return launch_status("page_residency");
}

Status page_residency_reset(const ResidencyResetParams& p, cudaStream_t stream) {
  if (!p.page_slot || !p.slot_page || !p.slot_stamp || !p.row_clock || p.slots_per_row <= 0 ||
      p.row < 0) {
    return invalid_argument("page_residency_reset: bad params");
  }
  reset_kernel<<<1, kThreads, 0, stream>>>(p);
  return launch_status("page_residency_reset");
}

}  // namespace ls::kernels::cuda
