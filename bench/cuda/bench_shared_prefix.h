#pragma once
// The shared-prefix section of bench_cuda_kernels (bench_shared_prefix.cpp): decode attention
// of a batch whose sequences share a long prefix (the same physical pages), with the ordinary
// per-sequence kernel against shared-prefix attention (kernels/cuda/shared_prefix_attention.h).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_common.h"

namespace ls::bench {

void bench_shared_prefix(CudaBackend& b, cudaStream_t stream, JsonLines& out,
                         const std::vector<int64_t>& batches, const std::vector<int64_t>& prefixes,
                         int64_t suffix_tokens, int64_t split_tokens);

}  // namespace ls::bench
