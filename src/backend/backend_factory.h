#pragma once
// Creates a backend by device name: "cpu", or "cuda" in builds with the CUDA backend.

#include <memory>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"

namespace ls {

// device_index: which GPU for "cuda" (a tensor-parallel rank's); ignored on the CPU.
Result<std::unique_ptr<Backend>> make_backend(std::string_view device, int num_threads,
                                              int device_index = 0);
bool cuda_backend_built();

// One device Communicator per backend (rank r bound to backends[r]): NCCL on CUDA backends in
// builds with NCCL (wrapped by the peer-to-peer all-reduce as `options` say); kUnimplemented
// otherwise.
Result<std::vector<std::unique_ptr<Communicator>>> make_device_communicators(
    const std::vector<Backend*>& backends, const DeviceCommOptions& options = {});

}  // namespace ls
