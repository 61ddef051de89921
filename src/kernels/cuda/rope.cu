// RoPE (NeoX pairing) in place. One thread per rotated pair; consecutive threads take
// consecutive pairs of one head, so both halves are read and written coalesced. The products and
// differences use explicit _rn intrinsics: no FMA contraction, so the result rounds exactly as
// transformers' q * cos + rotate_half(q) * sin (and kernels/cpu/rope) does.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename T>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, int64_t tokens, int heads,
                            int head_dim, int half) {
  const int64_t total = tokens * heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % half;
    const int64_t th = i / half;  // token * heads + head
    const int64_t t = th / heads;
    T* row = x + th * head_dim;
    const float x1 = to_f32(row[j]), x2 = to_f32(row[j + half]);
    const float c = cos[t * half + j], s = sin[t * half + j];
    row[j] = from_f32<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    row[j + half] = from_f32<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

}  // namespace

Status rope(void* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const float* cos, const float* sin, DType dtype, cudaStream_t stream) {
  if (tokens <= 0 || heads <= 0) return {};
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim || !x || !cos || !sin) {
    return invalid_argument("rope: bad rotary_dim {} for head_dim {}", rotary_dim, head_dim);
  }
  return dispatch_float(dtype, "rope", [&]<typename T>() {
    const int64_t total = tokens * heads * (rotary_dim / 2);
    rope_kernel<T><<<grid_for(total, 256), 256, 0, stream>>>(
        static_cast<T*>(x), cos, sin, tokens, static_cast<int>(heads), static_cast<int>(head_dim),
        static_cast<int>(rotary_dim / 2));
    return launch_status("rope");
  });
}

}  // namespace ls::kernels::cuda
