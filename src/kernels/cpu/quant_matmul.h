#pragma once
// Matrix products that read ggml-quantized weight blocks directly (as llama.cpp's CPU backend
// does): the activations are quantized to int8 in blocks of 32 with one f32 scale per group of
// 32 (ggml's Q8_0 / Q8_1) or, for matrices with K-quant parts, per group of 256 (ggml's Q8_K);
// each weight block is multiplied with them in integers, and the block's scales are applied once
// per block. Against dequantize-then-f32, the only extra error is the activations' rounding: at
// most half a step (d_x / 2) per element, so |y - y_f32| <= sum over 32-blocks of
// (d_x / 2) * sum |w|, d_x = max|x| over the block's group / 127 (the bound the tests assert).
//
// Weight block layouts (ggml-common.h), 32 or 256 weights per block:
//   Q8_0  f16 d; i8 q[32]                      w = d q
//   Q4_0  f16 d; u8 q[16] (nibbles)            w = d (q - 8)
//   Q4_1  f16 d, m; u8 q[16]                   w = d q + m
//   Q4_K  f16 d, dmin; u8 scales[12]; u8 q[128]            8 sub-blocks of 32: w = d sc q - dmin m
//   Q5_K  f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 q[128]  same with a 5th bit
//   Q6_K  u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d      16 groups of 16: w = d sc (q - 32)
// The CPU backend's linear runs quant_linear for weights kept quantized (GGUF models).
// AVX2 kernels for every type (maddubs on the unsigned nibbles against int8 activations, as
// llama.cpp's ggml_vec_dot_*_q8_*), the scalar formulas otherwise. Isa::kAvx512 runs the
// four-row kernels with AVX512_VNNI's vpdpbusd / vpdpwssd on 256-bit vectors where the build
// targets AVX512_VNNI + AVX512VL (kernels/cpu/quant_dot4.h; identical results to AVX2's), else
// the AVX2 kernels; activation quantization and the last rows % 4 run the AVX2 code on both.

#include <cstdint>
#include <string_view>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/quant_format.h"

namespace ls::kernels::cpu {

using kernels::QuantMatrix;
using kernels::QuantPart;
using kernels::QuantType;
using kernels::quant_block_bytes;
using kernels::quant_block_elems;

// One block of 32 quantized activations: x ~= d * q; sum = sum(q) (for the weight minimums).
struct Q8Block {
  float d = 0;
  int32_t sum = 0;
  int8_t q[32] = {};
};

// x[n] -> out[n / 32] (n a multiple of `group`, 32 or 256): per group of `group` values,
// d = max|x| / 127 and q = round(x / d) (to nearest, ties to even); the group's blocks share d.
// Matrices with K-quant parts take groups of 256 (ggml's Q8_K granularity): one activation scale
// per 256-weight block lets the K-quant kernels apply the integer sub-block scales in integers
// and convert once per block.
void quantize_activations(const float* x, int64_t n, Q8Block* out, Isa isa, int64_t group = 32);
void quantize_activations(const float* x, int64_t n, Q8Block* out, int64_t group = 32);
// The activation group of a weight type: 256 for the K-quants, 32 otherwise.
int64_t activation_group(QuantType type);

// Whether quant_matmul / quant_linear with `isa` run the VNNI kernels (kAvx512 in a build that
// targets AVX512_VNNI + AVX512VL), and the kernel family's name for reports: "scalar", "avx2"
// (maddubs) or "avx512vnni" (vpdpbusd).
bool quant_uses_vnni(Isa isa);
std::string_view quant_kernel_name(Isa isa);

// y[m, rows] = x[m, cols] . W^T, where W is [rows, cols] in `type` blocks (row-major, each row
// cols / block elems blocks; cols a multiple of 256 for the K types, of 32 otherwise). Any
// alignment. Single-threaded: callers split the rows.
void quant_matmul(QuantType type, const void* w, int64_t rows, int64_t cols, const float* x,
                  int64_t m, float* y, Isa isa);
void quant_matmul(QuantType type, const void* w, int64_t rows, int64_t cols, const float* x,
                  int64_t m, float* y);

// y[m, w.rows] = x[m, w.cols] . W^T (+ bias[w.rows]) over the pool: x is quantized once per
// call (rows split over the pool), then each part's rows are split over the pool in tiles of 16
// rows x 16 activation rows. w.cols must be a whole number of every part's blocks.
void quant_linear(const QuantMatrix& w, const float* x, int64_t m, const float* bias, float* y,
                  ThreadPool& pool, Isa isa);
void quant_linear(const QuantMatrix& w, const float* x, int64_t m, const float* bias, float* y,
                  ThreadPool& pool);

}  // namespace ls::kernels::cpu
