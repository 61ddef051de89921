#pragma once
// Internal to kernels/cuda: launching a kernel as a programmatic dependent launch (PDL), so it may
// start while the previous kernel on the stream drains. The kernel must execute
// `griddepcontrol.wait` before it reads anything an earlier kernel wrote (and trigger its own
// dependents, if at all, only after that wait; attention.cu's decode_prologue_kernel is the one
// documented exception). LONGSERVE_NO_PDL set in the environment: plain launches (for A/B
// timing and for ruling PDL out when something looks wrong).

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string_view>
#include <utility>

#include "kernels/cuda/check.h"

namespace ls::kernels::cuda {

// Launches kernel<<<grid, threads, smem, stream>>>(args...) as a programmatic dependent launch.
template <typename... Params, typename... Args>
Status launch_pdl(void (*kernel)(Params...), dim3 grid, int threads, size_t smem,
                  cudaStream_t stream, std::string_view what, Args&&... args) {
  static const bool pdl = std::getenv("LONGSERVE_NO_PDL") == nullptr;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cuda_status(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}

#ifdef __CUDACC__
// In a kernel launched with launch_pdl: blocks until every earlier kernel on the stream has
// finished and its writes are visible (a no-op in a plain launch).
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
// Lets the next kernel, if launched with launch_pdl, start once every block of this grid has
// called it or exited (it still waits for this whole grid). Call it only after pdl_wait(), so
// that a kernel starting early never runs beside any kernel but its immediate predecessor (the
// exception, attention.cu's decode_prologue_kernel, lets the decode kernel overlap the kernel
// before it, which is what the decode kernel overlapped without it).
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#endif

}  // namespace ls::kernels::cuda
