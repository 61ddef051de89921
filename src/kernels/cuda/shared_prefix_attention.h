#pragma once
// Shared-prefix decode attention on the GPU (kernels/shared_prefix.h), with the semantics of
// kernels/cpu/shared_prefix_attention: one block per (plan item, kv head) stacks the item's rows
// (up to 64: sequences x the kv head's query heads) into a 64-row query tile and walks the item's
// key range 64 keys at a time on mma.sync m16n8k16 (fp32 accumulation), so a prefix key block is
// read once for up to 64 query rows (a tensor-core matrix-matrix product instead of one
// matrix-vector product per sequence); it writes each row's normalised output and log-sum-exp to
// the row's partial slot, and a merge kernel (a warp per (sequence, query head)) combines the
// slots into out. Enqueued on one stream, no host synchronisation: the plan's arrays are read on
// the device, so a recorded step replays with new plans of the same sizes.
// Supported: head_dim 64 or 128; q/out and the retrieval pool in one dtype, bf16 or f16 (plain
// pages; quantized pools: use paged_attention); q, out and pools 16-byte aligned; items of at
// most 64 rows (SharedPrefixPlanConfig::max_rows <= 64).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/shared_prefix.h"

namespace ls::kernels::cuda {

inline constexpr int32_t kSharedPrefixMaxRows = 64;

// Device scratch bytes shared_prefix_attention needs for a call with these host-known sizes:
// partial outputs [num_seqs, num_q_heads, max_parts, head_dim] f32 and their log-sum-exps.
int64_t shared_prefix_workspace_bytes(const SharedPrefixParams& p);

// Enqueues the shared-prefix attention of `p` (every pointer in device memory, the plan arrays
// included) on `stream`. `workspace` (device memory of at least shared_prefix_workspace_bytes)
// is scratch, free again when the stream passes this call.
Status shared_prefix_attention(const SharedPrefixParams& p, void* workspace,
                               int64_t workspace_bytes, cudaStream_t stream);

}  // namespace ls::kernels::cuda
