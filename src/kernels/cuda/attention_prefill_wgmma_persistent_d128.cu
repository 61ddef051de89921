// Persistent ping-pong warp-specialised wgmma (sm_90a) prefill attention kernels
// (PrefillKernel::kWgmmaPersistent) for head_dim 128 (bf16 and f16), key blocks of 64 rows,
// 2 or 3 K/V stages.
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA_PERSISTENT(128, 64, 2)
LS_INSTANTIATE_PREFILL_WGMMA_PERSISTENT(128, 64, 3)
}  // namespace ls::kernels::cuda
