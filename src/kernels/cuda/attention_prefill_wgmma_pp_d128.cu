// Warp-specialised wgmma (sm_90a) prefill attention kernels with ping-pong scheduling of the two
// consumer warpgroups (PrefillKernel::kWgmmaPingPong) for head_dim 128 (bf16 and f16), key blocks
// of 64 rows, 2 or 3 K/V stages (AttentionOptions::wgmma_ws_stages).
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA_WS(128, 64, true, 2)
LS_INSTANTIATE_PREFILL_WGMMA_WS(128, 64, true, 3)
}  // namespace ls::kernels::cuda
