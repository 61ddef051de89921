#pragma once
// Creates a backend by device name: "cpu", or "cuda" in builds with the CUDA backend.

#include <memory>
#include <string_view>

#include "backend/backend.h"

namespace ls {

Result<std::unique_ptr<Backend>> make_backend(std::string_view device, int num_threads);
bool cuda_backend_built();

}  // namespace ls
