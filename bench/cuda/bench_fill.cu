#include <cuda_bf16.h>

#include "bench_fill.h"

namespace ls::bench {

namespace {

__device__ __forceinline__ uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = mix(seed ^ (static_cast<uint64_t>(i) * 0x2545f4914f6cdd1dull));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16_rn(lo + (hi - lo) * u);
  }
}

}  // namespace

cudaError_t fill_uniform_bf16(void* p, int64_t n, uint64_t seed, float lo, float hi,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  fill_kernel<<<132 * 8, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(p), n, seed, lo, hi);
  return cudaGetLastError();
}

}  // namespace ls::bench
