// Row gather as raw bytes (the rows whose logits are wanted): one block per output row, 16-byte
// copies when rows allow, zeros for an out-of-range index.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

template <typename W>
__global__ void gather_rows_kernel(const W* x, int64_t num_x_rows, int64_t row_words,
                                   const int32_t* rows, W* out) {
  const int64_t r = blockIdx.x;
  const int32_t src_row = rows[r];
  const bool valid = src_row >= 0 && src_row < num_x_rows;
  const W* src = x + (valid ? static_cast<int64_t>(src_row) : 0) * row_words;
  W* dst = out + r * row_words;
  for (int64_t i = threadIdx.x; i < row_words; i += blockDim.x) {
    dst[i] = valid ? src[i] : W{};
  }
}

}  // namespace

Status gather_rows(const void* x, int64_t num_x_rows, int64_t row_bytes, const int32_t* rows,
                   int64_t num_rows, void* out, cudaStream_t stream) {
  if (num_rows <= 0) return {};
  if (!x || !rows || !out || row_bytes <= 0 || num_rows > INT32_MAX) {
    return invalid_argument("gather_rows: bad arguments");
  }
  if (row_bytes % 16 == 0 && aligned16(x) && aligned16(out)) {
    gather_rows_kernel<uint4><<<static_cast<unsigned>(num_rows), 128, 0, stream>>>(
        static_cast<const uint4*>(x), num_x_rows, row_bytes / 16, rows, static_cast<uint4*>(out));
  } else {
    gather_rows_kernel<uint8_t><<<static_cast<unsigned>(num_rows), 256, 0, stream>>>(
        static_cast<const uint8_t*>(x), num_x_rows, row_bytes, rows, static_cast<uint8_t*>(out));
  }
  return launch_status("gather_rows");
}

}  // namespace ls::kernels::cuda
