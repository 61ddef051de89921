// tests/cuda/delayed_copy.h: one block that triggers its dependents, spins on the global timer,
// copies byte ranges, and records when it finished.

#include "delayed_copy.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/decode_trace.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace ls::cuda_test {
namespace {

__global__ void delayed_copy_kernel(const ByteCopy* copies, int32_t n, int64_t spin_ns,
                                    uint64_t* end_ns) {
  kernels::cuda::pdl_launch_dependents();  // the next kernel may start now
  kernels::cuda::pdl_wait();               // and this one waits for the one before it
  if (threadIdx.x == 0) {
    const uint64_t until = kernels::cuda::trace_now() + static_cast<uint64_t>(spin_ns);
    while (kernels::cuda::trace_now() < until) {
    }
  }
  __syncthreads();
  for (int32_t i = 0; i < n; ++i) {
    const ByteCopy c = copies[i];
    auto* dst = static_cast<unsigned char*>(c.dst);
    const auto* src = static_cast<const unsigned char*>(c.src);
    for (int64_t b = threadIdx.x; b < c.bytes; b += blockDim.x) dst[b] = src[b];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *end_ns = kernels::cuda::trace_now();
}

}  // namespace

Status launch_delayed_copies(const std::vector<ByteCopy>& copies, int64_t spin_ns, uint64_t* end_ns,
                             void* stream) {
  static ByteCopy* list = nullptr;  // one list for the test binary, grown as needed
  static size_t capacity = 0;
  if (copies.size() > capacity) {
    if (list) LS_RETURN_IF_ERROR(kernels::cuda::cuda_status(cudaFree(list), "cudaFree"));
    LS_RETURN_IF_ERROR(kernels::cuda::cuda_status(
        cudaMalloc(&list, copies.size() * sizeof(ByteCopy)), "cudaMalloc"));
    capacity = copies.size();
  }
  auto s = static_cast<cudaStream_t>(stream);
  LS_RETURN_IF_ERROR(kernels::cuda::cuda_status(
      cudaMemcpyAsync(list, copies.data(), copies.size() * sizeof(ByteCopy), cudaMemcpyHostToDevice,
                      s),
      "cudaMemcpyAsync"));
  LS_RETURN_IF_ERROR(kernels::cuda::cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
  return kernels::cuda::launch_pdl(delayed_copy_kernel, dim3(1), 256, 0, s, "delayed_copy_kernel",
                                   static_cast<const ByteCopy*>(list),
                                   static_cast<int32_t>(copies.size()), spin_ns, end_ns);
}

}  // namespace ls::cuda_test
