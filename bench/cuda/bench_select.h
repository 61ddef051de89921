#pragma once
// The page-selection section of bench_cuda_kernels (bench_select.cpp): one-level against
// two-level selection (docs/two-level-summaries.md) on the lserve decode shape.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_common.h"

namespace ls::bench {

// data: "random" and/or "planted"; fine: "device" and/or "host" (where the fine summaries live).
void bench_select(CudaBackend& b, cudaStream_t stream, JsonLines& out,
                  const std::vector<int64_t>& batches, const std::vector<int64_t>& contexts,
                  const std::string& data, const std::string& fine, int32_t group_pages);

}  // namespace ls::bench
