// Embedding lookup: one block per token row, the row converted from the table's dtype to the
// activation dtype. An id outside the table's rows gives a zero row (the host cannot see ids
// without a synchronisation; the model validates them before the step), which is also what a
// vocabulary-parallel slice (first_id > 0) gives for ids another rank holds.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename Tin, typename Tout>
__global__ void embedding_kernel(const int32_t* ids, const Tin* table, int64_t vocab,
                                 int64_t hidden, int64_t first_id, Tout* out) {
  const int64_t t = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[t]) - first_id;
  Tout* dst = out + t * hidden;
  const bool valid = id >= 0 && id < vocab;
  const Tin* src = table + (valid ? id : 0) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    dst[i] = from_f32<Tout>(valid ? to_f32(src[i]) : 0.0f);
  }
}

}  // namespace

Status embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
                 int64_t vocab, int64_t hidden, int64_t first_id, void* out, DType out_dtype,
                 cudaStream_t stream) {
  if (tokens <= 0) return {};
  if (!ids || !table || !out || hidden <= 0 || vocab <= 0 || tokens > INT32_MAX) {
    return invalid_argument("embedding: bad arguments");
  }
  return dispatch_float(table_dtype, "embedding", [&]<typename Tin>() {
    return dispatch_float(out_dtype, "embedding", [&]<typename Tout>() {
      embedding_kernel<Tin, Tout><<<static_cast<unsigned>(tokens), 256, 0, stream>>>(
          ids, static_cast<const Tin*>(table), vocab, hidden, first_id,
          static_cast<Tout*>(out));
      return launch_status("embedding");
    });
  });
}

}  // namespace ls::kernels::cuda
