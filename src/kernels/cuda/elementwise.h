#pragma once
// Launchers of the CUDA element-wise ops (one op per .cu file). They enqueue on `stream` and
// return at once; a Status reports bad arguments (checked on the host) or a failed launch, never
// a result. Tensors are contiguous device memory; `dtype` is f32, bf16 or f16 unless a comment
// says otherwise. All math is f32 with one rounding on the store, matching kernels/cpu on the
// same (rounded) inputs up to f32 summation order.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ls::kernels::cuda {

// out[r, :] = w * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)); x, out: [rows, dim] dtype (may alias);
// w: [dim] f32.
Status rmsnorm(const void* x, const float* w, float eps, int64_t rows, int64_t dim, DType dtype,
               void* out, cudaStream_t stream);

// x += residual (rounded to dtype and stored in x), then out = rmsnorm(x) as above: the residual
// add fused with the next norm (one read of x). x, residual, out: [rows, dim] (out may alias x).
Status add_rmsnorm(void* x, const void* residual, const float* w, float eps, int64_t rows,
                   int64_t dim, DType dtype, void* out, cudaStream_t stream);

// NeoX rotation of the first rotary_dim dims of every head, in place: with h = rotary_dim / 2,
// x[i] <- x[i] cos - x[i+h] sin, x[i+h] <- x[i+h] cos + x[i] sin (separate f32 roundings, as
// transformers). x: [tokens, heads, head_dim] dtype; cos, sin: [tokens, h] f32.
Status rope(void* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const float* cos, const float* sin, DType dtype, cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]; gate_up: [tokens, 2 inter];
// out: [tokens, inter].
Status silu_mul(const void* gate_up, int64_t tokens, int64_t inter, DType dtype, void* out,
                cudaStream_t stream);

// x[i] += y[i] for n elements.
Status add_inplace(void* x, const void* y, int64_t n, DType dtype, cudaStream_t stream);

// out[t, :] = table[ids[t] - first_id, :] converted to out_dtype; ids: [tokens] i32 (device);
// table: [vocab, hidden] table_dtype, the rows of ids [first_id, first_id + vocab). A row whose
// id is outside that range is written as zeros (first_id > 0: a vocabulary-parallel slice).
Status embedding(const int32_t* ids, int64_t tokens, const void* table, DType table_dtype,
                 int64_t vocab, int64_t hidden, int64_t first_id, void* out, DType out_dtype,
                 cudaStream_t stream);

// out[i, :] = x[rows[i], :] as raw bytes; rows: [num_rows] i32 (device); x: [num_x_rows,
// row_bytes]; an index outside [0, num_x_rows) gives a zero row.
Status gather_rows(const void* x, int64_t num_x_rows, int64_t row_bytes, const int32_t* rows,
                   int64_t num_rows, void* out, cudaStream_t stream);

// dst[i] = src[i] converted between float dtypes (n elements).
Status convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
               cudaStream_t stream);

// out[m, :] += bias (f32); out: [rows, cols] dtype.
Status bias_add(void* out, const float* bias, int64_t rows, int64_t cols, DType dtype,
                cudaStream_t stream);

}  // namespace ls::kernels::cuda
