#pragma once
// Residency lookup/replacement and partition reset of the device page cache on the CPU
// (kernels/page_residency.h states the rule).

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/page_residency.h"

namespace ls::kernels::cpu {

// Checks the params, then runs the rule of page_residency.h for every sequence. Overflow is
// reported through params.error (the data-plane way, as on the GPU), bad params as a Status.
Status page_residency(const PageResidencyParams& params, ThreadPool& pool);

Status page_residency_reset(const ResidencyResetParams& params);

}  // namespace ls::kernels::cpu
