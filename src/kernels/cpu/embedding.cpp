#include "kernels/cpu/embedding.h"

#include <algorithm>

#include "kernels/cpu/elementwise_grain.h"

namespace ls::kernels::cpu {

void embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
               int64_t hidden, float* out, ThreadPool& pool) {
  if (tokens <= 0 || hidden <= 0) return;
  const int64_t row_bytes = dtype_nbytes(table_dtype, hidden);
  const auto* base = static_cast<const char*>(table);
  pool.parallel_for(tokens, rows_grain(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      convert_to_f32(table_dtype, base + static_cast<int64_t>(ids[t]) * row_bytes, out + t * hidden,
                     hidden);
    }
  });
}

void embedding_slice(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
                     int64_t vocab, int64_t hidden, int64_t first_id, float* out,
                     ThreadPool& pool) {
  if (tokens <= 0 || hidden <= 0) return;
  const int64_t row_bytes = dtype_nbytes(table_dtype, hidden);
  const auto* base = static_cast<const char*>(table);
  pool.parallel_for(tokens, rows_grain(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = static_cast<int64_t>(ids[t]) - first_id;
      if (row >= 0 && row < vocab) {
        convert_to_f32(table_dtype, base + row * row_bytes, out + t * hidden, hidden);
      } else {
        std::fill(out + t * hidden, out + (t + 1) * hidden, 0.0f);
      }
    }
  });
}

}  // namespace ls::kernels::cpu
