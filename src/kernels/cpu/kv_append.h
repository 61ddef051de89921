#pragma once
// Writes this step's K/V into the paged pools (kernels/paged_kv.h, KvAppendParams), then serves
// the index request, if any, with page_summary_update.

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

// f16 K/V pages: dst[i] = f16(src[i]) rounded to nearest even, except that magnitudes past
// f16's largest finite value saturate at +-65504 instead of becoming inf (one inf key makes a
// whole softmax row NaN); NaN stays NaN. Vectorised with F16C where compiled in. Each
// saturated element adds one to kv_f16_saturated_total().
void kv_store_f16(const float* src, uint16_t* dst, int64_t n);
// Elements kv_store_f16 saturated since the process started (all callers, all threads).
int64_t kv_f16_saturated_total();

void kv_append(const KvAppendParams& params, ThreadPool& pool);

}  // namespace ls::kernels::cpu
