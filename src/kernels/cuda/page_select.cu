// Quest / LServe page selection on the GPU, same contract as kernels/cpu/page_select.
//  1. bounds_kernel: a few threads per logical page (16-byte loads of its kmax / kmin rows, all
//     of a thread's in flight at once) compute, for every query head h of the group,
//     bound_h(lp) = sum_d max(q_h[d] kmax[lp][d], q_h[d] kmin[lp][d]); the lanes of a physical page
//     max-reduce them into pmax[item][h][page] = max over the page's logical pages (holding
//     tokens) of bound_h. Many blocks per (sequence, kv head), so at batch 1 a long context is
//     still read by every SM.
//  2. choose_kernel: one block per (sequence, kv head): best_h = max_page pmax[h][page] (the max
//     over all logical pages), the group score of each physical page
//     max_h (pmax[h][page] - best_h), then the top (k - 1) pages among all but the last by an
//     exact radix select on the scores (ties: the lower page first, as the CPU comparator), the
//     last page appended, ascending.
// Reducing over the logical pages before subtracting best_h gives exactly the CPU's
// max_lp (bound_h(lp) - best_h): f32 subtraction of a constant is monotone, NaN bounds are
// ignored by both maxes (fmaxf / std::max with -inf first), and every NaN difference (inf - inf)
// ranks -inf in both. Zero scores are canonicalised to +0 so -0 and +0 tie as they do under the
// CPU's float comparison; NaN scores rank last (-inf).

#include <cfloat>

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/paged_ops.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kBoundsThreads = 128;
constexpr int kHeadsPerPass = 8;  // query heads whose bounds a thread accumulates at once
constexpr int kChooseThreads = 1024;
constexpr int kChooseWarps = kChooseThreads / 32;
constexpr int kMaxGroup = 64;
constexpr int kMaxHeadDim = 256;
constexpr int kSmemScoresMax =
    11 * 1024;  // pages whose scores choose_kernel keeps in shared memory
                // (with its static arrays, under the 48 KB default)
static_assert(kChooseWarps == 32, "choose_kernel reduces the warps' values with one warp");
static_assert(kChooseThreads >= 256, "choose_kernel scans the 256 radix bins one per thread");

// What both kernels need to agree on for one (sequence, kv head) item.
struct ItemInfo {
  bool selected = false;  // scored and chosen (else cleared, when row >= 0)
  int32_t row = -1;
  int32_t num_pages = 0;
  int32_t num_logical = 0;
};

__device__ inline ItemInfo item_info(const PageSelectParams& p, bool geometry_ok, int32_t s,
                                     int32_t g) {
  ItemInfo it;
  it.row = p.out_rows[s];
  if (it.row < 0) return it;
  const int32_t kv_len = p.kv_lens[s];
  it.num_pages = kv_len > 0 && p.page_tokens > 0 ? (kv_len - 1) / p.page_tokens + 1 : 0;
  const int32_t slot = p.head_slot[g];
  it.selected = p.head_mode[g] == static_cast<int32_t>(HeadMode::kSelected) && geometry_ok &&
                it.num_pages > 0 && it.num_pages <= p.retrieval_blocks_stride && slot >= 0 &&
                slot < p.heads_per_block && p.q_indptr[s + 1] > p.q_indptr[s];
  if (it.selected) it.num_logical = (kv_len - 1) / p.summaries.logical_page_tokens + 1;
  return it;
}

// Adds sum_{e in [e0, e0 + n)} max(q_h[e] kx[e], q_h[e] kn[e]) to acc[h] for heads h0 .. h0 + nh.
template <int kN>
__device__ __forceinline__ void bound_terms(const float* q_smem, int d, int h0, int nh, int e0,
                                            const float (&kx)[kN], const float (&kn)[kN],
                                            float (&acc)[kHeadsPerPass]) {
#pragma unroll
  for (int hh = 0; hh < kHeadsPerPass; ++hh) {
    if (hh < nh) {
      const float* qh = q_smem + (h0 + hh) * d + e0;
#pragma unroll
      for (int j = 0; j < kN; ++j) acc[hh] += fmaxf(qh[j] * kx[j], qh[j] * kn[j]);
    }
  }
}

