// Residency lookup and replacement of the device page cache on the GPU: the rule of
// kernels/page_residency.h, bit for bit the CPU op's result (kernels/cpu/page_residency.cpp).
// One thread block (1024 threads) per sequence owns its row's partition, so blocks never share a
// slot (no global atomics but the copy-list reservation). Within a block:
//  1. per kv head, the mandatory pages in the CPU's order: the listed pages deduplicated in
//     parallel (an entry is kept when it lies in the context and exceeds every earlier entry that
//     does: a block-wide max scan, then a compaction scan), then the tail or every page; hits are
//     stamped, misses are placed in order by a block-wide scan into `scratch` (the row's range);
//  2. victims: each evictable slot gets a key whose order is the replacement order (free 0;
//     bucketed: 1 + (num_buckets - 1 - bucket); plain: the stamp). The threshold key K is the
//     smallest with count(key <= K) >= misses. Bucketed LRU: one pass over the partition builds
//     one key histogram per warp (each warp owns a contiguous segment of the slots), and K, the
//     number of keys below it and each warp's counts come from the histograms (Spin's
//     histogram-threshold idea: no sort, one read of the partition). Plain LRU (the comparison
//     rule; its keys are unbounded) finds K by a binary search over block-wide counts and then
//     counts per warp;
//  3. the victims are the slots with a key below K plus the first (misses - below) with key K in
//     slot order; each warp walks its segment once more (ballots number them in slot order, and
//     the walk stops at the warp's last victim): victim i takes miss i, updates the tables and
//     writes copy entry base + i (base reserved with one atomicAdd on the count, which the
//     launcher zeroes first).
// Step 2 and 3 read the partition twice (bucketed LRU) instead of once per binary-search round:
// at 32K slots a row and a few dozen misses a layer, the scans are what the op costs, and they
// run in every layer of every decode step.
// Nothing is read back on the host: one memset and one launch, both capturable in a CUDA graph.

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/page_residency.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 32, "the block scans below scan the warp totals in one warp");
constexpr int kMaxListed = 2048;    // selection entries one head may list (shared memory)
constexpr int kMaxHistBuckets = 64;  // bucketed LRU with at most this many buckets: histograms

__device__ __forceinline__ int scan_op(bool is_max, int a, int b) {
  return is_max ? max(a, b) : a + b;
}

// Exclusive scan of `v` over the block (sum, or max with identity -1 when kMax); *total gets the
// reduction of every value. Every thread must call it.
template <bool kMax>
__device__ int block_exclusive_scan(int v, int* total, int* smem /* [kWarps + 1] */) {
  constexpr int kIdentity = kMax ? -1 : 0;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x = scan_op(kMax, x, y);
  }
  int before = __shfl_up_sync(0xffffffffu, x, 1);  // within the warp, exclusive
  if (lane == 0) before = kIdentity;
  if (lane == 31) smem[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = smem[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w = scan_op(kMax, w, y);
    }
    int wb = __shfl_up_sync(0xffffffffu, w, 1);
    if (lane == 0) wb = kIdentity;
    __syncwarp();
    smem[lane] = wb;
    if (lane == 31) smem[kWarps] = w;
  }
  __syncthreads();
  const int result = scan_op(kMax, smem[warp], before);
  *total = smem[kWarps];
  __syncthreads();
  return result;
}

// Exclusive sum over the 32 lanes of warp 0 (the per-warp values of a block); *total the sum.
__device__ __forceinline__ int warp_exclusive_sum(int v, int* total) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  *total = __shfl_sync(0xffffffffu, x, 31);
  return x - v;
}

__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ int victim_key(const PageResidencyParams& p, int32_t slot, int32_t now) {
  // -1: not evictable (holds a page needed in this call). Both loads are issued together.
  const int32_t page = p.slot_page[slot];
  const int32_t stamp = p.slot_stamp[slot];
  if (page < 0) return 0;
  if (stamp == now) return -1;
  if (p.replacement == Replacement::kPlainLru) return stamp < 1 ? 1 : stamp;
  const int32_t bucket = min(p.num_buckets - 1, (now - stamp) / p.bucket_ticks);
  return 1 + (p.num_buckets - 1 - bucket);
}

