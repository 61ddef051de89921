#pragma once
// Writes this step's K/V into the paged pools (kernels/paged_kv.h, KvAppendParams), then serves
// the index request, if any, with page_summary_update.

#include "core/thread_pool.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void kv_append(const KvAppendParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
