// Quest / LServe page selection on the GPU, same contract as kernels/cpu/page_select.
//  1. bounds_kernel: a few threads per logical page (16-byte loads of its kmax / kmin rows, all
//     of a thread's in flight at once) compute, for every query head h of the group,
//     bound_h(lp) = sum_d max(q_h[d] kmax[lp][d], q_h[d] kmin[lp][d]); the lanes of a physical page
//     max-reduce them into pmax[item][h][page] = max over the page's logical pages (holding
//     tokens) of bound_h. Many blocks per (sequence, kv head), so at batch 1 a long context is
//     still read by every SM; about two blocks per resident slot in all, each looping over pages,
//     so every block's fixed start (metadata, query, first table entries: one round trip each,
//     the first summaries prefetched meanwhile) is paid once and a batch is one or two waves.
//     Registers are kept to 8 blocks of 128 threads per SM (heads per pass templated).
//     bf16 / f16 summaries scored by queries of their own type at head_dim 64 / 128 take
//     bounds_mma_kernel instead (page_select_mma.cuh: the same bounds as dot products on the
//     tensor cores, bound by the summaries' bytes rather than four f32 instructions per element
//     and head).
//  2. choose_kernel: one block per (sequence, kv head): best_h = max_page pmax[h][page] (the max
//     over all logical pages), the group score of each physical page
//     max_h (pmax[h][page] - best_h) as an order-preserving u32 key, then the top (k - 1) pages
//     among all but the last by an exact radix select on the keys (8-bit digits from the top,
//     one barrier per pass, stopping once the threshold's bin is taken whole; ties: the lower
//     page first, as the CPU comparator) and one block-wide prefix sum that places every chosen
//     page, the last page appended, ascending.
// Both kernels are programmatic dependent launches: each starts while the previous kernel drains
// and waits (griddepcontrol.wait) before touching what that kernel may write or read.
// Reducing over the logical pages before subtracting best_h gives exactly the CPU's
// max_lp (bound_h(lp) - best_h): f32 subtraction of a constant is monotone, NaN bounds are
// ignored by both maxes (fmaxf / std::max with -inf first), and every NaN difference (inf - inf)
// ranks -inf in both. Zero scores are canonicalised to +0 so -0 and +0 tie as they do under the
// CPU's float comparison; NaN scores rank last (-inf).

#include <algorithm>
#include <bit>
#include <cfloat>

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/paged_ops.h"
#include "kernels/cuda/page_select_common.cuh"
#include "kernels/cuda/page_select_mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"

