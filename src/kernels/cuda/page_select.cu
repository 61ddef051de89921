// Quest / LServe page selection on the GPU, same contract as kernels/cpu/page_select.
//  1. bounds_kernel: one warp per logical page computes, for every query head of the group,
//     bound_h(lp) = sum_d max(q_h[d] kmax[lp][d], q_h[d] kmin[lp][d]) into the workspace
//     ([item, group, logical pages] f32); many blocks per (sequence, kv head), so long contexts
//     are read at full bandwidth.
//  2. choose_kernel: one block per (sequence, kv head): best bound per head, the group score of
//     each physical page (max over heads and over its logical pages of bound - best), then the
//     top (k - 1) pages among all but the last by an exact radix select on the scores (ties: the
//     lower page first, as the CPU comparator), the last page appended, ascending.
// Zero scores are canonicalised to +0 so -0 and +0 tie as they do under the CPU's float
// comparison; NaN scores rank last (-inf).

#include <cfloat>

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/paged_ops.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kBoundsWarps = 8;
constexpr int kLogicalPerWarp = 8;
constexpr int kLogicalPerBlock = kBoundsWarps * kLogicalPerWarp;
constexpr int kChooseThreads = 512;
constexpr int kMaxGroup = 64;
constexpr int kMaxElemsPerLane = 8;  // head_dim <= 256

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

template <typename Tq, typename Tm>
__global__ void __launch_bounds__(kBoundsWarps * 32)
    bounds_kernel(const PageSelectParams p, float* bounds, int32_t max_logical) {
  extern __shared__ float q_smem[];  // [group, head_dim] f32
  const int32_t item = static_cast<int32_t>(blockIdx.y);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const ItemInfo it = item_info(p, true, s, g);
  const int32_t lp0 = static_cast<int32_t>(blockIdx.x) * kLogicalPerBlock;
  if (!it.selected || lp0 >= it.num_logical) return;
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int d = p.head_dim;
  const int64_t token = p.q_indptr[s + 1] - 1;
  const Tq* q =
      static_cast<const Tq*>(p.q) + (token * p.num_q_heads + static_cast<int64_t>(g) * group) * d;
  for (int i = static_cast<int>(threadIdx.x); i < group * d; i += blockDim.x) {
    q_smem[i] = to_f32(q[i]);
  }
  __syncthreads();

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int32_t lpp = p.summaries.logical_per_page;
  const int32_t slot = p.head_slot[g];
  float* out = bounds + static_cast<int64_t>(item) * group * max_logical;
  for (int32_t k = 0; k < kLogicalPerWarp; ++k) {
    const int32_t lp = lp0 + warp * kLogicalPerWarp + k;
    if (lp >= it.num_logical) break;
    const int32_t block =
        p.retrieval_blocks[static_cast<int64_t>(s) * p.retrieval_blocks_stride + lp / lpp];
    if (block < 0) {
      for (int h = lane; h < group; h += 32)
        out[static_cast<int64_t>(h) * max_logical + lp] = -INFINITY;
      continue;
    }
    const int64_t row =
        ((static_cast<int64_t>(block) * p.heads_per_block + slot) * lpp + lp % lpp) * d;
    const Tm* kmax = static_cast<const Tm*>(p.summaries.kmax) + row;
    const Tm* kmin = static_cast<const Tm*>(p.summaries.kmin) + row;
    float kx[kMaxElemsPerLane], kn[kMaxElemsPerLane];
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const int e = lane + 32 * j;
      kx[j] = e < d ? to_f32(kmax[e]) : 0.0f;
      kn[j] = e < d ? to_f32(kmin[e]) : 0.0f;
    }
    for (int h = 0; h < group; ++h) {
      const float* qh = q_smem + h * d;
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxElemsPerLane; ++j) {
        const int e = lane + 32 * j;
        if (e < d) acc += fmaxf(qh[e] * kx[j], qh[e] * kn[j]);
      }
      acc = warp_sum(acc);
      if (lane == 0) out[static_cast<int64_t>(h) * max_logical + lp] = acc;
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
  for (int w = 0; w < kChooseThreads / 32; ++w) {
    if (w < warp) before += warp_totals[w];
    total += warp_totals[w];
  }
  return before + in_warp;
}

