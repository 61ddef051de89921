#pragma once
// Launchers of the paged-KV ops: append, page-summary update, page selection. Same contracts as
// kernels/cpu (kernels/paged_kv.h says what each promises); every pointer in the params is device
// memory. Nothing here reads device memory on the host, so a call never synchronises and can be
// captured in a CUDA graph. Out-of-range block-table entries, slots and lengths are skipped on the
// device as the CPU kernels skip them.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

// Writes this step's K/V rows into their head-pages (streaming heads into their ring, skipping a
// row whose ring slot is written again later in the same call, so the result equals in-order
// writes).
Status kv_append(const KvAppendParams& p, cudaStream_t stream);

// Folds this step's keys into the per-logical-page key min/max of retrieval heads; a logical page
// whose first token arrives now is initialised from it.
Status page_summary_update(const SummaryUpdateParams& p, cudaStream_t stream);
Status coarse_fold_pages(const CoarseFoldParams& p, cudaStream_t stream);

// Scratch bytes page_select needs for these (host-known) sizes.
int64_t page_select_workspace_bytes(const PageSelectParams& p);

// Quest bounds per logical page, group scores, physical-page max and top-K with the exact tie rule
// of kernels/cpu/page_select (equal scores: the lower page first), in three launches.
// `workspace` must hold page_select_workspace_bytes(p).
Status page_select(const PageSelectParams& p, void* workspace, int64_t workspace_bytes,
                   cudaStream_t stream);

}  // namespace ls::kernels::cuda
