#pragma once
// The NCCL Communicator (docs/tensor-parallel.md): one communicator per rank of one process,
// made together by ncclCommInitAll over the ranks' GPUs. Rank r's collectives are enqueued on
// rank r's CudaBackend stream, so they run in order with its ops and a recorded decode step
// (CUDA graph) captures them. abort() calls ncclCommAbort on every rank's communicator, one
// thread each, which ends kernels waiting on a rank that failed, and returns at once; the
// teardown finishes once the ranks dropped their recordings, and wait_abort() waits for it. An
// aborted group cannot be reset.

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/status.h"

namespace ls {

// backends[r] must be CUDA backends on distinct devices; rank r is bound to backends[r].
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    const std::vector<Backend*>& backends);

}  // namespace ls