__global__ void __launch_bounds__(kChooseThreads)
    choose_kernel(const PageSelectParams p, bool geometry_ok, const float* bounds,
                  float* page_score, int32_t max_logical, int32_t max_pages_ws) {
  __shared__ float best[kMaxGroup];
  __shared__ float red[kChooseThreads / 32];
  __shared__ unsigned hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining;
  __shared__ int warp_totals[kChooseThreads / 32];

  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const ItemInfo it = item_info(p, geometry_ok, s, g);
  if (it.row < 0) return;
  const int tid = static_cast<int>(threadIdx.x);
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
  const int32_t lpp = p.summaries.logical_per_page;
  const int32_t n_lp = it.num_logical, P = it.num_pages;
  const float* b = bounds + static_cast<int64_t>(item) * group * max_logical;
  for (int h = 0; h < group; ++h) {
    float m = -INFINITY;
    for (int lp = tid; lp < n_lp; lp += kChooseThreads) {
      m = fmaxf(m, b[static_cast<int64_t>(h) * max_logical + lp]);
    }
    m = warp_max(m);
    if (tid % 32 == 0) red[tid / 32] = m;
    __syncthreads();
    if (tid == 0) {
      float mm = -INFINITY;
      for (int w = 0; w < kChooseThreads / 32; ++w) mm = fmaxf(mm, red[w]);
      best[h] = mm;
    }
    __syncthreads();
  }

  float* ps = page_score + static_cast<int64_t>(item) * max_pages_ws;
  for (int32_t j = tid; j < P; j += kChooseThreads) {
    float score_j = -INFINITY;
    const int32_t lp_end = min(n_lp, (j + 1) * lpp);
    for (int h = 0; h < group; ++h) {
      for (int32_t lp = j * lpp; lp < lp_end; ++lp) {
        float sc = b[static_cast<int64_t>(h) * max_logical + lp] - best[h];
        if (sc != sc) sc = -INFINITY;  // NaN ranks last
        score_j = fmaxf(score_j, sc);
      }
    }
    score_j += 0.0f;  // -0 -> +0
    ps[j] = score_j;
  }
  if (scores_out) {
    for (int32_t i = tid; i < p.max_pages; i += kChooseThreads) {
      // ps[i] for i < P was written by this same thread above (same stride).
      scores_out[i] = i < P ? ps[i] : -INFINITY;
    }
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
      // how many scores equal to T are still needed after all scores above T.
      uint32_t prefix = 0, mask = 0;
      int remaining = take;
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kChooseThreads) hist[i] = 0;
        __syncthreads();
        for (int32_t j = tid; j < candidates; j += kChooseThreads) {
          const uint32_t key = order_key(ps[j]);
          if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
          int cum = 0;
          for (int dgt = 255; dgt >= 0; --dgt) {
            const int c = static_cast<int>(hist[dgt]);
            if (cum + c >= remaining) {
              s_prefix = prefix | (static_cast<uint32_t>(dgt) << shift);
              s_remaining = remaining - cum;
              break;
            }
            cum += c;
          }
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
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
  int32_t max_logical = 0;
  int32_t max_pages = 0;
  int64_t bounds_floats = 0;
  int64_t score_floats = 0;
};

Sizes sizes_for(const PageSelectParams& p) {
  Sizes z;
  z.group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  z.max_pages = std::max(1, p.retrieval_blocks_stride);
  z.max_logical = z.max_pages * std::max(1, p.summaries.logical_per_page);
  const int64_t items = static_cast<int64_t>(std::max(0, p.num_seqs)) * std::max(0, p.num_kv_heads);
  z.bounds_floats = items * z.group * z.max_logical;
  z.score_floats = items * z.max_pages;
  return z;
}

}  // namespace

int64_t page_select_workspace_bytes(const PageSelectParams& p) {
  const Sizes z = sizes_for(p);
  return (z.bounds_floats + z.score_floats) * 4 + 256;
}

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
  if (p.head_dim > 32 * kMaxElemsPerLane) {
    return invalid_argument("page_select: head_dim {} > {}", p.head_dim, 32 * kMaxElemsPerLane);
  }
  if (static_cast<int64_t>(z.group) * p.head_dim * 4 > 48 * 1024) {
    return invalid_argument("page_select: {} query heads of head_dim {} do not fit shared memory",
                            z.group, p.head_dim);
  }
  if (workspace_bytes < page_select_workspace_bytes(p)) {
    return invalid_argument("page_select: workspace of {} bytes, {} needed", workspace_bytes,
                            page_select_workspace_bytes(p));
  }
  float* bounds = static_cast<float*>(workspace);
  float* scores = bounds + z.bounds_floats;
  const unsigned items = static_cast<unsigned>(p.num_seqs * p.num_kv_heads);
  if (geometry_ok) {
    LS_RETURN_IF_ERROR(dispatch_float(p.q_dtype, "page_select", [&]<typename Tq>() {
      return dispatch_float(sm.dtype, "page_select", [&]<typename Tm>() {
        const dim3 grid((z.max_logical + kLogicalPerBlock - 1) / kLogicalPerBlock, items);
        const size_t smem = static_cast<size_t>(z.group) * p.head_dim * sizeof(float);
        bounds_kernel<Tq, Tm><<<grid, kBoundsWarps * 32, smem, stream>>>(p, bounds, z.max_logical);
        return launch_status("page_select bounds");
      });
    }));
  }
  choose_kernel<<<items, kChooseThreads, 0, stream>>>(p, geometry_ok, bounds, scores, z.max_logical,
                                                      z.max_pages);
  return launch_status("page_select choose");
}

}  // namespace ls::kernels::cuda
