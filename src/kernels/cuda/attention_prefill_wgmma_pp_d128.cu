// Warp-specialised wgmma (sm_90a) prefill attention kernels with ping-pong scheduling of the two
// consumer warpgroups (PrefillKernel::kWgmmaPingPong) for head_dim 128 (bf16 and f16): key blocks
// of 64 rows with 2 or 3 K/V stages (AttentionOptions::wgmma_ws_stages), and of 128 rows with 2
// (AttentionOptions::wgmma_key_block = 128).
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA_WS(128, 64, true, 2)
LS_INSTANTIATE_PREFILL_WGMMA_WS(128, 64, true, 3)
LS_INSTANTIATE_PREFILL_WGMMA_WS(128, 128, true, 2)
}  // namespace ls::kernels::cuda
