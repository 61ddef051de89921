// Page-summary update (the "index" of Quest / LServe): per logical page, the element-wise min and
// max of its keys. One warp per (token, kv head) that starts a run of this step's tokens inside
// one logical page (the page's first token, or the sequence's first token of the step); the warp
// folds the run in order, lanes over head_dim. A page whose first token is in the run is
// initialised from it, otherwise the stored summary is loaded first, so partly filled pages stay
// exact and no stale memory is ever read. Runs never overlap, so warps never race.
// The item's own key row (head_dim elements, lanes over head_dim) and its head's mode / slot are
// loaded first, before the batch position and block table are resolved, so at decode sizes
// (runs of one token) their latency overlaps that dependent chain.

#include "kernels/cuda/batch_index.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/paged_ops.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxElemsPerLane = 8;  // head_dim <= 256

template <typename Ts, typename Tm>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    page_summary_kernel(const SummaryUpdateParams p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const PageSummaries& sm = p.summaries;
  const int64_t lpt = sm.logical_page_tokens;
  const int d = p.head_dim;
  const int64_t num_items = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       item < num_items; item += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const int32_t t = static_cast<int32_t>(item / p.num_kv_heads);
    const int32_t g = static_cast<int32_t>(item % p.num_kv_heads);
    const int32_t mode = p.head_mode[g];
    const int32_t slot = p.head_slot[g];
    const Ts* key0 =
        static_cast<const Ts*>(p.k) + (static_cast<int64_t>(t) * p.num_kv_heads + g) * d;
    float first[kMaxElemsPerLane];  // this token's key: the run's first row
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const int e = lane + 32 * j;
      first[j] = e < d ? to_f32(key0[e]) : 0.0f;
    }
    if (mode == static_cast<int32_t>(HeadMode::kStreaming)) continue;
    if (slot < 0 || slot >= p.heads_per_block) continue;
    const TokenPlace tp = place_token(p.q_indptr, p.kv_lens, p.num_seqs, t);
    if (tp.seq < 0) continue;
    const int64_t pos = tp.position;
    const int32_t i = t - tp.q_begin;
    const bool fresh = pos % lpt == 0;
    if (!fresh && i != 0) continue;  // not the start of a run
    const int64_t lp = pos / lpt;
    const int32_t run =
        static_cast<int32_t>(min(static_cast<int64_t>(tp.q_len - i), (lp + 1) * lpt - pos));
    const int64_t page = pos / p.page_tokens;
    if (page >= p.retrieval_blocks_stride) continue;
    const int32_t block =
        p.retrieval_blocks[static_cast<int64_t>(tp.seq) * p.retrieval_blocks_stride + page];
    if (block < 0) continue;
    const int64_t head_page = static_cast<int64_t>(block) * p.heads_per_block + slot;
    const int64_t offset = (head_page * sm.logical_per_page + lp % sm.logical_per_page) * d;
    Tm* kmin = static_cast<Tm*>(sm.kmin) + offset;
    Tm* kmax = static_cast<Tm*>(sm.kmax) + offset;
    const int64_t key_stride = static_cast<int64_t>(p.num_kv_heads) * d;

    float lo[kMaxElemsPerLane], hi[kMaxElemsPerLane];
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < d) {
        if (fresh) {
          lo[j] = hi[j] = first[j];
        } else {
          lo[j] = fminf(to_f32(kmin[e]), first[j]);
          hi[j] = fmaxf(to_f32(kmax[e]), first[j]);
        }
      }
    }
    for (int32_t r = 1; r < run; ++r) {
      const Ts* key = key0 + r * key_stride;
#pragma unroll
      for (int j = 0; j < kMaxElemsPerLane; ++j) {
        const int e = lane + 32 * j;
        if (e < d) {
          const float v = to_f32(key[e]);
          lo[j] = fminf(lo[j], v);
          hi[j] = fmaxf(hi[j], v);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < d) {
        kmin[e] = from_f32<Tm>(lo[j]);
        kmax[e] = from_f32<Tm>(hi[j]);
      }
    }
  }
}

}  // namespace

Status page_summary_update(const SummaryUpdateParams& p, cudaStream_t stream) {
  const PageSummaries& sm = p.summaries;
  if (p.num_tokens <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.num_seqs <= 0) return {};
  if (sm.logical_page_tokens <= 0 || sm.logical_per_page <= 0 || p.page_tokens <= 0 ||
      sm.logical_page_tokens * sm.logical_per_page != p.page_tokens || !sm.kmin || !sm.kmax) {
    return {};  // no summaries kept (as kernels/cpu: nothing to do)
  }
  if (p.head_dim > 32 * kMaxElemsPerLane) {
    return invalid_argument("page_summary_update: head_dim {} > {}", p.head_dim,
                            32 * kMaxElemsPerLane);
  }
  if (!p.k || !p.q_indptr || !p.kv_lens || !p.head_mode || !p.head_slot || !p.retrieval_blocks) {
    return invalid_argument("page_summary_update: null array in params");
  }
  return dispatch_float(p.src_dtype, "page_summary_update", [&]<typename Ts>() {
    return dispatch_float(sm.dtype, "page_summary_update", [&]<typename Tm>() {
      const int64_t warps = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
      page_summary_kernel<Ts, Tm>
          <<<grid_for(warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(p);
      return launch_status("page_summary_update");
    });
  });
}

}  // namespace ls::kernels::cuda
