#pragma once
// Internal to kernels/cuda: TMA tensor maps over the paged KV pools, for the producer of the
// warp-specialised prefill kernels (attention_prefill_wgmma_ws.cuh).
//
// A pool array (K or V of the retrieval or streaming pool) is viewed as a 2D tensor
// [pool rows, head_dim] (pool rows = storage pages x page_tokens: head-pages, or the tier's cache
// slots) in the pool's dtype. One box is [box_rows, 64] elements with 128-byte swizzle: one
// 64-column panel of box_rows consecutive rows of one head-page, landing in shared memory in the
// 128B-swizzled tile layout of attention_prefill_wgmma.cuh. box_rows = min(page_tokens, 64), so
// a 64-key block is a whole number of boxes per panel (page_tokens a multiple or a divisor of 64).

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "core/status.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

struct KvTmaMaps {
  CUtensorMap k[2];  // [0]: retrieval pool, [1]: streaming pool
  CUtensorMap v[2];
  // Rows per box of each pool's maps; 0: no map (the producer copies that pool with cp.async).
  int32_t box_rows[2] = {0, 0};
  // A block whose span has fewer key blocks keeps the cp.async producer.
  int32_t min_blocks = 0;
};

// Rows per box of `pool`'s maps (min(page_tokens, 64)), or 0 when TMA cannot read it: quantized
// pages, a dtype other than bf16 / f16, head_dim other than 64 / 128, a page size that is
// neither a multiple nor a divisor of 64 (or below 8), no rows or more than 2^31 - 1, a base not
// 16-byte aligned.
int32_t kv_tma_box_rows(const PagedKvPool& pool);

// The maps of p's pools. A pool gets none (box_rows 0) when kv_tma_box_rows says so, when
// `enabled` is false or when the driver has no tensor maps. Fails only when the driver refuses a
// map it should accept.
Status make_kv_tma_maps(const AttentionParams& p, bool enabled, int32_t min_blocks,
                        KvTmaMaps& maps);

}  // namespace ls::kernels::cuda
