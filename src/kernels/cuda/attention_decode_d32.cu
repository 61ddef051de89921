// Decode attention kernels for head_dim 32 (bf16 and f16).
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_DECODE(32)
}  // namespace ls::kernels::cuda
