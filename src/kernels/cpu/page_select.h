#pragma once
// Quest bounds over logical pages, max-reduced to physical pages, top-K (PageSelectParams).
// For every sequence with out_rows[s] >= 0 the whole output row is written: kSelected heads get
// their ascending page list (entries past num_selected are -1), other heads num_selected = 0
// and a row of -1. page_scores (when given) gets each page's group score for kSelected heads
// and -inf elsewhere (pages past the context, other heads). Sequences with out_rows[s] < 0 are
// not touched. NaN scores rank as -inf.

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void page_select(const PageSelectParams& params, ThreadPool& pool);
void page_select(const PageSelectParams& params, ThreadPool& pool, Isa isa);

}  // namespace ls::kernels::cpu
