#include "backend/backend_factory.h"

#if defined(LONGSERVE_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace ls {

bool cuda_backend_built() {
#if defined(LONGSERVE_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view device, int num_threads) {
  if (device == "cpu") return make_cpu_backend(num_threads);
  if (device == "cuda") {
#if defined(LONGSERVE_HAVE_CUDA)
    return make_cuda_backend(0);
#else
    return unimplemented("--device cuda: this build has no CUDA backend (nvcc was not found)");
#endif
  }
  return invalid_argument("unknown device '{}' (cpu or cuda)", device);
}

}  // namespace ls
