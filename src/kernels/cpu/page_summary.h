#pragma once
// Keeps per-logical-page key min/max exact as keys arrive (SummaryUpdateParams).

#include "core/thread_pool.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void page_summary_update(const SummaryUpdateParams& params, ThreadPool& pool);
void coarse_fold_pages(const CoarseFoldParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
