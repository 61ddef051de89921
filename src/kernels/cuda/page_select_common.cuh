#pragma once
// Internal to kernels/cuda's page selection (page_select.cu: one level and the top-K;
// page_select_two_level.cu: the coarse level and the refinement rounds): what every kernel of a
// selection agrees on for one (sequence, kv head) item, and the launchers they share.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda::select_detail {

constexpr int kMaxGroup = 64;
constexpr int kMaxHeadDim = 256;

// What both kernels need to agree on for one (sequence, kv head) item.
struct ItemInfo {
  bool selected = false;  // scored and chosen (else cleared, when row >= 0)
  int32_t row = -1;
  int32_t num_pages = 0;
  int32_t num_logical = 0;
  int32_t slot = 0;
  int64_t q_token = 0;  // the query row that scores the item
};

// Every load is issued before any result is used (all indices are in range; no early return), so
// the metadata costs one round trip. Only `row` means anything when row < 0.
__device__ inline ItemInfo item_info(const PageSelectParams& p, bool geometry_ok, int32_t s,
                                     int32_t g) {
  const int32_t row = p.out_rows[s], kv_len = p.kv_lens[s], mode = p.head_mode[g];
  const int32_t slot = p.head_slot[g], q_begin = p.q_indptr[s], q_end = p.q_indptr[s + 1];
  ItemInfo it;
  it.row = row;
  it.num_pages = kv_len > 0 && p.page_tokens > 0 ? (kv_len - 1) / p.page_tokens + 1 : 0;
  it.selected = row >= 0 && mode == static_cast<int32_t>(HeadMode::kSelected) && geometry_ok &&
                it.num_pages > 0 && it.num_pages <= p.retrieval_blocks_stride && slot >= 0 &&
                slot < p.heads_per_block && q_end > q_begin;
  if (it.selected) it.num_logical = (kv_len - 1) / p.summaries.logical_page_tokens + 1;
  it.slot = slot;
  it.q_token = q_end - 1;
  return it;
}

// Element i of the query rows as f32 (q_dtype is a float type: the launcher checks).
__device__ __forceinline__ float q_at(const void* q, DType dt, int64_t i) {
  switch (dt) {
    case DType::kBF16:
      return to_f32(static_cast<const __nv_bfloat16*>(q)[i]);
    case DType::kF16:
      return to_f32(static_cast<const __half*>(q)[i]);
    default:
      return static_cast<const float*>(q)[i];
  }
}

// Monotone map of a float to an unsigned key: a > b (as floats, no NaN) iff key(a) > key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// choose_kernel (page_select.cu) on pmax [items, group, max_pages_ws] f32: each item's group scores
// from its per-page maxima and the top-K; keys: [items, max_pages_ws] u32 scratch.
Status launch_choose(const PageSelectParams& p, bool geometry_ok, const float* pmax,
                     uint32_t* keys, int32_t max_pages_ws, cudaStream_t stream);

// bounds_kernel (page_select.cu): pmax [items, group, max_pages_ws] of every page of each item
// (list null), or only of the pages of the listed groups (list [items, list_stride] group
// indices, count [items]; two levels). The bounds are the same bits either way.
Status launch_bounds(const PageSelectParams& p, float* pmax, int32_t max_pages_ws,
                     const int32_t* list, const int32_t* count, int32_t list_stride,
                     cudaStream_t stream);

// Extra workspace bytes of the two-level path (0 with one level).
int64_t two_level_workspace_bytes(const PageSelectParams& p);

// The two-level selection (PageSummaries::group_pages > 0): pmax / keys as page_select's, `extra`
// (16-byte aligned) of two_level_workspace_bytes(p).
Status page_select_two_level(const PageSelectParams& p, float* pmax, uint32_t* keys,
                             int32_t max_pages_ws, void* extra, cudaStream_t stream);

}  // namespace ls::kernels::cuda::select_detail
