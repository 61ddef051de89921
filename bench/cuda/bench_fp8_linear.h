#pragma once
// Section "fp8" of bench_cuda_kernels (docs/fp8-weights.md): linear layers at the Llama-3-8B
// shapes with bf16 weights against FP8 weights (e4m3, per-row scales), for M rows of
// activations. Small M (decode) reports the bytes moved per call against the copy bandwidth
// (the FP8 GEMV reads half the weight bytes); large M (prefill) reports TFLOP/s of the FP8 GEMM
// (per-token activation quantization included) against bf16 cuBLASLt, and whether cuBLASLt ran
// the outer-vector scale modes.

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_common.h"

namespace ls::bench {

void bench_fp8_linear(CudaBackend& b, JsonLines& out, const std::vector<int64_t>& ms_list,
                      double copy_bps, int64_t l2_bytes);

}  // namespace ls::bench