namespace ls::kernels::cuda {

namespace {

using select_detail::item_info;
using select_detail::ItemInfo;
using select_detail::kMaxGroup;
using select_detail::kMaxHeadDim;
using select_detail::order_key;
using select_detail::q_at;

constexpr int kBoundsThreads = 128;
constexpr int kBoundsVecs = 2;  // 16-byte vectors of each summary a bounds thread loads at once
constexpr int kChooseThreads = 512;
constexpr int kChooseWarps = kChooseThreads / 32;
// Pages whose keys choose_kernel keeps in shared memory (with its static arrays, under the 48 KB
// default).
constexpr int kSmemKeysMax = 10 * 1024;
static_assert(kChooseWarps <= 32, "choose_kernel reduces the warps' values with one warp");
static_assert(kChooseThreads >= 256, "choose_kernel clears the 256 radix bins one per thread");

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// Element i of a 16-byte vector of kVecElems<T> elements (as loaded) as f32.
template <typename T>
__device__ __forceinline__ float vec_elem(const uint4& raw, int i) {
  return to_f32(reinterpret_cast<const T*>(&raw)[i]);
}

// Adds sum_{e in [e0, e0 + V)} max(q_h[e] kx[e], q_h[e] kn[e]) to acc[hh] for the heads
// h0 + hh, hh < nh, from one 16-byte vector of each summary (q rows: 16-byte aligned in q_smem,
// e0 a multiple of V).
template <typename Tm, int kHeads>
__device__ __forceinline__ void vec_bound_terms(const float* q_smem, int d, int h0, int nh, int e0,
                                                const uint4& rx, const uint4& rn,
                                                float (&acc)[kHeads]) {
#pragma unroll
  for (int hh = 0; hh < kHeads; ++hh) {
    if (hh < nh) {
#pragma unroll
      for (int j4 = 0; j4 < kVecElems<Tm>; j4 += 4) {
        const float4 qv = *reinterpret_cast<const float4*>(q_smem + (h0 + hh) * d + e0 + j4);
        const float qs[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float kx = vec_elem<Tm>(rx, j4 + j), kn = vec_elem<Tm>(rn, j4 + j);
          acc[hh] += fmaxf(qs[j] * kx, qs[j] * kn);
        }
      }
    }
  }
}

// Grid: (blocks per item, items); a block takes pages_per_block physical pages at a time, then
// the grid's next ones (grid stride), so the item's metadata and query are loaded once per block
// and the next block-table entry while the current page computes. Threads come in groups of
// parts * lanes per physical page (both powers of two, their product dividing 32): the `parts`
// threads of a logical page each sum every parts-th vector of head_dim (so a thread has at most
// kBoundsVecs vectors of each array to load: one round trip), and the `lanes` groups of a physical
// page take its logical pages i * per .. i * per + per - 1 (lanes * per == logical_per_page).
// Partial sums meet by xor shuffles over the parts, page maxima over the lanes. kHeads: the query
// heads whose bounds a thread accumulates at once (the group rounded up to a power of two, at most
// 8: registers, hence blocks per SM, follow it). kVec: 16-byte loads of the summaries (head_dim a
// multiple of the vector, both arrays 16-byte aligned); else scalar loads (parts == 1).
// kListed (two-level refinement, page_select_two_level.cu): the item's pages are those of the
// groups list[item * list_stride + i], i < count[item], of group_pages pages each, visited in
// that order; everything else (the arithmetic above all, so the bounds are bit-identical) is the
// same.
struct PageList {
  const int32_t* list = nullptr;   // [items, stride] group indices
  const int32_t* count = nullptr;  // [items]
  int32_t stride = 0;
  int32_t group_pages = 0;
};

template <typename Tm, int kHeads, bool kVec, bool kListed>
__global__ void __launch_bounds__(kBoundsThreads, kHeads <= 4 ? 8 : 6)
    bounds_kernel(const PageSelectParams p, float* pmax, int32_t max_pages_ws, int lanes_log2,
                  int32_t per, int parts_log2, PageList pl) {
  extern __shared__ float4 q_smem4[];  // [group, head_dim] f32
  float* q_smem = reinterpret_cast<float*>(q_smem4);
  pdl_wait();  // pmax may be the previous kernel's scratch; q its output
  const int32_t item = static_cast<int32_t>(blockIdx.y);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const int tid = static_cast<int>(threadIdx.x);
  const int parts = 1 << parts_log2, page_log2 = lanes_log2 + parts_log2;
  const int32_t per_page = 1 << page_log2;  // threads per physical page
  const int32_t pages_per_block = kBoundsThreads >> page_log2;
  const int32_t grid_pages = static_cast<int32_t>(gridDim.x) * pages_per_block;
  const int32_t part = tid & (parts - 1);
  const int32_t lane_lp = (tid >> parts_log2) & ((1 << lanes_log2) - 1);
  int32_t page0 = static_cast<int32_t>(blockIdx.x) * pages_per_block;
  int32_t vpage = page0 + (tid >> page_log2);  // this thread's page in visiting order
  const int32_t* table = p.retrieval_blocks + static_cast<int64_t>(s) * p.retrieval_blocks_stride;
  int32_t page = vpage;  // the physical page (num_pages when vpage lists none)
  int32_t block = -1;
  int32_t span = 0;  // pages in visiting order
  const int32_t* listed = nullptr;
  ItemInfo it;
  const auto physical = [&](int32_t v) {
    if constexpr (kListed) {
      if (v >= span) return it.num_pages;
      const int32_t pg = listed[v / pl.group_pages] * pl.group_pages + v % pl.group_pages;
      return min(pg, it.num_pages);
    } else {
      return v;
    }
  };
  if constexpr (kListed) {
    it = item_info(p, true, s, g);
    listed = pl.list + static_cast<int64_t>(item) * pl.stride;
    span = it.selected ? pl.count[item] * pl.group_pages : 0;
    if (!it.selected || page0 >= span) return;  // uniform over the block
    page = physical(vpage);
    block = page < it.num_pages ? table[page] : -1;
  } else {
    // Its block-table entry, loaded together with the item's metadata (one round trip; `page`
    // is inside the table row even when past the item's pages).
    block = page < p.retrieval_blocks_stride ? table[page] : -1;
    it = item_info(p, true, s, g);
    span = it.num_pages;
    if (!it.selected || page0 >= it.num_pages) return;  // uniform over the block
  }
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int d = p.head_dim;
  const int32_t lpp = p.summaries.logical_per_page;
  const auto row_of = [&](int32_t blk, int32_t lp_in_page) {
    return ((static_cast<int64_t>(blk) * p.heads_per_block + it.slot) * lpp + lp_in_page) * d;
  };
  // The first page's summaries start towards L2 while the query is staged (its load and the
  // summaries' both wait on the metadata round trip).
  if (page < it.num_pages && block >= 0) {
    const int64_t row_bytes = static_cast<int64_t>(d) * sizeof(Tm);
    for (int32_t k = 0; k < per; ++k) {
      const int32_t lp_in_page = lane_lp * per + k;
      if (page * lpp + lp_in_page >= it.num_logical) break;
      const int64_t row = row_of(block, lp_in_page);
      for (int64_t off = int64_t{part} * 128; off < row_bytes; off += int64_t{parts} * 128) {
        prefetch_l2(static_cast<const char*>(p.summaries.kmax) + row * sizeof(Tm) + off);
        prefetch_l2(static_cast<const char*>(p.summaries.kmin) + row * sizeof(Tm) + off);
      }
    }
  }
  const int64_t q_row = (it.q_token * p.num_q_heads + static_cast<int64_t>(g) * group) * d;
  for (int i = tid; i < group * d; i += kBoundsThreads) q_smem[i] = q_at(p.q, p.q_dtype, q_row + i);
  __syncthreads();

  constexpr int V = kVec ? kVecElems<Tm> : 1;
  float* out = pmax + static_cast<int64_t>(item) * group * max_pages_ws;
  for (; page0 < span; page0 += grid_pages, vpage += grid_pages) {  // uniform
    page = physical(vpage);
    const int32_t next_page = physical(vpage + grid_pages);
    const int32_t next_block = next_page < it.num_pages ? table[next_page] : -1;
    for (int h0 = 0; h0 < group; h0 += kHeads) {
      const int nh = min(kHeads, group - h0);
      float best[kHeads];
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) best[hh] = -INFINITY;
      for (int32_t k = 0; k < per; ++k) {  // uniform trip count: every lane reaches the shuffles
        const int32_t lp_in_page = lane_lp * per + k;
        const int32_t lp = page * lpp + lp_in_page;
        // Holds a token and has a block (else the CPU's bound is -inf: no score). The same for
        // every part of the logical page.
        const bool scored = page < it.num_pages && lp < it.num_logical && block >= 0;
        float acc[kHeads];
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) acc[hh] = 0.0f;
        if (scored) {
          const int64_t row = row_of(block, lp_in_page);
          const Tm* kmax = static_cast<const Tm*>(p.summaries.kmax) + row;
          const Tm* kmin = static_cast<const Tm*>(p.summaries.kmin) + row;
          if constexpr (kVec) {
            // Part `part` takes vectors part, part + parts, ... (interleaved, so the parts read
            // different shared-memory banks of q), kBoundsVecs of each array in flight per
            // step, kept as loaded until used.
            constexpr int kUnroll = kBoundsVecs;
            const int nvec = d / V;
#pragma unroll 1
            for (int v0 = part; v0 < nvec; v0 += kUnroll * parts) {
              uint4 rx[kUnroll], rn[kUnroll];
#pragma unroll
              for (int u = 0; u < kUnroll; ++u) {
                const int v = v0 + u * parts;
                if (v < nvec) {
                  rx[u] = *reinterpret_cast<const uint4*>(kmax + v * V);
                  rn[u] = *reinterpret_cast<const uint4*>(kmin + v * V);
                }
              }
#pragma unroll
              for (int u = 0; u < kUnroll; ++u) {
                const int v = v0 + u * parts;
                if (v < nvec)
                  vec_bound_terms<Tm, kHeads>(q_smem, d, h0, nh, v * V, rx[u], rn[u], acc);
              }
            }
          } else {
            for (int e = 0; e < d; ++e) {  // parts == 1
              const float kx = to_f32(kmax[e]), kn = to_f32(kmin[e]);
#pragma unroll
              for (int hh = 0; hh < kHeads; ++hh) {
                if (hh < nh) {
                  const float qv = q_smem[(h0 + hh) * d + e];
                  acc[hh] += fmaxf(qv * kx, qv * kn);
                }
              }
            }
          }
        }
        // Sum over the parts of the logical page (aligned groups of `parts` threads; the scalar
        // path has one part).
        for (int o = 1; kVec && o < parts; o <<= 1) {
#pragma unroll
          for (int hh = 0; hh < kHeads; ++hh) acc[hh] += __shfl_xor_sync(0xffffffffu, acc[hh], o);
        }
        if (scored) {
#pragma unroll
          for (int hh = 0; hh < kHeads; ++hh) best[hh] = fmaxf(best[hh], acc[hh]);
        }
      }
      // Max over the lanes of one physical page (aligned groups of parts * lanes threads).
      for (int o = parts; o < per_page; o <<= 1) {
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) {
          best[hh] = fmaxf(best[hh], __shfl_xor_sync(0xffffffffu, best[hh], o));
        }
      }
      if (page < it.num_pages && (tid & (per_page - 1)) == 0) {
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) {
          if (hh < nh) out[static_cast<int64_t>(h0 + hh) * max_pages_ws + page] = best[hh];
        }
      }
    }
    block = next_block;
  }
  pdl_launch_dependents();  // choose_kernel may start; it waits for this grid to finish
}

