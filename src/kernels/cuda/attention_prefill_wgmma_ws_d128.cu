// Warp-specialised wgmma (sm_90a) prefill attention kernels for head_dim 128 (bf16 and f16), key
// blocks of 64 rows (experimental, PrefillKernel::kWgmmaWs).
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA_WS(128, 64, false, 2)
}  // namespace ls::kernels::cuda
