// out[m, n] += bias[n]: the fallback when cuBLASLt offers no bias epilogue for a shape.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename T>
__global__ void bias_add_kernel(T* out, const float* bias, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f32<T>(to_f32(out[i]) + bias[i % cols]);
  }
}

}  // namespace

Status bias_add(void* out, const float* bias, int64_t rows, int64_t cols, DType dtype,
                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return {};
  if (!out || !bias) return invalid_argument("bias_add: null tensor");
  return dispatch_float(dtype, "bias_add", [&]<typename T>() {
    bias_add_kernel<T>
        <<<grid_for(rows * cols, 256), 256, 0, stream>>>(static_cast<T*>(out), bias, rows, cols);
    return launch_status("bias_add");
  });
}

}  // namespace ls::kernels::cuda
