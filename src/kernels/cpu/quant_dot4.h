#pragma once
// AVX2 micro-kernels of the quantized matmul (quant_matmul.cpp) that take four consecutive weight
// rows at once against one row of quantized activations. Against one row at a time they load and
// prepare each activation block once for four rows, gather the four rows' block scales into one
// vector, and sum the four rows' integer dot products with one convert and one FMA per block (the
// horizontal adds that a single row pays once per row are paid once per four rows). The integer
// arithmetic per block is the same as row_dot's, so the results agree with it up to float
// summation order.
//
// The K-quant kernels (Q4_K, Q5_K, Q6_K) need activations quantized in groups of 256
// (quantize_activations(..., group 256)): they take one activation scale per weight block.
//
// Built only where the compiler targets AVX2 (LS_QUANT_DOT4 is then defined); callers take the
// row-at-a-time path for the last rows % 4 and on other ISAs.

#include <cstdint>

#include "kernels/cpu/quant_matmul.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LS_QUANT_DOT4 1

namespace ls::kernels::cpu {

// out[j] = weight row j . activations, for j < 4: w is row 0's first block, row j starts at
// w + j * row_bytes; nblocks weight blocks per row; act holds the row's cols / 32 Q8 blocks.
void quant_dot4_avx2(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
                     int64_t nblocks, float* out);
// The same for two activation rows at once (act and act + act_stride blocks; outputs out[0..3]
// and out[out_stride..out_stride + 3]): each weight block is unpacked once for both.
void quant_dot4x2_avx2(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
                       int64_t act_stride, int64_t nblocks, float* out, int64_t out_stride);

}  // namespace ls::kernels::cpu
#endif
