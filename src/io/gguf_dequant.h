#pragma once
// Dequantization of ggml blocks to f32: the reference meaning of every supported GGUF tensor type
// (the formulas of ggml-quants.c's dequantize_row_*). Used at load time to turn quantized weights
// into the f32/bf16 matrices the backends compute with, and as the oracle the quantized kernels
// are tested against.

#include <cstdint>

#include "core/status.h"
#include "io/gguf.h"

namespace ls {

// True for the types dequantize_row handles: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K.
bool ggml_type_dequantizable(GgmlType type);

// Dequantizes `n` elements (a multiple of the type's block size) from `src` (n / block elems
// blocks, any alignment) into dst[n]. kUnimplemented for a type ggml_type_dequantizable rejects;
// kInvalidArgument when n is not a whole number of blocks.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace ls