// Grid: (ceil(max_pages / pages_per_block), items). Threads come in groups of parts * lanes per
// physical page (both powers of two, their product dividing 32): the `parts` threads of a
// logical page each sum every parts-th vector of head_dim (so a thread has at most four vectors
// of each array to load: one round trip), and the `lanes` groups of a physical page take its
// logical pages i * per .. i * per + per - 1 (lanes * per == logical_per_page). Partial sums meet
// by xor shuffles over the parts, page maxima over the lanes. kVec: 16-byte loads of the
// summaries (head_dim a multiple of the vector, both arrays 16-byte aligned); else scalar loads
// (parts == 1).
template <typename Tq, typename Tm, bool kVec>
__global__ void __launch_bounds__(kBoundsThreads)
    bounds_kernel(const PageSelectParams p, float* pmax, int32_t max_pages, int32_t lanes,
                  int32_t per, int32_t parts) {
  extern __shared__ float q_smem[];  // [group, head_dim] f32
  const int32_t item = static_cast<int32_t>(blockIdx.y);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const ItemInfo it = item_info(p, true, s, g);
  const int32_t per_page = lanes * parts;  // threads per physical page
  const int32_t pages_per_block = kBoundsThreads / per_page;
  const int32_t page0 = static_cast<int32_t>(blockIdx.x) * pages_per_block;
  if (!it.selected || page0 >= it.num_pages) return;  // uniform over the block
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int d = p.head_dim;
  const int64_t token = p.q_indptr[s + 1] - 1;
  const Tq* q =
      static_cast<const Tq*>(p.q) + (token * p.num_q_heads + static_cast<int64_t>(g) * group) * d;
  const int tid = static_cast<int>(threadIdx.x);
  const int32_t part = tid % parts;
  const int32_t lane_lp = (tid / parts) % lanes;
  const int32_t page = page0 + tid / per_page;
  const int32_t lpp = p.summaries.logical_per_page;
  const int32_t slot = p.head_slot[g];
  // This thread's physical page (its block-table entry is read before the barrier, so the
  // table load overlaps the query load).
  int32_t block = -1;
  if (page < it.num_pages) {
    block = p.retrieval_blocks[static_cast<int64_t>(s) * p.retrieval_blocks_stride + page];
  }
  for (int i = tid; i < group * d; i += kBoundsThreads) q_smem[i] = to_f32(q[i]);
  __syncthreads();

  constexpr int V = kVec ? kVecElems<Tm> : 1;
  float* out = pmax + static_cast<int64_t>(item) * group * max_pages;
  for (int h0 = 0; h0 < group; h0 += kHeadsPerPass) {
    const int nh = min(kHeadsPerPass, group - h0);
    float best[kHeadsPerPass];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) best[hh] = -INFINITY;
    for (int32_t k = 0; k < per; ++k) {  // uniform trip count: every lane reaches the shuffles
      const int32_t lp_in_page = lane_lp * per + k;
      const int32_t lp = page * lpp + lp_in_page;
      // Holds a token and has a block (else the CPU's bound is -inf: no score). The same for
      // every part of the logical page.
      const bool scored = page < it.num_pages && lp < it.num_logical && block >= 0;
      float acc[kHeadsPerPass];
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) acc[hh] = 0.0f;
      if (scored) {
        const int64_t row =
            ((static_cast<int64_t>(block) * p.heads_per_block + slot) * lpp + lp_in_page) * d;
        const Tm* kmax = static_cast<const Tm*>(p.summaries.kmax) + row;
        const Tm* kmin = static_cast<const Tm*>(p.summaries.kmin) + row;
        if constexpr (kVec) {
          // Part `part` takes vectors part, part + parts, ... (interleaved, so the parts read
          // different shared-memory banks of q), kUnroll of each array in flight per step.
          constexpr int kUnroll = 4;
          const int nvec = d / V;
          for (int v0 = part; v0 < nvec; v0 += kUnroll * parts) {
            float kx[kUnroll][V], kn[kUnroll][V];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
              const int v = v0 + u * parts;
              if (v < nvec) {
                load_vec(kmax + v * V, kx[u]);
                load_vec(kmin + v * V, kn[u]);
              }
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
              const int v = v0 + u * parts;
              if (v < nvec) bound_terms(q_smem, d, h0, nh, v * V, kx[u], kn[u], acc);
            }
          }
        } else {
          for (int e = 0; e < d; ++e) {  // parts == 1
            const float kx = to_f32(kmax[e]), kn = to_f32(kmin[e]);
#pragma unroll
            for (int hh = 0; hh < kHeadsPerPass; ++hh) {
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
        for (int hh = 0; hh < kHeadsPerPass; ++hh) {
          acc[hh] += __shfl_xor_sync(0xffffffffu, acc[hh], o);
        }
      }
      if (scored) {
#pragma unroll
        for (int hh = 0; hh < kHeadsPerPass; ++hh) best[hh] = fmaxf(best[hh], acc[hh]);
      }
    }
    // Max over the lanes of one physical page (aligned groups of parts * lanes threads).
    for (int o = parts; o < per_page; o <<= 1) {
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
        best[hh] = fmaxf(best[hh], __shfl_xor_sync(0xffffffffu, best[hh], o));
      }
    }
    if (page < it.num_pages && tid % per_page == 0) {
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
        if (hh < nh) out[static_cast<int64_t>(h0 + hh) * max_pages + page] = best[hh];
      }
    }
  }
}

