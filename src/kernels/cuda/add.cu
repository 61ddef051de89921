// Residual add x += y, 16 bytes per thread per step when aligned.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename T, bool kVec>
__global__ void add_kernel(T* x, const T* y, int64_t n) {
  constexpr int V = kVec ? kVecElems<T> : 1;
  const int64_t total = n / V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (kVec) {
      float a[V], b[V];
      load_vec(x + i * V, a);
      load_vec(y + i * V, b);
#pragma unroll
      for (int j = 0; j < V; ++j) a[j] += b[j];
      store_vec(x + i * V, a);
    } else {
      x[i] = from_f32<T>(to_f32(x[i]) + to_f32(y[i]));
    }
  }
}

}  // namespace

Status add_inplace(void* x, const void* y, int64_t n, DType dtype, cudaStream_t stream) {
  if (n <= 0) return {};
  if (!x || !y) return invalid_argument("add_inplace: null tensor");
  return dispatch_float(dtype, "add_inplace", [&]<typename T>() {
    if (n % kVecElems<T> == 0 && aligned16(x) && aligned16(y)) {
      add_kernel<T, true><<<grid_for(n / kVecElems<T>, 256), 256, 0, stream>>>(
          static_cast<T*>(x), static_cast<const T*>(y), n);
    } else {
      add_kernel<T, false>
          <<<grid_for(n, 256), 256, 0, stream>>>(static_cast<T*>(x), static_cast<const T*>(y), n);
    }
    return launch_status("add_inplace");
  });
}

}  // namespace ls::kernels::cuda
