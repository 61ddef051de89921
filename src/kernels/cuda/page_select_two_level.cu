// Two-level page selection on the GPU (PageSummaries::group_pages > 0), the rule of
// kernels/cpu/page_select_two_level.cpp: score the coarse groups, refine (read the fine summaries
// of) only the groups that can still matter, choose exactly the one-level pages.
//   coarse_kernel  warp per (item, group): CB_h(g), the Quest bound of the group's coarse row for
//                  every query head, plus a rounding margin (below); and every page's pmax = -inf
//                  (unrefined pages keep it, so the one-level top-K never picks them).
//   plan_kernel    block per item, three modes, each writing the item's list of groups to refine:
//                  0 seed (each head's best group), 1 maxima (groups with CB_h > m_h, m_h the
//                  refined maximum), 2 rank (groups whose max_h (CB_h - M_h) reaches the
//                  (k - 1)-th best refined candidate, found by a radix select on order keys).
//   bounds_kernel  page_select.cu's, on the listed groups' pages only (the same code, so the
//                  refined bounds are bit-identical to the one-level ones).
//   choose_kernel  page_select.cu's, unchanged: best_h = max of pmax = M_h exactly, then top-K.
// Eight launches, all programmatic dependent launches with a fixed grid, so a recorded decode
// step replays them with no host round trip.
//
// The rounding margin: the fine bounds are sums in some order of terms t_i = max(q_i kx_i,
// q_i kn_i), the coarse bound of terms t'_i >= t_i with |t_i| <= a_i = |q_i| max(|Kx_i|, |Kn_i|).
// The coarse sum rounds to nearest (2^-24 per addition); the fine one too, or, on the tensor cores
// (page_select_mma.cuh: exact products, f32 accumulation that truncates), at most 2^-23 per
// addition. Whatever the summation orders, fl(fine) <= fl(coarse) + 3 (d + 1) 2^-24 sum a_i (to
// first order), so CB = fl(coarse) + 3.03 (d + 2) 2^-24 A + 2^-22 |fl(coarse)| (A = sum a_i in
// f32) dominates every member's computed bound, and pruning by CB is exact for finite data.
// Non-finite values make CB NaN or inf, which the plan treats as "must refine".

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/page_select_common.cuh"
#include "kernels/cuda/page_summary.cuh"
#include "kernels/cuda/paged_ops.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace ls::kernels::cuda::select_detail {

