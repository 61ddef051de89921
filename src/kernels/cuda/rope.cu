// RoPE (NeoX pairing) in place. One thread per rotated pair; consecutive threads take
// consecutive pairs of one head, so both halves are read and written coalesced. The products and
// differences use explicit _rn intrinsics: no FMA contraction, so the result rounds exactly as
// transformers' q * cos + rotate_half(q) * sin (and kernels/cpu/rope) does. Index math is 32-bit
// when the pair count allows (64-bit division costs more than the rotation at decode sizes).

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename T, typename I>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, I tokens, int heads,
                            int head_dim, int half) {
  const I total = tokens * heads * half;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I j = i % half;
    const I th = i / half;  // token * heads + head
    const I t = th / heads;
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
    // 32-bit indices: the loop index (< total + 2^20) and every element offset
    // (< tokens * heads * head_dim) stay below 2^31.
    if (total < (int64_t{1} << 30) && tokens * heads * head_dim < (int64_t{1} << 30)) {
      rope_kernel<T, int32_t><<<grid_for(total, 256), 256, 0, stream>>>(
          static_cast<T*>(x), cos, sin, static_cast<int32_t>(tokens), static_cast<int>(heads),
          static_cast<int>(head_dim), static_cast<int>(rotary_dim / 2));
    } else {
      rope_kernel<T, int64_t><<<grid_for(total, 256), 256, 0, stream>>>(
          static_cast<T*>(x), cos, sin, tokens, static_cast<int>(heads), static_cast<int>(head_dim),
          static_cast<int>(rotary_dim / 2));
    }
    return launch_status("rope");
  });
}

}  // namespace ls::kernels::cuda