// Inclusive prefix sum over the warp's lanes.
__device__ __forceinline__ int warp_inclusive_sum(int x) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += up;
  }
  return x;
}

// Dynamic shared memory: [max_pages_ws] u32 page keys when they fit (keys_in_smem), else none
// (the keys live in the workspace, key_ws [items, max_pages_ws]).
__global__ void __launch_bounds__(kChooseThreads)
    choose_kernel(const PageSelectParams p, bool geometry_ok, const float* pmax, uint32_t* key_ws,
                  int32_t max_pages_ws, bool keys_in_smem) {
  extern __shared__ uint32_t key_smem[];
  __shared__ float red[kMaxGroup][kChooseWarps];
  __shared__ float best[kMaxGroup];
  __shared__ alignas(16) unsigned hist[3][256];
  __shared__ int warp_counts[2][kChooseWarps];

  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  // With geometry_ok, bounds_kernel ran just before and every block of it had passed its own
  // wait when this grid started (launch_dependents follows it), so the metadata, which it does
  // not write, is read before waiting; otherwise the previous kernel is the caller's.
  ItemInfo it;
  if (geometry_ok) it = item_info(p, geometry_ok, s, g);
  pdl_wait();
  if (!geometry_ok) it = item_info(p, geometry_ok, s, g);
  if (it.row < 0) return;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  int32_t* sel = p.selected + (static_cast<int64_t>(it.row) * p.num_kv_heads + g) * p.max_selected;
  int32_t* num_sel = p.num_selected + static_cast<int64_t>(it.row) * p.num_kv_heads + g;
  float* scores_out =
      p.page_scores ? p.page_scores + (static_cast<int64_t>(s) * p.num_kv_heads + g) * p.max_pages
                    : nullptr;
  if (!it.selected) {  // cleared, as kernels/cpu's clear_head
    for (int i = tid; i < p.max_selected; i += kChooseThreads) sel[i] = -1;
    if (tid == 0) *num_sel = 0;
    if (scores_out) {
      for (int i = tid; i < p.max_pages; i += kChooseThreads) scores_out[i] = -INFINITY;
    }
    return;
  }

  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t P = it.num_pages;
  // [group][max_pages_ws], max_pages_ws a multiple of 4 and the item 16-byte aligned: a thread
  // takes four consecutive pages per float4 (entries at pages >= P are not written this call).
  const float* b = pmax + static_cast<int64_t>(item) * group * max_pages_ws;
  const auto quad = [&](int32_t h, int32_t j) {
    return *reinterpret_cast<const float4*>(b + static_cast<int64_t>(h) * max_pages_ws + j);
  };
  // best_h = max over pages of pmax[h][page] (= max over the logical pages holding tokens):
  // per-warp maxima of every head, then one warp per head. Eight heads' loads in flight at once.
  for (int h0 = 0; h0 < group; h0 += 8) {
    float m[8];
#pragma unroll
    for (int hh = 0; hh < 8; ++hh) m[hh] = -INFINITY;
    for (int32_t j = 4 * tid; j < P; j += 4 * kChooseThreads) {
      float4 v[8];
#pragma unroll
      for (int hh = 0; hh < 8; ++hh) {
        if (h0 + hh < group) v[hh] = quad(h0 + hh, j);
      }
#pragma unroll
      for (int hh = 0; hh < 8; ++hh) {
        if (h0 + hh < group) {
          m[hh] = fmaxf(m[hh], v[hh].x);
          if (j + 1 < P) m[hh] = fmaxf(m[hh], v[hh].y);
          if (j + 2 < P) m[hh] = fmaxf(m[hh], v[hh].z);
          if (j + 3 < P) m[hh] = fmaxf(m[hh], v[hh].w);
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < 8; ++hh) {
      if (h0 + hh < group) {
        const float mm = warp_max(m[hh]);
        if (lane == 0) red[h0 + hh][warp] = mm;
      }
    }
  }
  if (tid < 256) hist[0][tid] = 0;  // the first radix pass's (see below)
  __syncthreads();
  for (int h = warp; h < group; h += kChooseWarps) {
    const float mm = warp_max(lane < kChooseWarps ? red[h][lane] : -INFINITY);
    if (lane == 0) best[h] = mm;
  }
  __syncthreads();

  // Page scores max_h (pmax[h][page] - best_h) as order keys (pmax again: L1 hits).
  uint32_t* keys = keys_in_smem ? key_smem : key_ws + static_cast<int64_t>(item) * max_pages_ws;
  for (int32_t j = 4 * tid; j < P; j += 4 * kChooseThreads) {
    float sc[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int h = 0; h < group; ++h) {
      const float4 v = quad(h, j);
      const float vs[4] = {v.x, v.y, v.z, v.w};
      const float bh = best[h];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float d = vs[i] - bh;
        if (d != d) d = -INFINITY;  // NaN ranks last
        sc[i] = fmaxf(sc[i], d);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (j + i < P) {
        const float score = sc[i] + 0.0f;  // -0 -> +0
        // A kept page 0 ranks first (the CPU's ranking_score); its reported score stays.
        keys[j + i] = order_key(p.keep_first_page != 0 && j + i == 0 ? INFINITY : score);
        if (scores_out && j + i < p.max_pages) scores_out[j + i] = score;
      }
    }
  }
  if (scores_out) {
    for (int32_t i = P + tid; i < p.max_pages; i += kChooseThreads) scores_out[i] = -INFINITY;
  }
  __syncthreads();  // keys visible to the whole block

  int32_t count = 0;
  if (P <= p.budget_pages) {
    count = min(P, p.max_selected);
    for (int32_t i = tid; i < count; i += kChooseThreads) sel[i] = i;
  } else {
    int32_t k = min(max(3, p.budget_pages), P);
    k = min(k, p.max_selected);
    const int32_t candidates = P - 1;
    const int32_t take = max(0, min(k - 1, candidates));
    // (take == candidates needs no special case: the threshold is then the smallest key and
    // every candidate is chosen. A separate sel[i] = i loop here was miscompiled by CUDA 13.0's
    // ptxas on sm_90a: it ran for items that took the radix path and wrote past the item.)
    if (take > 0) {
      // Radix select, 8 bits per pass from the top, on the candidates' keys: the top bits
      // `prefix` (under `mask`) of the take-th largest key and how many keys with those top bits
      // are still needed after all keys above them (`remaining`). A pass stops the select early
      // when the digit's bin holds exactly `remaining` keys: all of them are chosen. Histogram
      // adds are aggregated per warp over lanes with the same digit (scores share their top bits,
      // so per-lane shared atomics would serialise on a few bins). Every warp then reads the
      // whole histogram and finds the digit itself (the same one), so a pass has one barrier:
      // pass i counts into hist[i % 3] and clears hist[(i + 1) % 3], last read by pass i - 2's
      // search, which every warp finished before pass i - 1's barrier.
      uint32_t prefix = 0, mask = 0;
      int remaining = take;
      for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        unsigned* h = hist[pass % 3];
        if (tid < 256) hist[(pass + 1) % 3][tid] = 0;
        for (int32_t c0 = 0; c0 < candidates; c0 += kChooseThreads) {  // uniform trip count
          const int32_t j = c0 + tid;
          const uint32_t key = j < candidates ? keys[j] : 0u;
          const bool counted = j < candidates && (key & mask) == prefix;
          if (__any_sync(0xffffffffu, counted)) {
            const uint32_t digit = counted ? (key >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, digit);
            if (counted && lane == __ffs(peers) - 1) atomicAdd(&h[digit], __popc(peers));
          }
        }
        __syncthreads();
        // Lane l holds the bins of digits 255 - 8l down to 248 - 8l; the lane whose range holds
        // the remaining-th largest key (counting from digit 255) finds its digit.
        const uint4 hi = reinterpret_cast<const uint4*>(h)[63 - 2 * lane];
        const uint4 lo = reinterpret_cast<const uint4*>(h)[62 - 2 * lane];
        const int c[8] = {static_cast<int>(hi.w), static_cast<int>(hi.z), static_cast<int>(hi.y),
                          static_cast<int>(hi.x), static_cast<int>(lo.w), static_cast<int>(lo.z),
                          static_cast<int>(lo.y), static_cast<int>(lo.x)};
        int lane_total = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) lane_total += c[i];
        const int incl = warp_inclusive_sum(lane_total);
        const int excl = incl - lane_total;
        const bool here = excl < remaining && remaining <= incl;  // exactly one lane
        int digit = 0, above = 0, in_bin = 0;
        if (here) {
          int run = excl;
          bool found = false;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (!found && run + c[i] >= remaining) {
              found = true;
              digit = 255 - 8 * lane - i;
              above = run;
              in_bin = c[i];
            }
            run += c[i];
          }
        }
        const int src = __ffs(__ballot_sync(0xffffffffu, here)) - 1;
        digit = __shfl_sync(0xffffffffu, digit, src);
        above = __shfl_sync(0xffffffffu, above, src);
        in_bin = __shfl_sync(0xffffffffu, in_bin, src);
        prefix |= static_cast<uint32_t>(digit) << shift;
        mask |= 255u << shift;
        remaining -= above;
        if (in_bin == remaining) break;  // uniform: every warp computed the same
      }
      // Chosen pages in index order: every key whose top bits exceed the prefix and the first
      // `remaining` equal to it. A thread takes a contiguous range of candidates; a chosen page's
      // position is (greater keys before it) + min(equal keys before it, remaining), both
      // counted by one block-wide prefix sum.
      const int32_t span = (candidates + kChooseThreads - 1) / kChooseThreads;
      const int32_t j0 = min(candidates, tid * span), j1 = min(candidates, j0 + span);
      int gt = 0, eq = 0;
      for (int32_t j = j0; j < j1; ++j) {
        const uint32_t top = keys[j] & mask;
        gt += top > prefix;
        eq += top == prefix;
      }
      const int gt_incl = warp_inclusive_sum(gt), eq_incl = warp_inclusive_sum(eq);
      if (lane == 31) {
        warp_counts[0][warp] = gt_incl;
        warp_counts[1][warp] = eq_incl;
      }
      __syncthreads();
      int gt_before = gt_incl - gt, eq_before = eq_incl - eq;
      for (int w = 0; w < warp; ++w) {
        gt_before += warp_counts[0][w];
        eq_before += warp_counts[1][w];
      }
      for (int32_t j = j0; j < j1; ++j) {
        const uint32_t top = keys[j] & mask;
        if (top > prefix) {
          sel[gt_before + min(eq_before, remaining)] = j;
          ++gt_before;
        } else if (top == prefix) {
          if (eq_before < remaining) sel[gt_before + eq_before] = j;
          ++eq_before;
        }
      }
    }
    count = take;
    if (k >= 1) {
      if (tid == 0) sel[count] = P - 1;
      ++count;
    }
  }
  for (int32_t i = count + tid; i < p.max_selected; i += kChooseThreads) sel[i] = -1;
  if (tid == 0) *num_sel = count;
}