// Monotone map of a float to an unsigned key: a > b (as floats, no NaN) iff key(a) > key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix count of `flag` over the block (thread order) and the block's total.
__device__ inline int block_exclusive_count(bool flag, int* warp_totals, int& total) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  __syncthreads();  // warp_totals may still be read by the previous call
  if (lane == 0) warp_totals[warp] = __popc(ballot);
  __syncthreads();
  int before = 0;
  total = 0;
#pragma unroll 8
  for (int w = 0; w < kChooseWarps; ++w) {
    const int c = warp_totals[w];
    if (w < warp) before += c;
    total += c;
  }
  return before + in_warp;
}

// Dynamic shared memory: [max_pages] f32 page scores when they fit (scores_in_smem), else none
// (the scores live in the workspace).
__global__ void __launch_bounds__(kChooseThreads)
    choose_kernel(const PageSelectParams p, bool geometry_ok, const float* pmax, float* page_score,
                  int32_t max_pages_ws, bool scores_in_smem) {
  extern __shared__ float ps_smem[];
  __shared__ float best[kMaxGroup];
  __shared__ float red[kHeadsPerPass][kChooseWarps];
  __shared__ unsigned hist[256];
  __shared__ int scan[8];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining;
  __shared__ int warp_totals[kChooseWarps];

  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const ItemInfo it = item_info(p, geometry_ok, s, g);
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
  const float* b = pmax + static_cast<int64_t>(item) * group * max_pages_ws;  // [group][max_pages]
  // best_h = max over pages of pmax[h][page] (= max over the logical pages holding tokens),
  // kHeadsPerPass heads per pass so their loads are in flight together.
  for (int h0 = 0; h0 < group; h0 += kHeadsPerPass) {
    float m[kHeadsPerPass];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) m[hh] = -INFINITY;
    for (int32_t j = tid; j < P; j += kChooseThreads) {
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
        if (h0 + hh < group) {
          m[hh] = fmaxf(m[hh], b[static_cast<int64_t>(h0 + hh) * max_pages_ws + j]);
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
      m[hh] = warp_max(m[hh]);
      if (lane == 0) red[hh][warp] = m[hh];
    }
    __syncthreads();
    if (warp < kHeadsPerPass && h0 + warp < group) {
      const float mm = warp_max(red[warp][lane]);  // kChooseWarps == 32
      if (lane == 0) best[h0 + warp] = mm;
    }
    // The next pass's red writes happen after this barrier; best[] is read after the last one.
    __syncthreads();
  }

  float* ps = scores_in_smem ? ps_smem : page_score + static_cast<int64_t>(item) * max_pages_ws;
  for (int32_t j = tid; j < P; j += kChooseThreads) {
    float score_j = -INFINITY;
    for (int h = 0; h < group; ++h) {
      float sc = b[static_cast<int64_t>(h) * max_pages_ws + j] - best[h];
      if (sc != sc) sc = -INFINITY;  // NaN ranks last
      score_j = fmaxf(score_j, sc);
    }
    score_j += 0.0f;  // -0 -> +0
    ps[j] = score_j;
    if (scores_out && j < p.max_pages) scores_out[j] = score_j;
  }
  if (scores_out) {
    for (int32_t i = P + tid; i < p.max_pages; i += kChooseThreads) scores_out[i] = -INFINITY;
  }
  __syncthreads();  // page scores visible to the whole block

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
      // Radix select, 8 bits per pass from the top: the key T of the take-th largest score and
      // how many scores equal to T are still needed after all scores above T. Histogram adds are
      // aggregated per warp over lanes with the same digit (scores share their top bits, so
      // per-lane shared atomics would serialise on a few bins); the digit holding the take-th
      // largest is found by a parallel suffix scan of the 256 bins.
      uint32_t prefix = 0, mask = 0;
      int remaining = take;
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kChooseThreads) hist[i] = 0;
        __syncthreads();
        for (int32_t c0 = 0; c0 < candidates; c0 += kChooseThreads) {  // uniform trip count
          const int32_t j = c0 + tid;
          const uint32_t key = j < candidates ? order_key(ps[j]) : 0u;
          const bool counted = j < candidates && (key & mask) == prefix;
          const uint32_t digit = counted ? (key >> shift) & 255u : 256u;
          const unsigned peers = __match_any_sync(0xffffffffu, digit);
          if (counted && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
        }
        __syncthreads();
        if (tid < 256) {
          // Thread t holds digit 255 - t: an inclusive scan in thread order counts the keys
          // (matching the prefix) whose digit is >= 255 - t.
          const int c = static_cast<int>(hist[255 - tid]);
          int incl = c;
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += up;
          }
          if (lane == 31) scan[warp] = incl;
          __syncwarp();
          // Barrier among the first 256 threads only (8 warps) is not available without named
          // barriers; use bar.sync 1, 256.
          asm volatile("bar.sync 1, 256;" ::: "memory");
          for (int w = 0; w < warp; ++w) incl += scan[w];
          const int excl = incl - c;
          if (excl < remaining && incl >= remaining) {  // exactly one thread
            s_prefix = prefix | (static_cast<uint32_t>(255 - tid) << shift);
            s_remaining = remaining - excl;
          }
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
        // s_prefix / s_remaining / hist / scan are rewritten only after the next pass's first
        // barrier, which every thread reaches after reading them here.
      }
      const uint32_t threshold = prefix;
      const int need_ties = remaining;
      // Chosen pages in index order: every score above the threshold and the first need_ties
      // scores equal to it.
      int tie_base = 0, out_base = 0;
      for (int32_t c0 = 0; c0 < candidates; c0 += kChooseThreads) {
        const int32_t j = c0 + tid;
        const uint32_t key = j < candidates ? order_key(ps[j]) : 0u;
        const bool is_tie = j < candidates && key == threshold;
        const bool is_greater = j < candidates && key > threshold;
        int ties_total = 0, chosen_total = 0;
        const int tie_rank = tie_base + block_exclusive_count(is_tie, warp_totals, ties_total);
        const bool chosen = is_greater || (is_tie && tie_rank < need_ties);
        const int pos = out_base + block_exclusive_count(chosen, warp_totals, chosen_total);
        if (chosen && pos < take) sel[pos] = j;
        tie_base += ties_total;
        out_base += chosen_total;
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
  int32_t max_pages = 0;
  int64_t pmax_floats = 0;
  int64_t score_floats = 0;
};

