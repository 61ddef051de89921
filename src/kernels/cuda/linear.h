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

 private:
  struct Impl;
  explicit CublasLtLinear(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls::kernels::cuda
