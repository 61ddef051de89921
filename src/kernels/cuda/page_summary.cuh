#pragma once
// Internal to kernels/cuda: the page-summary update (the "index" of Quest / LServe) of one
// (token, kv head) item, run by page_summary_update (page_summary.cu) and by the summary warps of
// an append that carries an index request (kv_append.cu).
// Per logical page, the element-wise min and max of its keys. The warp of an item that starts a
// run of this step's tokens inside one logical page (the page's first token, or the sequence's
// first token of the step) folds the run in order, lanes over head_dim; other items do nothing.
// A page whose first token is in the run is initialised from it, otherwise the stored summary is
// loaded first, so partly filled pages stay exact and no stale memory is ever read. Runs never
// overlap, so warps never race. Only the source keys and the summaries are read, never the pools,
// so the update does not depend on the append's writes.
// The item's own key row and its head's mode / slot are loaded first, before the batch position
// and block table are resolved, so at decode sizes (runs of one token) their latency overlaps
// that dependent chain.

#include <string_view>

#include "core/status.h"
#include "kernels/cuda/batch_index.cuh"
#include "kernels/cuda/device_types.cuh"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

constexpr int kSummaryElemsPerLane = 8;  // head_dim <= 256

// kernels::coarse_key on the device (PageSummaries' coarse rows are these order keys).
__device__ __forceinline__ unsigned int coarse_key_device(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float coarse_value_device(unsigned int key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Whether `p` asks for any work: false when no summaries are kept or the batch is empty (as
// kernels/cpu: nothing to do); an error naming `what` for a head_dim a warp cannot hold or a
// missing array.
inline Result<bool> summary_update_wanted(const SummaryUpdateParams& p, std::string_view what) {
  const PageSummaries& sm = p.summaries;
  if (p.num_tokens <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.num_seqs <= 0) return false;
  if (sm.logical_page_tokens <= 0 || sm.logical_per_page <= 0 || p.page_tokens <= 0 ||
      sm.logical_page_tokens * sm.logical_per_page != p.page_tokens || !sm.kmin || !sm.kmax) {
    return false;
  }
  if (p.head_dim > 32 * kSummaryElemsPerLane) {
    return invalid_argument("{}: summaries of head_dim {} > {}", what, p.head_dim,
                            32 * kSummaryElemsPerLane);
  }
  if (!p.k || !p.q_indptr || !p.kv_lens || !p.head_mode || !p.head_slot || !p.retrieval_blocks) {
    return invalid_argument("{}: null array in the summary params", what);
  }
  return true;
}

// Item = token * num_kv_heads + kv head; one warp, `lane` its lane.
template <typename Ts, typename Tm>
__device__ __forceinline__ void page_summary_item(const SummaryUpdateParams& p, int64_t item,
                                                  int lane) {
  const PageSummaries& sm = p.summaries;
  const int64_t lpt = sm.logical_page_tokens;
  const int d = p.head_dim;
  const int32_t t = static_cast<int32_t>(item / p.num_kv_heads);
  const int32_t g = static_cast<int32_t>(item % p.num_kv_heads);
  const int32_t mode = p.head_mode[g];
  const int32_t slot = p.head_slot[g];
  const Ts* key0 = static_cast<const Ts*>(p.k) + (static_cast<int64_t>(t) * p.num_kv_heads + g) * d;
  float first[kSummaryElemsPerLane];  // this token's key: the run's first row
#pragma unroll
  for (int j = 0; j < kSummaryElemsPerLane; ++j) {
    const int e = lane + 32 * j;
    first[j] = e < d ? to_f32(key0[e]) : 0.0f;
  }
  if (mode == static_cast<int32_t>(HeadMode::kStreaming)) return;
  if (slot < 0 || slot >= p.heads_per_block) return;
  const TokenPlace tp = place_token(p.q_indptr, p.kv_lens, p.num_seqs, t);
  if (tp.seq < 0) return;
  const int64_t pos = tp.position;
  const int32_t i = t - tp.q_begin;
  const bool fresh = pos % lpt == 0;
  if (!fresh && i != 0) return;  // not the start of a run
  const int64_t lp = pos / lpt;
  const int32_t run =
      static_cast<int32_t>(min(static_cast<int64_t>(tp.q_len - i), (lp + 1) * lpt - pos));
  const int64_t page = pos / p.page_tokens;
  if (page >= p.retrieval_blocks_stride) return;
  const int32_t block =
      p.retrieval_blocks[static_cast<int64_t>(tp.seq) * p.retrieval_blocks_stride + page];
  if (block < 0) return;
  const int64_t head_page = static_cast<int64_t>(block) * p.heads_per_block + slot;
  const int64_t offset = (head_page * sm.logical_per_page + lp % sm.logical_per_page) * d;
  Tm* kmin = static_cast<Tm*>(sm.kmin) + offset;
  Tm* kmax = static_cast<Tm*>(sm.kmax) + offset;
  const int64_t key_stride = static_cast<int64_t>(p.num_kv_heads) * d;

  float lo[kSummaryElemsPerLane], hi[kSummaryElemsPerLane];
#pragma unroll
  for (int j = 0; j < kSummaryElemsPerLane; ++j) {
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
    for (int j = 0; j < kSummaryElemsPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < d) {
        const float v = to_f32(key[e]);
        lo[j] = fminf(lo[j], v);
        hi[j] = fmaxf(hi[j], v);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kSummaryElemsPerLane; ++j) {
    const int e = lane + 32 * j;
    if (e < d) {
      kmin[e] = from_f32<Tm>(lo[j]);
      kmax[e] = from_f32<Tm>(hi[j]);
    }
  }
  // Two levels: the stored (rounded) extremes folded into the group's coarse row of the
  // sequence's row with atomic maxima of order keys (several runs of one group may land in the
  // same launch; a max needs no order). The row was zeroed when the sequence started in it.
  if (sm.group_pages > 0 && sm.coarse_kmin && sm.coarse_kmax && sm.rows) {
    const int32_t row = sm.rows[tp.seq];
    const int64_t grp = pos / (static_cast<int64_t>(sm.group_pages) * p.page_tokens);
    if (row >= 0 && row < sm.num_rows && grp < sm.max_groups) {
      const int64_t coff =
          ((static_cast<int64_t>(row) * p.heads_per_block + slot) * sm.max_groups + grp) * d;
      auto* cmin = static_cast<unsigned int*>(sm.coarse_kmin) + coff;
      auto* cmax = static_cast<unsigned int*>(sm.coarse_kmax) + coff;
#pragma unroll
      for (int j = 0; j < kSummaryElemsPerLane; ++j) {
        const int e = lane + 32 * j;
        if (e < d) {
          atomicMax(cmin + e, coarse_key_device(-to_f32(from_f32<Tm>(lo[j]))));
          atomicMax(cmax + e, coarse_key_device(to_f32(from_f32<Tm>(hi[j]))));
        }
      }
    }
  }
}

}  // namespace ls::kernels::cuda