Sizes sizes_for(const PageSelectParams& p) {
  Sizes z;
  z.group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  z.max_pages = std::max(1, p.retrieval_blocks_stride);
  const int64_t items = static_cast<int64_t>(std::max(0, p.num_seqs)) * std::max(0, p.num_kv_heads);
  z.pmax_floats = items * z.group * z.max_pages;
  z.score_floats = items * z.max_pages;
  return z;
}

}  // namespace

int64_t page_select_workspace_bytes(const PageSelectParams& p) {
  const Sizes z = sizes_for(p);
  return (z.pmax_floats + z.score_floats) * 4 + 256;
}

// Workspace: pmax [items, group, max_pages] f32, then page scores [items, max_pages] f32 (used
// when they do not fit choose_kernel's shared memory). Every entry choose_kernel reads is written
// by bounds_kernel earlier in the same call (pages < num_pages of selected items), so no state
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
  if (workspace_bytes < page_select_workspace_bytes(p)) {
    return invalid_argument("page_select: workspace of {} bytes, {} needed", workspace_bytes,
                            page_select_workspace_bytes(p));
  }
  float* pmax = static_cast<float*>(workspace);
  float* scores = pmax + z.pmax_floats;
  const unsigned items = static_cast<unsigned>(p.num_seqs * p.num_kv_heads);
  if (geometry_ok) {
    // Lanes per physical page: the largest power of two <= 32 dividing logical_per_page; parts
    // per logical page: a power of two dividing head_dim's vectors, at most 32 / lanes threads
    // per page, until a part has at most four vectors.
    const int32_t lpp = sm.logical_per_page;
    int32_t lanes = 1;
    while (lanes < 32 && lpp % (lanes * 2) == 0) lanes *= 2;
    const int32_t per = lpp / lanes;
    LS_RETURN_IF_ERROR(dispatch_float(p.q_dtype, "page_select", [&]<typename Tq>() {
      return dispatch_float(sm.dtype, "page_select", [&]<typename Tm>() {
        const size_t smem = static_cast<size_t>(z.group) * p.head_dim * sizeof(float);
        const bool vec =
            p.head_dim % kVecElems<Tm> == 0 && aligned16(sm.kmin) && aligned16(sm.kmax);
        int32_t parts = 1;
        if (vec) {
          const int32_t vecs = p.head_dim / kVecElems<Tm>;
          while (lanes * parts * 2 <= 32 && vecs % (parts * 2) == 0 && vecs / parts > 4) {
            parts *= 2;
          }
        }
        const int32_t pages_per_block = kBoundsThreads / (lanes * parts);
        const dim3 grid((z.max_pages + pages_per_block - 1) / pages_per_block, items);
        if (vec) {
          bounds_kernel<Tq, Tm, true>
              <<<grid, kBoundsThreads, smem, stream>>>(p, pmax, z.max_pages, lanes, per, parts);
        } else {
          bounds_kernel<Tq, Tm, false>
              <<<grid, kBoundsThreads, smem, stream>>>(p, pmax, z.max_pages, lanes, per, parts);
        }
        return launch_status("page_select bounds");
      });
    }));
  }
  const bool scores_in_smem = z.max_pages <= kSmemScoresMax;
  const size_t choose_smem = scores_in_smem ? static_cast<size_t>(z.max_pages) * 4 : 0;
  choose_kernel<<<items, kChooseThreads, choose_smem, stream>>>(p, geometry_ok, pmax, scores,
                                                                z.max_pages, scores_in_smem);
  return launch_status("page_select choose");
}

}  // namespace ls::kernels::cuda
