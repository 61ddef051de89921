#pragma once
// FP8 (e4m3) linear layers, W8A8 (docs/fp8-weights.md): weights [n, k] e4m3 with one f32 scale
// per output row (w_real[r] = e4m3(w[r]) * w_scale[r]); activations bf16/f16.
// - fp8_gemv (decode, few rows): reads the e4m3 weights directly (half the bytes of bf16),
//   widens them in registers, multiplies with the unquantized activations in f32 and applies the
//   row scale once at the end. Its only error against the dequantized weights is f32 summation.
// - Larger m: quantize_rows_e4m3 quantizes each activation row dynamically (scale max|row| / 448)
//   and CublasLtLinear::run_fp8 multiplies on FP8 tensor cores with the row and column scales
//   (cuBLASLt's outer-vector scale modes from kFp8OuterVecMinRows rows, or an unscaled product +
//   scale_rows_cols below that or where those modes have no algorithm; that product is taken
//   times 2^-16, or less past k = 14336, so that sums of e4m3 codes, up to 448^2 k, stay inside
//   f16's range). Against the dequantized weights the error is the activations'
//   rounding: at most half an e4m3 step per element, |x - x_q| <= 2^-4 |x| (or 2^-10 x_scale in
//   e4m3's subnormal range), so |y - y_ref| <= sum_k (2^-4 |x_k| + 2^-10 s_x) |w_k| plus f32/bf16
//   rounding of the output (the bound tests/cuda/fp8_linear_test.cpp asserts).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ls::kernels::cuda {

// The gemv kernel takes calls of up to this many rows in one pass over the weights (more rows go
// to the FP8 GEMM).
inline constexpr int64_t kFp8GemvMaxRows = 8;

// Which path an FP8 linear layer of m rows and n outputs takes: the e4m3 GEMV for 1-2 rows, up to
// 4 rows for layers up to 4096 wide and up to kFp8GemvMaxRows for narrow ones (n < 2048: k/v of
// the Llama-3-8B shape); else the per-token quantization + cuBLASLt's FP8 GEMM. Measured on an
// H200, two runs (bf16 time / FP8 time, Llama-3-8B shapes): at m = 5-8 the GEMV ran 0.55-1.05x on
// the 4096-28672-wide layers where the GEMM ran 1.16-1.64x, and 0.92-1.25x on k/v where the GEMM
// ran 0.42-0.77x; at m = 4 the GEMM already won on qkv and gate_up (1.24 / 1.62x against 1.05 /
// 1.04x) but not on q/o (1.21 against 1.30x); at m <= 2 the GEMV won everywhere but gate_up at
// m = 2 (1.59 against 1.69x). bench_cuda_kernels --sections fp8 times both paths.
constexpr bool fp8_prefers_gemv(int64_t m, int64_t n) {
  return m <= 2 || (m <= 4 && n <= 4096) || (m <= kFp8GemvMaxRows && n < 2048);
}

// FP8 GEMMs of at least this many rows take cuBLASLt's outer-vector scale algorithm (where it
// has one); fewer rows run the unscaled product + scale_rows_cols. Measured on an H200 (same
// process, Llama-3-8B shapes, the unscaled form with its epilogue): at m = 16 the outer-vector
// algorithm took 1.37-1.75x the unscaled form's time, at m = 512 0.82-0.98x on the
// 4096-28672-wide layers (1.34x on k/v's 1024), at m = 4096 and 16384 0.75-0.97x everywhere.
inline constexpr int64_t kFp8OuterVecMinRows = 512;

// Whether fp8_gemv() takes this call: m >= 1 (rows past kFp8GemvMaxRows run as several
// launches), bf16/f16 activations, k % 16 == 0, x and w 16-byte aligned.
bool fp8_gemv_supports(const void* x, const void* w, int64_t m, int64_t k, DType dtype);

// x: [m, k] dtype, w: [n, k] e4m3, w_scale: [n] f32, bias: [n] f32 or null, out: [m, n] dtype.
Status fp8_gemv(const void* x, const void* w, const float* w_scale, const float* bias, void* out,
                int64_t m, int64_t n, int64_t k, DType dtype, cudaStream_t stream);

// x: [m, k] dtype (bf16/f16) -> q: [m, k] e4m3, scales: [m] f32 (max|row| / 448; 1 for a zero
// row), q = e4m3(x / scale) rounded to nearest even, saturating (core/fp8.h's rule).
Status quantize_rows_e4m3(const void* x, int64_t m, int64_t k, DType dtype, void* q,
                          float* scales, cudaStream_t stream);

// out[i, j] = out[i, j] * factor * row_scale[i] * col_scale[j] + bias[j] (bias may be null), in
// place; out: [m, n] dtype.
Status scale_rows_cols(void* out, int64_t m, int64_t n, float factor, const float* row_scale,
                       const float* col_scale, const float* bias, DType dtype,
                       cudaStream_t stream);

}  // namespace ls::kernels::cuda