namespace {

constexpr int kCoarseWarps = 4;
constexpr int kPlanThreads = 512;
constexpr int kPlanWarps = kPlanThreads / 32;
constexpr int kLaneElems = 8;  // head_dim <= 256

// Two-level scratch, after page_select's pmax and keys.
struct TwoLevelWs {
  float* coarse = nullptr;     // [items, group, max_groups] CB_h(g)
  int32_t* refined = nullptr;  // [items, max_groups] 0 / 1
  int32_t* list = nullptr;     // [items, max_groups] groups the next (listed) bounds_kernel reads
  int32_t* count = nullptr;    // [items] length of the list
  int32_t max_groups = 0;      // groups per item in the scratch
};

int32_t ws_groups(const PageSelectParams& p) {
  const int32_t gp = std::max(1, p.summaries.group_pages);
  return ((std::max(1, p.retrieval_blocks_stride) + gp - 1) / gp + 3) / 4 * 4;
}

struct ItemGroups {
  int32_t num_groups = 0;
  bool coarse_ok = false;  // the sequence has a coarse row covering its groups
  int32_t crow = -1;
};

__device__ inline ItemGroups item_groups(const PageSelectParams& p, const ItemInfo& it,
                                         int32_t s) {
  const PageSummaries& sm = p.summaries;
  ItemGroups ig;
  ig.num_groups = (it.num_pages + sm.group_pages - 1) / sm.group_pages;
  ig.crow = sm.rows[s];
  ig.coarse_ok = ig.crow >= 0 && ig.crow < sm.num_rows && ig.num_groups <= sm.max_groups;
  return ig;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The query rows of the item's group as f32 into shared memory ([group, head_dim]).
__device__ inline void stage_query(const PageSelectParams& p, const ItemInfo& it, int32_t g,
                                   int32_t group, float* q_smem) {
  const int64_t q_row = (it.q_token * p.num_q_heads + static_cast<int64_t>(g) * group) * p.head_dim;
  for (int i = static_cast<int>(threadIdx.x); i < group * p.head_dim;
       i += static_cast<int>(blockDim.x)) {
    q_smem[i] = q_at(p.q, p.q_dtype, q_row + i);
  }
}

__global__ void __launch_bounds__(32 * kCoarseWarps)
    coarse_kernel(const PageSelectParams p, TwoLevelWs ws, float* pmax, int32_t max_pages_ws) {
  extern __shared__ float q_smem[];  // [group, head_dim]
  pdl_wait();
  const int32_t item = static_cast<int32_t>(blockIdx.y);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const ItemInfo it = item_info(p, true, s, g);
  if (!it.selected) return;
  const ItemGroups ig = item_groups(p, it, s);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int d = p.head_dim;
  const int32_t gp = p.summaries.group_pages;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  stage_query(p, it, g, group, q_smem);
  __syncthreads();
  float* out = pmax + static_cast<int64_t>(item) * group * max_pages_ws;
  float* cb = ws.coarse + static_cast<int64_t>(item) * group * ws.max_groups;
  const bool score = ig.coarse_ok && it.num_pages > p.budget_pages;
  for (int32_t grp = static_cast<int32_t>(blockIdx.x) * kCoarseWarps + warp; grp < ig.num_groups;
       grp += static_cast<int32_t>(gridDim.x) * kCoarseWarps) {
    const int32_t page0 = grp * gp, pages = min(gp, it.num_pages - page0);
    for (int32_t i = lane; i < pages * group; i += 32) {
      out[static_cast<int64_t>(i / pages) * max_pages_ws + page0 + i % pages] = -INFINITY;
    }
    if (!score) continue;
    const int64_t row =
        ((static_cast<int64_t>(ig.crow) * p.heads_per_block + it.slot) * p.summaries.max_groups +
         grp) * d;
    const auto* cmax = static_cast<const unsigned int*>(p.summaries.coarse_kmax) + row;
    const auto* cmin = static_cast<const unsigned int*>(p.summaries.coarse_kmin) + row;
    float kx[kLaneElems], kn[kLaneElems];
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      const int e = lane + 32 * j;
      kx[j] = e < d ? coarse_value_device(cmax[e]) : 0.0f;
      kn[j] = e < d ? -coarse_value_device(cmin[e]) : 0.0f;
    }
    for (int32_t h = 0; h < group; ++h) {
      float t = 0.0f, a = 0.0f;
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) {
        const int e = lane + 32 * j;
        if (e < d) {
          const float qv = q_smem[h * d + e];
          t += fmaxf(qv * kx[j], qv * kn[j]);
          a += fabsf(qv) * fmaxf(fabsf(kx[j]), fabsf(kn[j]));
        }
      }
      t = warp_sum(t);
      a = warp_sum(a);
      if (lane == 0) {
        const float margin = 3.03f * static_cast<float>(d + 2) * 0x1p-24f * a +
                             0x1p-22f * fabsf(t);
        cb[static_cast<int64_t>(h) * ws.max_groups + grp] = t + margin;
      }
    }
  }
  pdl_launch_dependents();
}

// Block-wide maximum of v over the block (NaN ignored, as fmaxf); every thread gets it.
__device__ inline float block_max(float v, float* red) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float m = lane < kPlanWarps ? red[lane] : -INFINITY;
  m = warp_max(m);
  return m;
}

// The k-th largest (k >= 1) of keys[0, n) (k <= n), by an 8-bit radix select from the top.
__device__ inline uint32_t kth_largest(const uint32_t* keys, int32_t n, int32_t k,
                                       unsigned* hist, int* shared) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    if (tid < 256) hist[tid] = 0;
    __syncthreads();
    for (int32_t j = tid; j < n; j += kPlanThreads) {
      const uint32_t key = keys[j];
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid < 32) {  // lane l: digits 255 - 8l down to 248 - 8l
      int c[8], total = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        c[i] = static_cast<int>(hist[255 - 8 * lane - i]);
        total += c[i];
      }
      int incl = total;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
      }
      const int excl = incl - total;
      if (excl < remaining && remaining <= incl) {
        int run = excl;
        for (int i = 0; i < 8; ++i) {
          if (run + c[i] >= remaining) {
            shared[0] = 255 - 8 * lane - i;
            shared[1] = run;
            break;
          }
          run += c[i];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(shared[0]) << shift;
    mask |= 255u << shift;
    remaining -= shared[1];
    __syncthreads();
  }
  return prefix;
}

