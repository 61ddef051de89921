#pragma once
// Launchers of the device page cache's residency ops (kernels/page_residency.h) on the GPU. Every
// pointer is device memory; nothing is read back, so both can be captured in a CUDA graph.

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/page_residency.h"

namespace ls::kernels::cuda {

// Zeroes *copy_count, then one block per sequence runs the rule (needs params.scratch and
// params.counters).
Status page_residency(const PageResidencyParams& params, cudaStream_t stream);

Status page_residency_reset(const ResidencyResetParams& params, cudaStream_t stream);

}  // namespace ls::kernels::cuda
