#pragma once
// Writes this step's K/V into the paged pools (kernels/paged_kv.h, KvAppendParams).

#include "core/thread_pool.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void kv_append(const KvAppendParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
