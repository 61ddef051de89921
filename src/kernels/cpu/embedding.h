#pragma once
// out[t, :] = table[ids[t], :] converted to f32; table: [vocab, hidden] f32/bf16/f16.
// ids must be in range (checked by the caller, which owns the error message).

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ls::kernels::cpu {

void embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
               int64_t hidden, float* out, ThreadPool& pool);

// Vocabulary-parallel: table holds the `vocab` rows of ids [first_id, first_id + vocab); other
// ids give zero rows.
void embedding_slice(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
                     int64_t vocab, int64_t hidden, int64_t first_id, float* out,
                     ThreadPool& pool);

}  // namespace ls::kernels::cpu
