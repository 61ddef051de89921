#pragma once
// The peer-to-peer Communicator (docs/p2p-all-reduce.md): wraps one group's NCCL communicators
// and all-reduces small messages (f32 / bf16 / f16, up to DeviceCommOptions::p2p_max_bytes) with
// the one-shot kernel of kernels/cuda/p2p_all_reduce.h over memory the ranks' GPUs read from each
// other (cudaDeviceEnablePeerAccess: one process, no IPC). Larger messages, other dtypes,
// all_gather and barrier go to the wrapped NCCL communicator. abort() sets the group's abort
// word, which ends the kernels' waits, and aborts NCCL; the group cannot be reset after that, nor
// after a kernel's wait timed out (its ranks are then out of step).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/status.h"

namespace ls {

// Ok when every ordered pair of the devices can access the other's memory; else an error naming
// the first pair that cannot.
Status check_peer_access(const std::vector<int>& devices);

// backends[r]: CUDA backends on distinct devices; fallback[r]: the communicator rank r uses for
// what the kernel does not take (NCCL's, over the same backends). Where some pair of devices has
// no peer access, or the group size is not 2, 4 or 8, returns `fallback` unchanged (with a log
// line), or the error when `required`.
Result<std::vector<std::unique_ptr<Communicator>>> wrap_with_p2p_all_reduce(
    const std::vector<Backend*>& backends, std::vector<std::unique_ptr<Communicator>> fallback,
    const DeviceCommOptions& options, bool required);

// What a rank's all-reduces went through so far (tests, benchmarks); the communicator must be one
// wrap_with_p2p_all_reduce made ("p2p"), else zeros.
struct P2pCallCounts {
  int64_t p2p = 0;
  int64_t fallback = 0;
};
P2pCallCounts p2p_call_counts(const Communicator& comm);

}  // namespace ls
