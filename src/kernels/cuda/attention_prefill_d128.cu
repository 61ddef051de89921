// Prefill attention kernels for head_dim 128 (bf16 and f16), over float pages and over
// quantized (fp8 / int8 / int4) pages.
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL(128, 4)
LS_INSTANTIATE_PREFILL(128, 8)
LS_INSTANTIATE_PREFILL_QUANT(128, 4)
LS_INSTANTIATE_PREFILL_QUANT(128, 8)
}  // namespace ls::kernels::cuda
