// wgmma (sm_90a) prefill attention kernels for head_dim 128 (bf16 and f16), key blocks of 64 and
// 128 rows.
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA(128, 64)
LS_INSTANTIATE_PREFILL_WGMMA(128, 128)
}  // namespace ls::kernels::cuda
