#pragma once
// Linear layers for a few rows (decode): out[m, n] = x[m, :] · w[n, :] + bias[n] for m = 1..2,
// bf16 or f16, fp32 accumulation. A memory-bound weight stream: each warp owns two weight rows
// and reads them with 16-byte streaming loads, several in flight per lane, x coming from L1.
// cuBLASLt picks split-K kernels plus a reduction launch for these shapes (measured 43-81% of
// the copy bandwidth for 1024- and 4096-row weights on an H100); this path has no second launch.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ls::kernels::cuda {

// Measured on an H100 (bench_cuda_kernels --sections linear): ahead of cuBLASLt at 1 and 2 rows
// for every Llama-3-8B decode shape, behind it for some at 4 (down 47 vs 45 us, gate_up 85 vs
// 84): more rows go to cuBLASLt.
inline constexpr int64_t kGemvMaxRows = 2;

// Whether gemv() takes this call: m in 1..kGemvMaxRows, bf16/f16, k % 8 == 0 and 16-byte aligned
// x and w.
bool gemv_supports(const void* x, const void* w, int64_t m, int64_t k, DType dtype);

// x: [m, k], w: [n, k] (row-major), out: [m, n], all `dtype`; bias: [n] f32 or null.
Status gemv(const void* x, const void* w, const float* bias, void* out, int64_t m, int64_t n,
            int64_t k, DType dtype, cudaStream_t stream);

// The MLP's gate: w: [n = 2 * inter, k] holds the gate rows then the up rows; out: [m, inter] =
// silu(gate) * up, each of gate and up rounded to dtype first (bit-identical to gemv into a
// [m, n] buffer followed by silu_mul).
Status gemv_silu_mul(const void* x, const void* w, const float* bias, void* out, int64_t m,
                     int64_t n, int64_t k, DType dtype, cudaStream_t stream);

}  // namespace ls::kernels::cuda
