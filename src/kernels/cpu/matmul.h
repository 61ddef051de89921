#pragma once
// y[M, N] = x[M, K] · w[N, K]^T (+ bias[N]); x, y, bias f32; w f32, bf16 or f16 (converted to f32
// exactly on the fly, so bf16/f16 checkpoints keep their size in memory). fp32 accumulation.
// Large M goes through OpenBLAS sgemm; small M (decode) through a bandwidth-bound kernel that
// reads each weight once, split across the pool.

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ls::kernels::cpu {

void matmul(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool);

}  // namespace ls::kernels::cpu
