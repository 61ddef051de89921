#pragma once
// Linear layers through cuBLASLt: out[M, N] = x[M, K] · w[N, K]^T + bias, inputs and output in
// one float dtype (bf16 on the CUDA backend), fp32 accumulation, the f32 bias fused through the
// BIAS epilogue when cuBLASLt offers it for the shape (else a separate bias_add launch).
// Descriptors and the heuristic's algorithm are cached per (M, N, K, dtype, bias, alignment),
// so a decode step pays no planning; the workspace is fixed, so calls can be graph-captured.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"

namespace ls::kernels::cuda {

class CublasLtLinear {
 public:
  // workspace: device memory of workspace_bytes owned by the caller, outliving this object.
  static Result<std::unique_ptr<CublasLtLinear>> create(void* workspace, int64_t workspace_bytes);
  ~CublasLtLinear();
  CublasLtLinear(const CublasLtLinear&) = delete;
  CublasLtLinear& operator=(const CublasLtLinear&) = delete;

  // x: [m, k], w: [n, k] (row-major, as Hugging Face stores linear weights), out: [m, n], all of
  // `dtype` (f32, bf16 or f16); bias: [n] f32 or null. Enqueued on `stream`.
  Status run(const void* x, const void* w, const float* bias, void* out, int64_t m, int64_t n,
             int64_t k, DType dtype, cudaStream_t stream);

  // FP8 W8A8 on FP8 tensor cores (kernels/cuda/fp8_linear.h): out[m, n] = (xq * x_scale) ·
  // (w * w_scale)^T + bias, with xq: [m, k] e4m3 and x_scale: [m] f32 (quantize_rows_e4m3), w:
  // [n, k] e4m3 and w_scale: [n] f32, bias: [n] f32 or null, out: [m, n] bf16 or f16; f32
  // accumulation (no fast accumulation). The scales go to cuBLASLt as outer vectors
  // (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: per row of A = w, per column of B = x^T) for
  // m >= kFp8OuterVecMinRows when it has an algorithm for that; otherwise the product runs
  // unscaled and scale_rows_cols applies them. kUnimplemented when fp8_supported() is false or
  // cuBLASLt has no FP8 algorithm at all: the caller then uses fp8_gemv.
  Status run_fp8(const void* xq, const float* x_scale, const void* w, const float* w_scale,
                 const float* bias, void* out, int64_t m, int64_t n, int64_t k, DType dtype,
                 cudaStream_t stream);
  // cuBLASLt's FP8 layout rules: k % 16 == 0, n % 8 == 0 (16-byte rows of out), 16-byte aligned
  // pointers, bf16/f16 out.
  static bool fp8_supported(const void* xq, const void* w, const void* out, int64_t n, int64_t k,
                            DType dtype);
  // Whether the last run_fp8 of this shape used the outer-vector scale modes (benchmarks say).
  bool fp8_outer_vec_scales(int64_t m, int64_t n, int64_t k, DType dtype) const;
  // Whether an FP8 GEMM of this shape has run (cuBLASLt had an algorithm for it); for benchmarks.
  bool fp8_gemm_planned(int64_t m, int64_t n, int64_t k, DType dtype) const;
  // Off: FP8 GEMMs planned from now on run unscaled + scale_rows_cols even where cuBLASLt has
  // outer-vector algorithms (tests and benchmarks cover both paths); on by default.
  void set_fp8_outer_vec(bool allowed);

 private:
  struct Impl;
  explicit CublasLtLinear(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls::kernels::cuda