struct Sizes {
  int32_t group = 0;
  int32_t max_pages = 0;  // pages per item in the workspace: the table stride rounded up to 4
  int64_t pmax_floats = 0;
  int64_t key_words = 0;
};

Sizes sizes_for(const PageSelectParams& p) {
  Sizes z;
  z.group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  z.max_pages = (std::max(1, p.retrieval_blocks_stride) + 3) / 4 * 4;
  const int64_t items = static_cast<int64_t>(std::max(0, p.num_seqs)) * std::max(0, p.num_kv_heads);
  z.pmax_floats = items * z.group * z.max_pages;
  z.key_words = items * z.max_pages;
  return z;
}


}  // namespace

int64_t page_select_workspace_bytes(const PageSelectParams& p) {
  const Sizes z = sizes_for(p);
  return (z.pmax_floats + z.key_words) * 4 + 256 + select_detail::two_level_workspace_bytes(p);
}

// Workspace: pmax [items, group, max_pages] f32, then page keys [items, max_pages] u32 (used when
// they do not fit choose_kernel's shared memory). Every entry choose_kernel reads is written by
// bounds_kernel earlier in the same call (pages < num_pages of selected items), so no state
// carries over between calls.
Status page_select(const PageSelectParams& p, void* workspace, int64_t workspace_bytes,
                   cudaStream_t stream) {
  if (p.num_seqs <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.max_selected < 0) return {};
  if (p.num_q_heads % p.num_kv_heads != 0 || !p.selected || !p.num_selected || !p.out_rows) {
    return {};
  }
  if (!p.q_indptr || !p.kv_lens || !p.head_mode || !p.head_slot) {
    return invalid_argument("page_select: null array in params");
  }
  const PageSummaries& sm = p.summaries;
  const bool geometry_ok = p.page_tokens > 0 && sm.logical_per_page > 0 &&
                           sm.logical_page_tokens * sm.logical_per_page == p.page_tokens &&
                           sm.kmin && sm.kmax && is_float_dtype(sm.dtype) &&
                           is_float_dtype(p.q_dtype) && p.q && p.retrieval_blocks;
  const Sizes z = sizes_for(p);
  if (z.group > kMaxGroup) {
    return invalid_argument("page_select: {} query heads per kv head (at most {})", z.group,
                            kMaxGroup);
  }
  if (p.head_dim > kMaxHeadDim) {
    return invalid_argument("page_select: head_dim {} > {}", p.head_dim, kMaxHeadDim);
  }
  if (static_cast<int64_t>(z.group) * p.head_dim * 4 > 48 * 1024) {
    return invalid_argument("page_select: {} query heads of head_dim {} do not fit shared memory",
                            z.group, p.head_dim);
  }
  if (workspace_bytes < page_select_workspace_bytes(p) || !aligned16(workspace)) {
    return invalid_argument("page_select: workspace of {} bytes (16-byte aligned), {} needed",
                            workspace_bytes, page_select_workspace_bytes(p));
  }
  float* pmax = static_cast<float*>(workspace);
  uint32_t* keys = reinterpret_cast<uint32_t*>(pmax + z.pmax_floats);
  if (geometry_ok && sm.two_level()) {  // page_select_two_level.cu; the same pages
    char* extra = static_cast<char*>(workspace) + (z.pmax_floats + z.key_words) * 4 + 256;
    return select_detail::page_select_two_level(p, pmax, keys, z.max_pages, extra, stream);
  }
  if (geometry_ok) {
    LS_RETURN_IF_ERROR(select_detail::launch_bounds(p, pmax, z.max_pages, nullptr, nullptr, 0,
                                                    stream));
  }
  return select_detail::launch_choose(p, geometry_ok, pmax, keys, z.max_pages, stream);
}