// mode 0: seed, 1: maxima, 2: rank (file comment). Writes the item's list and count; mode 2 also
// the refined page count.
__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(const PageSelectParams p, TwoLevelWs ws, const float* pmax, uint32_t* key_ws,
                int32_t max_pages_ws, int mode) {
  __shared__ float red[kPlanWarps];
  __shared__ float m[kMaxGroup];
  __shared__ unsigned hist[256];
  __shared__ int shared[2];
  __shared__ int list_len;
  __shared__ float arg_val[kPlanWarps];
  __shared__ int arg_idx[kPlanWarps];
  pdl_wait();
  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const ItemInfo it = item_info(p, true, s, g);
  int32_t* refined = ws.refined + static_cast<int64_t>(item) * ws.max_groups;
  int32_t* list = ws.list + static_cast<int64_t>(item) * ws.max_groups;
  if (tid == 0) list_len = 0;
  if (!it.selected) {
    if (tid == 0) ws.count[item] = 0;
    return;
  }
  const ItemGroups ig = item_groups(p, it, s);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t gp = p.summaries.group_pages;
  const int32_t P = it.num_pages;
  const float* cb = ws.coarse + static_cast<int64_t>(item) * group * ws.max_groups;
  const float* b = pmax + static_cast<int64_t>(item) * group * max_pages_ws;
  const bool within_budget = P <= p.budget_pages;
  __syncthreads();

  if (mode == 0) {
    for (int32_t gi = tid; gi < ig.num_groups; gi += kPlanThreads) {
      const bool all = !ig.coarse_ok && !within_budget;  // no coarse row: every group (one level)
      refined[gi] = all ? 1 : 0;
      if (all) list[gi] = gi;
    }
    if (!ig.coarse_ok || within_budget) {
      if (tid == 0) ws.count[item] = ig.coarse_ok || within_budget ? 0 : ig.num_groups;
      return;
    }
    __syncthreads();
    for (int32_t h = 0; h < group; ++h) {  // each head's best group (NaN skipped, ties: lowest)
      float best = -INFINITY;
      int idx = -1;
      for (int32_t gi = tid; gi < ig.num_groups; gi += kPlanThreads) {
        const float v = cb[static_cast<int64_t>(h) * ws.max_groups + gi];
        if (v == v && (idx < 0 || v > best)) {
          best = v;
          idx = gi;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oi >= 0 && (idx < 0 || ov > best || (ov == best && oi < idx))) {
          best = ov;
          idx = oi;
        }
      }
      if (lane == 0) {
        arg_val[warp] = best;
        arg_idx[warp] = idx;
      }
      __syncthreads();
      if (tid == 0) {
        float bv = -INFINITY;
        int bi = -1;
        for (int w = 0; w < kPlanWarps; ++w) {
          const int oi = arg_idx[w];
          const float ov = arg_val[w];
          if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
            bv = ov;
            bi = oi;
          }
        }
        if (bi >= 0 && refined[bi] == 0) {
          refined[bi] = 1;
          list[list_len++] = bi;
        }
      }
      __syncthreads();
    }
    if (tid == 0) ws.count[item] = list_len;
    return;
  }

  if (!ig.coarse_ok || within_budget) {  // nothing more to refine
    if (tid == 0) {
      ws.count[item] = 0;
      if (mode == 2 && p.refined_pages) {
        p.refined_pages[static_cast<int64_t>(s) * p.num_kv_heads + g] = ig.coarse_ok ? 0 : P;
      }
    }
    return;
  }
  // m_h: the maximum of the refined pages' bounds (unrefined pages hold -inf).
  for (int32_t h = 0; h < group; ++h) {
    float v = -INFINITY;
    for (int32_t j = tid; j < P; j += kPlanThreads) v = fmaxf(v, b[static_cast<int64_t>(h) * max_pages_ws + j]);
    v = block_max(v, red);
    if (tid == 0) m[h] = v;
    __syncthreads();
  }
  if (mode == 1) {
    for (int32_t gi = tid; gi < ig.num_groups; gi += kPlanThreads) {
      if (refined[gi]) continue;
      bool need = false;
      for (int32_t h = 0; h < group && !need; ++h) {
        need = !(cb[static_cast<int64_t>(h) * ws.max_groups + gi] <= m[h]);
      }
      if (need) {
        refined[gi] = 1;
        list[atomicAdd(&list_len, 1)] = gi;
      }
    }
    __syncthreads();
    if (tid == 0) ws.count[item] = list_len;
    return;
  }

  // mode 2: the candidates' one-level scores as order keys, the (k - 1)-th best as threshold.
  uint32_t* keys = key_ws + static_cast<int64_t>(item) * max_pages_ws;
  const int32_t candidates = P - 1;
  for (int32_t j = tid; j < candidates; j += kPlanThreads) {
    float sc = -INFINITY;
    for (int32_t h = 0; h < group; ++h) {
      float dlt = b[static_cast<int64_t>(h) * max_pages_ws + j] - m[h];
      if (dlt != dlt) dlt = -INFINITY;
      sc = fmaxf(sc, dlt);
    }
    keys[j] = order_key(p.keep_first_page != 0 && j == 0 ? INFINITY : sc + 0.0f);
  }
  __syncthreads();
  int32_t k = min(max(3, p.budget_pages), P);
  k = min(k, p.max_selected);
  const int32_t take = max(0, min(k - 1, candidates));
  const uint32_t threshold =
      take == 0 ? 0xffffffffu : kth_largest(keys, candidates, take, hist, shared);
  for (int32_t gi = tid; gi < ig.num_groups; gi += kPlanThreads) {
    if (refined[gi]) continue;
    float u = -INFINITY;
    bool nan = false;
    for (int32_t h = 0; h < group; ++h) {
      const float dlt = cb[static_cast<int64_t>(h) * ws.max_groups + gi] - m[h];
      nan = nan || dlt != dlt;
      u = fmaxf(u, dlt);
    }
    if (nan || !(order_key(u + 0.0f) < threshold)) {
      refined[gi] = 1;
      list[atomicAdd(&list_len, 1)] = gi;
    }
  }
  __syncthreads();
  if (tid == 0) ws.count[item] = list_len;
  if (p.refined_pages) {
    int n = 0;
    for (int32_t gi = tid; gi < ig.num_groups; gi += kPlanThreads) {
      if (refined[gi]) n += min(gp, P - gi * gp);
    }
    n = static_cast<int>(warp_sum(static_cast<float>(n)));  // exact: counts < 2^24
    __syncthreads();
    if (lane == 0) red[warp] = static_cast<float>(n);
    __syncthreads();
    if (tid == 0) {
      float total = 0.0f;
      for (int w = 0; w < kPlanWarps; ++w) total += red[w];
      p.refined_pages[static_cast<int64_t>(s) * p.num_kv_heads + g] = static_cast<int32_t>(total);
    }
  }
}

}  // namespace

