#pragma once
// Quest bounds over logical pages, max-reduced to physical pages, top-K (PageSelectParams).

#include "core/thread_pool.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void page_select(const PageSelectParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
