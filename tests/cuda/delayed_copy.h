#pragma once
// Test helper: a kernel launched as a programmatic dependent launch that lets the next kernel on
// the stream start at once (it triggers its dependents first), spins, and only then copies. The
// next kernel's reads before its griddepcontrol.wait therefore see the destinations' old
// contents, and its reads after the wait the new ones: what a test needs to show that a kernel
// reads nothing the previous kernel writes before that wait.

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace ls::cuda_test {

struct ByteCopy {
  void* dst = nullptr;        // device
  const void* src = nullptr;  // device
  int64_t bytes = 0;
};

// Enqueues on `stream` (a cudaStream_t): spin for `spin_ns` nanoseconds, then every copy, then
// store the device's global nanosecond timer in *end_ns (device memory). The copy list is
// uploaded synchronously first.
Status launch_delayed_copies(const std::vector<ByteCopy>& copies, int64_t spin_ns, uint64_t* end_ns,
                             void* stream);

}  // namespace ls::cuda_test