namespace select_detail {

namespace {

// Blocks per (sequence, kv head) of the bounds kernels: enough for about 16 per SM over all
// items, or p.max_bounds_blocks where that is smaller (tests: many tiles per warp).
int64_t bounds_block_cap(const PageSelectParams& p, int32_t items) {
  const int64_t cap = (int64_t{132} * 16 + items - 1) / items;
  return p.max_bounds_blocks > 0 ? std::min<int64_t>(cap, p.max_bounds_blocks) : cap;
}

// bounds_mma_kernel (page_select_mma.cuh) over the same pages as bounds_kernel: enough blocks of
// four 16-row warp tiles to cover the longest item, capped as bounds_kernel's grid.
Status launch_bounds_mma(const PageSelectParams& p, float* pmax, int32_t max_pages_ws,
                         const PageList& pl, cudaStream_t stream) {
  const int32_t items = p.num_seqs * p.num_kv_heads;
  MmaPageList ml;
  ml.list = pl.list;
  ml.count = pl.count;
  ml.stride = pl.stride;
  ml.group_pages = pl.group_pages;
  const int64_t tiles =
      (int64_t{std::max(1, p.retrieval_blocks_stride)} * p.summaries.logical_per_page +
       kMmaBoundsRows - 1) / kMmaBoundsRows;
  const int64_t want = (tiles + kMmaBoundsWarps - 1) / kMmaBoundsWarps;
  const int64_t cap = bounds_block_cap(p, items);
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap))),
                  static_cast<unsigned>(items));
  const auto launch = [&]<int kD, typename T>() {
    if (ml.list) {
      return launch_pdl(bounds_mma_kernel<kD, T, true>, grid, kMmaBoundsThreads, 0, stream,
                        "page_select bounds (mma)", p, pmax, max_pages_ws, ml);
    }
    return launch_pdl(bounds_mma_kernel<kD, T, false>, grid, kMmaBoundsThreads, 0, stream,
                      "page_select bounds (mma)", p, pmax, max_pages_ws, ml);
  };
  const bool bf16 = p.summaries.dtype == DType::kBF16;
  if (p.head_dim == 64) {
    return bf16 ? launch.template operator()<64, __nv_bfloat16>()
                : launch.template operator()<64, __half>();
  }
  return bf16 ? launch.template operator()<128, __nv_bfloat16>()
              : launch.template operator()<128, __half>();
}

}  // namespace

