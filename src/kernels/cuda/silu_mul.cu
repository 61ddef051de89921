// SwiGLU's gate: silu(g) * u with silu(g) = g / (1 + exp(-g)) (torch's formula), f32 math and
// one rounding. Vectorised 16 bytes at a time when the row length allows.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

__device__ __forceinline__ float silu_times(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u);
}

template <typename T, bool kVec>
__global__ void silu_mul_kernel(const T* gate_up, int64_t tokens, int64_t inter, T* out) {
  constexpr int V = kVec ? kVecElems<T> : 1;
  const int64_t per_row = inter / V;
  const int64_t total = tokens * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row;
    const int64_t c = (i % per_row) * V;
    const T* g = gate_up + t * 2 * inter + c;
    if constexpr (kVec) {
      float gv[V], uv[V];
      load_vec(g, gv);
      load_vec(g + inter, uv);
#pragma unroll
      for (int j = 0; j < V; ++j) gv[j] = silu_times(gv[j], uv[j]);
      store_vec(out + t * inter + c, gv);
    } else {
      out[t * inter + c] = from_f32<T>(silu_times(to_f32(g[0]), to_f32(g[inter])));
    }
  }
}

}  // namespace

Status silu_mul(const void* gate_up, int64_t tokens, int64_t inter, DType dtype, void* out,
                cudaStream_t stream) {
  if (tokens <= 0 || inter <= 0) return {};
  if (!gate_up || !out) return invalid_argument("silu_mul: null tensor");
  return dispatch_float(dtype, "silu_mul", [&]<typename T>() {
    const bool vec = inter % kVecElems<T> == 0 && aligned16(gate_up) && aligned16(out);
    if (vec) {
      silu_mul_kernel<T, true><<<grid_for(tokens * inter / kVecElems<T>, 256), 256, 0, stream>>>(
          static_cast<const T*>(gate_up), tokens, inter, static_cast<T*>(out));
    } else {
      silu_mul_kernel<T, false><<<grid_for(tokens * inter, 256), 256, 0, stream>>>(
          static_cast<const T*>(gate_up), tokens, inter, static_cast<T*>(out));
    }
    return launch_status("silu_mul");
  });
}

}  // namespace ls::kernels::cuda
