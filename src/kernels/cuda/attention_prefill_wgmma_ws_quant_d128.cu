// The warp-specialised wgmma (sm_90a) prefill attention kernel over quantized pages (fp8, int8,
// int4; kernels/kv_quant.h) for head_dim 128, bf16 and f16 queries: kAuto's prefill kernel there.
#define LS_ATTENTION_INSTANTIATE
#include "kernels/cuda/attention_launch.cuh"

namespace ls::kernels::cuda {
LS_INSTANTIATE_PREFILL_WGMMA_WS_QUANT(128, KvQuant::kFp8)
LS_INSTANTIATE_PREFILL_WGMMA_WS_QUANT(128, KvQuant::kInt8)
LS_INSTANTIATE_PREFILL_WGMMA_WS_QUANT(128, KvQuant::kInt4)
}  // namespace ls::kernels::cuda