Status launch_bounds(const PageSelectParams& p, float* pmax, int32_t max_pages_ws,
                     const int32_t* list, const int32_t* count, int32_t list_stride,
                     cudaStream_t stream) {
  const PageSummaries& sm = p.summaries;
  const Sizes z = sizes_for(p);
  const int32_t items = p.num_seqs * p.num_kv_heads;
  PageList pl;
  pl.list = list;
  pl.count = count;
  pl.stride = list_stride;
  pl.group_pages = sm.group_pages;
  (void)max_pages_ws;  // == z.max_pages
  // The tensor-core bounds load 16-byte vectors of the summaries.
  if (bounds_mma_covers(p, z.group) && aligned16(sm.kmin) && aligned16(sm.kmax)) {
    return launch_bounds_mma(p, pmax, z.max_pages, pl, stream);
  }
  // Lanes per physical page: the largest power of two <= 32 dividing logical_per_page; parts
  // per logical page: a power of two dividing head_dim's vectors, at most 32 / lanes threads
  // per page, until a part has at most kBoundsVecs vectors.
  const int32_t lpp = sm.logical_per_page;
  int32_t lanes = 1;
  while (lanes < 32 && lpp % (lanes * 2) == 0) lanes *= 2;
  const int32_t per = lpp / lanes;
  return dispatch_float(sm.dtype, "page_select", [&]<typename Tm>() {
    const size_t smem = static_cast<size_t>(z.group) * p.head_dim * sizeof(float);
    const bool vec = p.head_dim % kVecElems<Tm> == 0 && aligned16(sm.kmin) && aligned16(sm.kmax);
    int32_t parts = 1;
    if (vec) {
      const int32_t vecs = p.head_dim / kVecElems<Tm>;
      while (lanes * parts * 2 <= 32 && vecs % (parts * 2) == 0 && vecs / parts > kBoundsVecs) {
        parts *= 2;
      }
    }
    // Enough blocks to fill the GPU twice over (about 8 resident per SM) when every item is
    // selected; more pages than that loop in each block.
    const int32_t pages_per_block = kBoundsThreads / (lanes * parts);
    const int64_t want = (p.retrieval_blocks_stride + pages_per_block - 1) / pages_per_block;
    const int64_t cap = bounds_block_cap(p, items);
    const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap))),
                    static_cast<unsigned>(items));
    const auto log2 = [](int32_t pow2) { return std::countr_zero(static_cast<uint32_t>(pow2)); };
    const auto launch_heads = [&]<int kHeads, bool kL>() {
      if (vec) {
        return launch_pdl(bounds_kernel<Tm, kHeads, true, kL>, grid, kBoundsThreads, smem, stream,
                          "page_select bounds", p, pmax, z.max_pages, log2(lanes), per,
                          log2(parts), pl);
      }
      return launch_pdl(bounds_kernel<Tm, kHeads, false, kL>, grid, kBoundsThreads, smem, stream,
                        "page_select bounds", p, pmax, z.max_pages, log2(lanes), per,
                        log2(parts), pl);
    };
    const auto launch = [&]<int kHeads>() {
      if (pl.list) return launch_heads.template operator()<kHeads, true>();
      return launch_heads.template operator()<kHeads, false>();
    };
    if (z.group <= 1) return launch.template operator()<1>();
    if (z.group <= 2) return launch.template operator()<2>();
    if (z.group <= 4) return launch.template operator()<4>();
    return launch.template operator()<8>();
  });
}

}  // namespace select_detail

namespace select_detail {

Status launch_choose(const PageSelectParams& p, bool geometry_ok, const float* pmax,
                     uint32_t* keys, int32_t max_pages_ws, cudaStream_t stream) {
  const int32_t items = p.num_seqs * p.num_kv_heads;
  const bool keys_in_smem = max_pages_ws <= kSmemKeysMax;
  const size_t choose_smem = keys_in_smem ? static_cast<size_t>(max_pages_ws) * 4 : 0;
  return launch_pdl(choose_kernel, dim3(static_cast<unsigned>(items)), kChooseThreads, choose_smem,
                    stream, "page_select choose", p, geometry_ok, pmax, keys, max_pages_ws,
                    keys_in_smem);
}

}  // namespace select_detail

}  // namespace ls::kernels::cuda
