// SwiGLU's gate: silu(g) * u with silu(g) = g / (1 + exp(-g)) (torch's formula), f32 math and
// one rounding. Vectorised 16 bytes at a time when the row length allows; 32-bit index math when
// the sizes allow (64-bit division costs more than the math at decode sizes).

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

__device__ __forceinline__ float silu_times(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u);
}

template <typename T, bool kVec, typename I>
__global__ void silu_mul_kernel(const T* gate_up, I tokens, I inter, T* out) {
  constexpr int V = kVec ? kVecElems<T> : 1;
  const I per_row = inter / V;
  const I total = tokens * per_row;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I t = i / per_row;
    const I c = (i % per_row) * V;
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
    const auto run = [&]<typename I>() {
      if (vec) {
        silu_mul_kernel<T, true, I>
            <<<grid_for(tokens * inter / kVecElems<T>, 256), 256, 0, stream>>>(
                static_cast<const T*>(gate_up), static_cast<I>(tokens), static_cast<I>(inter),
                static_cast<T*>(out));
      } else {
        silu_mul_kernel<T, false, I><<<grid_for(tokens * inter, 256), 256, 0, stream>>>(
            static_cast<const T*>(gate_up), static_cast<I>(tokens), static_cast<I>(inter),
            static_cast<T*>(out));
      }
    };
    // 32-bit: every element offset (t * 2 inter + c + inter < 2 tokens inter) and loop index
    // (< tokens inter + 2^19) fits.
    if (2 * tokens * inter < (int64_t{1} << 30)) {
      run.template operator()<int32_t>();
    } else {
      run.template operator()<int64_t>();
    }
    return launch_status("silu_mul");
  });
}

}  // namespace ls::kernels::cuda
