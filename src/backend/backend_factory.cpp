#include "backend/backend_factory.h"

#include <utility>

#if defined(LONGSERVE_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif
#if defined(LONGSERVE_HAVE_NCCL)
#include "backend/cuda/nccl_communicator.h"
#include "backend/cuda/p2p_communicator.h"
#endif

namespace ls {

bool cuda_backend_built() {
#if defined(LONGSERVE_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view device, int num_threads, int device_index) {
  if (device == "cpu") return make_cpu_backend(num_threads);
  if (device == "cuda") {
#if defined(LONGSERVE_HAVE_CUDA)
    return make_cuda_backend(device_index);
#else
    (void)device_index;
    return unimplemented("--device cuda: this build has no CUDA backend (nvcc was not found)");
#endif
  }
  return invalid_argument("unknown device '{}' (cpu or cuda)", device);
}

Result<std::vector<std::unique_ptr<Communicator>>> make_device_communicators(
    const std::vector<Backend*>& backends, const DeviceCommOptions& options) {
  if (options.all_reduce != "auto" && options.all_reduce != "nccl" &&
      options.all_reduce != "p2p") {
    return invalid_argument("--tp-all-reduce must be auto, nccl or p2p (got '{}')",
                            options.all_reduce);
  }
#if defined(LONGSERVE_HAVE_NCCL)
  LS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Communicator>> nccl,
                      make_nccl_communicators(backends));
  if (options.all_reduce == "nccl") return nccl;
  return wrap_with_p2p_all_reduce(backends, std::move(nccl), options,
                                  /*required=*/options.all_reduce == "p2p");
#else
  (void)backends;
  return unimplemented(
      "tensor parallelism on GPUs needs NCCL, and this build has none (configure with NCCL "
      "installed: LONGSERVE_NCCL=AUTO finds nccl.h and libnccl)");
#endif
}

}  // namespace ls
