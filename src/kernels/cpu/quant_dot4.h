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
//
// quant_dot4_vnni is the same kernel with AVX512_VNNI's vpdpbusd (u8 x s8 -> int32, replacing
// maddubs + madd) and vpdpwssd (s16 x s16 -> int32 accumulate, replacing madd + add) on 256-bit
// vectors (AVX512VL). Its integer sums equal the AVX2 kernel's exactly (maddubs never saturates
// on these operands), so the results are identical. LS_QUANT_DOT4_VNNI says the build targets
// those instructions; without it quant_dot4_vnni runs the AVX2 sequences in its place (the same
// arithmetic; tests use that to check the variant's structure on AVX2-only machines).

#include <cstdint>

#include "kernels/cpu/quant_matmul.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LS_QUANT_DOT4 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LS_QUANT_DOT4_VNNI 1
#endif

namespace ls::kernels::cpu {

// out[t * out_stride + j] = weight row j . activation row t, for j < 4 and t < act_rows (1, 2
// or 4): w is row 0's first block, row j starts at w + j * row_bytes; nblocks weight blocks per
// row; activation row t is act + t * act_stride (cols / 32 Q8 blocks). With several activation
// rows each weight block is loaded, unpacked and its scales decoded once for all of them.
void quant_dot4_avx2(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
                     int64_t act_stride, int64_t nblocks, float* out, int64_t out_stride,
                     int act_rows);
void quant_dot4_vnni(QuantType type, const uint8_t* w, int64_t row_bytes, const Q8Block* act,
                     int64_t act_stride, int64_t nblocks, float* out, int64_t out_stride,
                     int act_rows);
// The most activation rows one call handles in registers: 4 for the 32-element types, 2 for the
// K-quants (more are split into calls of 2).
int quant_dot4_rows(QuantType type);

}  // namespace ls::kernels::cpu
#endif
