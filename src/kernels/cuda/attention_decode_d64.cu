// Decode attention kernels for head_dim 64 (bf16 and f16), over float pages and over quantized
// (fp8 / int8 / int4) pages.
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_DECODE(64)
LS_INSTANTIATE_DECODE_QUANT(64)
}  // namespace ls::kernels::cuda
