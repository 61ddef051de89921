#pragma once
// Section "fp8-algos" of bench_cuda_kernels (docs/fp8-weights.md): where the prefill FP8 GEMM's
// time goes. For the Llama-3-8B shapes at M rows: cuBLASLt's heuristic algorithms (up to
// max_algos, rank 0 = the one production takes) for bf16, the unscaled e4m3 product production
// runs on Hopper, e4m3 with tensor-wide scales, and the outer-vector and 128-block scale modes
// (heuristics 0: no algorithm; -1: the scale mode itself was refused), plus the activation
// quantization and the scale pass that surround the unscaled product, each timed alone.

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_common.h"

namespace ls::bench {

void bench_fp8_algos(CudaBackend& b, JsonLines& out, const std::vector<int64_t>& ms_list,
                     int max_algos);

}  // namespace ls::bench