__global__ void __launch_bounds__(kThreads) residency_kernel(const PageResidencyParams p) {
  __shared__ int scan_smem[kWarps + 1];
  __shared__ int32_t listed[kMaxListed];
  __shared__ int hist[kWarps][kMaxHistBuckets + 1];  // bucketed LRU: each warp's key counts
  __shared__ int s_below[kWarps], s_equal[kWarps];   // each warp's keys below / at the threshold
  __shared__ int s_eq_before[kWarps], s_victims_before[kWarps], s_victims[kWarps];
  __shared__ int32_t s_now, s_threshold, s_take_eq, s_fail, s_base;
  const int s = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int32_t row = p.cache_rows[s];
  // The row's partition: even, or sized per request by the plan's offsets.
  const int32_t begin = p.row_slots != nullptr ? p.row_slots[2 * row] : row * p.slots_per_row;
  const int32_t end = p.row_slots != nullptr ? p.row_slots[2 * row + 1] : begin + p.slots_per_row;
  const int32_t n = end - begin;
  if (tid == 0) s_now = ++p.row_clock[row];
  __syncthreads();
  const int32_t now = s_now;
  const int32_t pt = p.page_tokens;
  const int32_t kv_len = p.kv_lens[s];
  const int32_t num_pages = kv_len > 0 && pt > 0 ? (kv_len - 1) / pt + 1 : 0;
  const int32_t* table = p.retrieval_blocks + static_cast<int64_t>(s) * p.retrieval_blocks_stride;
  const int64_t num_home = static_cast<int64_t>(p.num_blocks) * p.heads_per_block;
  const int32_t sel_row =
      p.selected_rows && p.selected && p.num_selected ? p.selected_rows[s] : -1;
  int32_t* misses = p.scratch + begin;
  int num_misses = 0;
  int hits = 0, reused = 0;  // reused: hits on a page stamped within the last bucket

  for (int32_t g = 0; g < p.num_kv_heads; ++g) {
    const int32_t mode = p.head_mode[g];
    const int32_t hslot = p.head_slot[g];
    const bool reads = (mode == static_cast<int32_t>(HeadMode::kCausal) ||
                        mode == static_cast<int32_t>(HeadMode::kSelected)) &&
                       num_pages > 0 && hslot >= 0 && hslot < p.heads_per_block;
    if (!reads) continue;  // uniform over the block
    // The listed pages: entry j is kept when 0 <= j < num_pages and j exceeds every earlier
    // entry in that range (the CPU's "skip j <= the last kept one", whose last kept entry is
    // the running maximum of the in-range ones).
    int32_t nlisted = 0, run_max = -1;
    if (mode == static_cast<int32_t>(HeadMode::kSelected) && sel_row >= 0) {
      const int64_t base = static_cast<int64_t>(sel_row) * p.num_kv_heads + g;
      const int32_t count = min(p.num_selected[base], p.max_selected);
      const int32_t* list = p.selected + base * p.max_selected;
      for (int32_t c0 = 0; c0 < count; c0 += kThreads) {  // count is uniform
        const int32_t i = c0 + tid;
        const int32_t j = i < count ? list[i] : -1;
        const bool valid = i < count && j >= 0 && j < num_pages;
        int chunk_max = -1;
        const int earlier = block_exclusive_scan<true>(valid ? j : -1, &chunk_max, scan_smem);
        const int keep = valid && j > max(run_max, earlier) ? 1 : 0;
        int kept = 0;
        const int pos = nlisted + block_exclusive_scan<false>(keep, &kept, scan_smem);
        if (keep && pos < kMaxListed) listed[pos] = j;
        nlisted += kept;
        run_max = max(run_max, chunk_max);
      }
      __syncthreads();  // `listed` written before it is read
    }
    // The launcher refuses max_selected > kMaxListed, so nlisted <= kMaxListed.
    nlisted = min(nlisted, kMaxListed);
    const int32_t next = run_max + 1;
    const int32_t total = nlisted + max(0, num_pages - next);
    for (int32_t c0 = 0; c0 < total; c0 += kThreads) {
      const int32_t i = c0 + tid;
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
      const int pos = block_exclusive_scan<false>(miss, &chunk_misses, scan_smem);
      if (miss && num_misses + pos < n) misses[num_misses + pos] = static_cast<int32_t>(page);
      num_misses += chunk_misses;
    }
    __syncthreads();  // `listed` is rewritten for the next head
  }

  int block_hits = 0;
  block_exclusive_scan<false>(hits, &block_hits, scan_smem);  // also: every stamp is written
  if (tid == 0 && block_hits != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p.counters),
              static_cast<unsigned long long>(block_hits));
  }
  // The row's selection-locality counters (working-set scheduling): num_misses is uniform.
  auto* row_counters =
      p.row_counters != nullptr
          ? reinterpret_cast<unsigned long long*>(p.row_counters +
                                                  static_cast<int64_t>(row) * kRowCounters)
          : nullptr;
  if (row_counters != nullptr) {
    int block_reused = 0;
    block_exclusive_scan<false>(reused, &block_reused, scan_smem);
    if (tid == 0) {
      if (block_hits != 0) atomicAdd(row_counters + kRowHits, static_cast<unsigned long long>(block_hits));
      if (block_reused != 0) atomicAdd(row_counters + kRowReused, static_cast<unsigned long long>(block_reused));
      if (block_hits + num_misses != 0) {
        atomicAdd(row_counters + kRowMandatory,
                  static_cast<unsigned long long>(block_hits + num_misses));
      }
    }
  }
  const int m = num_misses;
  if (m == 0) return;
  if (m > n) {
    if (tid == 0) *p.error = kResidencyOverflow;
    return;
  }

  // Each warp's contiguous segment of the partition.
  const int32_t seg = (n + kWarps - 1) / kWarps;
  const int32_t w_begin = begin + min(n, warp * seg);
  const int32_t w_end = begin + min(n, (warp + 1) * seg);
  const unsigned lanes_below = (1u << lane) - 1u;

  const bool histogram =
      p.replacement == Replacement::kBucketedLru && p.num_buckets <= kMaxHistBuckets;
  if (histogram) {
    const int num_keys = p.num_buckets + 1;  // 0 (free) .. num_buckets (newest bucket)
    for (int i = tid; i < kWarps * (kMaxHistBuckets + 1); i += kThreads) (&hist[0][0])[i] = 0;
    __syncthreads();
    for (int32_t b = w_begin; b < w_end; b += 32) {  // warp-uniform
      const int32_t slot = b + lane;
      const int key = slot < w_end ? victim_key(p, slot, now) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, key);
      if (key >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[warp][key], __popc(peers));
    }
    __syncthreads();
    if (warp == 0) {  // the threshold: walk the keys from the oldest, 32 at a time
      int below = 0, threshold = -1;
      for (int k0 = 0; k0 < num_keys && threshold < 0; k0 += 32) {
        const int k = k0 + lane;
        int c = 0;
        if (k < num_keys) {
          for (int w = 0; w < kWarps; ++w) c += hist[w][k];
        }
        int chunk = 0;
        const int before = below + warp_exclusive_sum(c, &chunk);
        const unsigned reach = __ballot_sync(0xffffffffu, k < num_keys && before + c >= m);
        if (reach != 0) {
          const int first = __ffs(reach) - 1;
          threshold = k0 + first;
          below = __shfl_sync(0xffffffffu, before, first);
        } else {
          below += chunk;
        }
      }
      if (lane == 0) {
        s_fail = threshold < 0 ? 1 : 0;
        s_threshold = threshold;
        s_take_eq = m - below;
      }
    }
    __syncthreads();
    if (s_fail) {
      if (tid == 0) *p.error = kResidencyOverflow;
      return;
    }
    const int th = s_threshold;
    int below = 0;
    for (int k = lane; k < th; k += 32) below += hist[warp][k];
    below = warp_sum(below);
    if (lane == 0) {
      s_below[warp] = below;
      s_equal[warp] = hist[warp][th];
    }
  } else {
    // Threshold key: smallest K with count(0 <= key <= K) >= m, by binary search.
    const int max_key = p.replacement == Replacement::kPlainLru ? max(now, 1) : p.num_buckets;
    auto count_le = [&](int k) {
      int c = 0;
      for (int32_t slot = begin + tid; slot < end; slot += kThreads) {
        const int key = victim_key(p, slot, now);
        c += key >= 0 && key <= k ? 1 : 0;
      }
      int total = 0;
      block_exclusive_scan<false>(c, &total, scan_smem);
      return total;
    };
    if (count_le(max_key) < m) {
      if (tid == 0) *p.error = kResidencyOverflow;
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
    const int th = lo;
    const int above = th > 0 ? count_le(th - 1) : 0;
    if (tid == 0) {
      s_threshold = th;
      s_take_eq = m - above;
    }
    int below = 0, equal = 0;
    for (int32_t b = w_begin; b < w_end; b += 32) {
      const int32_t slot = b + lane;
      const int key = slot < w_end ? victim_key(p, slot, now) : -1;
      below += key >= 0 && key < th ? 1 : 0;
      equal += key == th ? 1 : 0;
    }
    below = warp_sum(below);
    equal = warp_sum(equal);
    if (lane == 0) {
      s_below[warp] = below;
      s_equal[warp] = equal;
    }
  }
  __syncthreads();
  if (warp == 0) {  // per warp: keys at the threshold before it, its victims, victims before it
    const int take_eq = s_take_eq;
    int eq_total = 0, v_total = 0;
    const int eq_before = warp_exclusive_sum(s_equal[lane], &eq_total);
    const int v = s_below[lane] + min(max(take_eq - eq_before, 0), s_equal[lane]);
    const int v_before = warp_exclusive_sum(v, &v_total);
    s_eq_before[lane] = eq_before;
    s_victims_before[lane] = v_before;
    s_victims[lane] = v;
    if (lane == 0) {
      s_base = atomicAdd(p.copy_count, m);
      if (row_counters != nullptr) atomicAdd(row_counters + kRowMisses, static_cast<unsigned long long>(m));
      atomicAdd(reinterpret_cast<unsigned long long*>(p.counters) + 1,
                static_cast<unsigned long long>(m));
    }
  }
  __syncthreads();
  const int th = s_threshold, take_eq = s_take_eq, base = s_base;
  int eq_run = s_eq_before[warp], v_run = s_victims_before[warp];
  int left = s_victims[warp];
  for (int32_t b = w_begin; b < w_end && left > 0; b += 32) {  // warp-uniform
    const int32_t slot = b + lane;
    const int key = slot < w_end ? victim_key(p, slot, now) : -1;
    const unsigned eq_mask = __ballot_sync(0xffffffffu, key == th);
    const int eq_rank = eq_run + __popc(eq_mask & lanes_below);
    const bool victim = key >= 0 && (key < th || (key == th && eq_rank < take_eq));
    const unsigned v_mask = __ballot_sync(0xffffffffu, victim);
    if (victim) {
      const int idx = v_run + __popc(v_mask & lanes_below);
      const int32_t page = misses[idx];
      const int32_t old = p.slot_page[slot];
      if (old >= 0 && p.page_slot[old] == slot) p.page_slot[old] = -1;
      p.slot_page[slot] = page;
      p.page_slot[page] = slot;
      p.slot_stamp[slot] = now;
      p.copy_src[base + idx] = page;
      p.copy_dst[base + idx] = slot;
    }
    eq_run += __popc(eq_mask);
    v_run += __popc(v_mask);
    left -= __popc(v_mask);
  }
}

constexpr int kResetThreads = 256;

__global__ void __launch_bounds__(kResetThreads) reset_kernel(const ResidencyResetParams p) {
  const int32_t begin = p.num_slots > 0 ? p.first_slot : p.row * p.slots_per_row;
  const int32_t end = begin + (p.num_slots > 0 ? p.num_slots : p.slots_per_row);
  for (int32_t slot = begin + static_cast<int32_t>(threadIdx.x); slot < end;
       slot += kResetThreads) {
    const int32_t page = p.slot_page[slot];
    if (page >= 0 && p.page_slot[page] == slot) p.page_slot[page] = -1;
    p.slot_page[slot] = -1;
    p.slot_stamp[slot] = 0;
  }
  if (threadIdx.x == 0 && p.reset_clock) p.row_clock[p.row] = 0;
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
      p.row < 0 || p.first_slot < 0 || p.num_slots < 0) {
    return invalid_argument("page_residency_reset: bad params");
  }
  reset_kernel<<<1, kResetThreads, 0, stream>>>(p);
  return launch_status("page_residency_reset");
}

}  // namespace ls::kernels::cuda
