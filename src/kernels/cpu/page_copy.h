#pragma once
// Runs a batch of page copies (kernels/page_copy.h) on the CPU. Every method is the same plain
// copy here: the CPU backend's two tiers are both host RAM.

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/page_copy.h"

namespace ls::kernels::cpu {

// Checks the params (arrays, sizes, indices >= 0) and copies every listed page, spread over the
// pool's threads. Pages of one call must not overlap between src and dst.
Status page_copy(const PageCopyParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
