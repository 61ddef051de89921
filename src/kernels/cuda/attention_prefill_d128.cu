// Prefill attention kernels for head_dim 128 (bf16 and f16).
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL(128, 4)
LS_INSTANTIATE_PREFILL(128, 8)
}  // namespace ls::kernels::cuda
