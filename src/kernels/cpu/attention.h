#pragma once
// Paged attention over head-wise pages for a mixed batch (prefill chunks and decode tokens),
// following the plan in AttentionParams (kernels/paged_kv.h). Online softmax in fp32; visits
// only the pages a query block can see (causal bound, Λ window, selected list), so cost is
// proportional to the blocks actually computed.

#include "core/thread_pool.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void paged_attention(const AttentionParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