int64_t two_level_workspace_bytes(const PageSelectParams& p) {
  if (!p.summaries.two_level() || p.num_kv_heads <= 0) return 0;
  const int64_t items = static_cast<int64_t>(std::max(0, p.num_seqs)) * p.num_kv_heads;
  const int64_t group = p.num_q_heads / p.num_kv_heads;
  const int64_t mg = ws_groups(p);
  return items * mg * (group + 2) * 4 + items * 4 + 64;
}

Status page_select_two_level(const PageSelectParams& p, float* pmax, uint32_t* keys,
                             int32_t max_pages_ws, void* extra, cudaStream_t stream) {
  if (p.head_dim > 32 * kLaneElems) {
    return invalid_argument("page_select: two-level summaries of head_dim {} > {}", p.head_dim,
                            32 * kLaneElems);
  }
  const int32_t items = p.num_seqs * p.num_kv_heads;
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  TwoLevelWs ws;
  ws.max_groups = ws_groups(p);
  ws.coarse = static_cast<float*>(extra);
  ws.refined = reinterpret_cast<int32_t*>(ws.coarse + static_cast<int64_t>(items) * group * ws.max_groups);
  ws.list = ws.refined + static_cast<int64_t>(items) * ws.max_groups;
  ws.count = ws.list + static_cast<int64_t>(items) * ws.max_groups;
  const size_t q_smem = static_cast<size_t>(group) * p.head_dim * sizeof(float);
  const int64_t cap = (int64_t{132} * 16 + items - 1) / items;  // about two waves in all
  const dim3 coarse_grid(
      static_cast<unsigned>(std::max<int64_t>(
          1, std::min<int64_t>((ws.max_groups + kCoarseWarps - 1) / kCoarseWarps, cap))),
      static_cast<unsigned>(items));
  LS_RETURN_IF_ERROR(launch_pdl(coarse_kernel, coarse_grid, 32 * kCoarseWarps, q_smem, stream,
                                "page_select coarse", p, ws, pmax, max_pages_ws));
  for (int mode = 0; mode < 3; ++mode) {
    LS_RETURN_IF_ERROR(launch_pdl(plan_kernel, dim3(static_cast<unsigned>(items)), kPlanThreads, 0,
                                  stream, "page_select plan", p, ws,
                                  static_cast<const float*>(pmax), keys, max_pages_ws, mode));
    LS_RETURN_IF_ERROR(
        launch_bounds(p, pmax, max_pages_ws, ws.list, ws.count, ws.max_groups, stream));
  }
  return launch_choose(p, true, pmax, keys, max_pages_ws, stream);
}

}  // namespace ls::kernels::cuda::select_detail
