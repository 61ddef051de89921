#pragma once
// CUDA runtime results as Status values. Every runtime call in kernels/cuda and backend/cuda goes
// through these, so a failure names the call that failed ("cudaMalloc(...): out of memory").

#include <cuda_runtime_api.h>

#include <string_view>

#include "core/status.h"

namespace ls::kernels::cuda {

// Ok for cudaSuccess, else an error naming `what` and CUDA's description of `err`
// (resource_exhausted for allocation failures, internal for everything else).
Status cuda_status(cudaError_t err, std::string_view what);

// The error of the last kernel launch (cudaGetLastError), naming `kernel`.
Status launch_status(std::string_view kernel);

// True for errors that leave the CUDA context unusable (illegal address, launch failure, ...):
// every later call in the process fails the same way.
bool is_sticky_error(cudaError_t err);

}  // namespace ls::kernels::cuda

#define LS_CUDA_RETURN_IF_ERROR(call) \
  LS_RETURN_IF_ERROR(::ls::kernels::cuda::cuda_status((call), #call))
