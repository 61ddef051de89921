#pragma once
// Device-side random fill for the GPU benchmarks: gigabytes of KV cache and weights are filled
// on the GPU in milliseconds (never timed on zeros, which can run faster than real data).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ls::bench {

// p[i] = uniform in [lo, hi) as bf16 (a hash of (seed, i)), for n elements.
cudaError_t fill_uniform_bf16(void* p, int64_t n, uint64_t seed, float lo, float hi,
                              cudaStream_t stream);

}  // namespace ls::bench
