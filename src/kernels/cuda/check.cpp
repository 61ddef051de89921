#include "kernels/cuda/check.h"

namespace ls::kernels::cuda {

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return {};
  if (err == cudaErrorMemoryAllocation) {
    return resource_exhausted("{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
  }
  return internal_error("{}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

Status launch_status(std::string_view kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return {};
  return internal_error("launching {}: {} ({})", kernel, cudaGetErrorString(err),
                        cudaGetErrorName(err));
}

bool is_sticky_error(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

}  // namespace ls::kernels::cuda
