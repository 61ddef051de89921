// Prefill attention kernels for head_dim 16 (bf16 and f16).
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL(16, 4)
}  // namespace ls::kernels::cuda
