// Element-wise conversion between float dtypes (bf16 logits to f32, ...): exact widening,
// round-to-nearest-even narrowing, NaN kept NaN.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename Tin, typename Tout>
__global__ void convert_kernel(const Tin* src, Tout* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_f32<Tout>(to_f32(src[i]));
  }
}

}  // namespace

Status convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
               cudaStream_t stream) {
  if (n <= 0) return {};
  if (!src || !dst) return invalid_argument("convert: null tensor");
  return dispatch_float(src_dtype, "convert", [&]<typename Tin>() {
    return dispatch_float(dst_dtype, "convert", [&]<typename Tout>() {
      convert_kernel<Tin, Tout><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<const Tin*>(src),
                                                                      static_cast<Tout*>(dst), n);
      return launch_status("convert");
    });
  });
}

}  // namespace ls::kernels::cuda
