// Warp-specialised wgmma (sm_90a) prefill attention kernels with ping-pong scheduling of the two
// consumer warpgroups (PrefillKernel::kWgmmaPingPong) for head_dim 64 (bf16 and f16), key blocks
// of 64 rows, 2 K/V stages.
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA_WS(64, 64, true, 2)
}  // namespace ls::kernels::cuda
