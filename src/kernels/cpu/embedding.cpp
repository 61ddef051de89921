#include "kernels/cpu/embedding.h"

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

}  // namespace ls::kernels::cpu
