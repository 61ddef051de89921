#pragma once
// Matrix products that read ggml-quantized weight blocks directly (as llama.cpp's CPU backend
// does): the activations are quantized per block of 32 to int8 with one f32 scale (ggml's Q8_0 /
// Q8_1), each weight block is multiplied with them in integers, and the block's scales are
// applied once per block. Against dequantize-then-f32, the only extra error is the activations'
// rounding: at most half a step (d_x / 2) per element, so |y - y_f32| <= sum over blocks of
// (d_x / 2) * sum |w| (the bound the tests assert).
//
// Weight block layouts (ggml-common.h), 32 or 256 weights per block:
//   Q8_0  f16 d; i8 q[32]                      w = d q
//   Q4_0  f16 d; u8 q[16] (nibbles)            w = d (q - 8)
//   Q4_1  f16 d, m; u8 q[16]                   w = d q + m
//   Q4_K  f16 d, dmin; u8 scales[12]; u8 q[128]            8 sub-blocks of 32: w = d sc q - dmin m
//   Q5_K  f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 q[128]  same with a 5th bit
//   Q6_K  u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d      16 groups of 16: w = d sc (q - 32)
// Not a kernel of the model yet: the GGUF loader dequantizes at load; wiring these into the
// CPU backend's linear layers is the next step (docs/gguf.md).

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

enum class QuantType { kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ5_K, kQ6_K };

int64_t quant_block_elems(QuantType type);  // 32 or 256
int64_t quant_block_bytes(QuantType type);

// One block of 32 quantized activations: x ~= d * q; sum = sum(q) (for the weight minimums).
struct Q8Block {
  float d = 0;
  int32_t sum = 0;
  int8_t q[32] = {};
};

// x[n] -> out[n / 32] (n a multiple of 32): d = max|x| / 127, q = round(x / d).
void quantize_activations(const float* x, int64_t n, Q8Block* out);

// y[m, rows] = x[m, cols] . W^T, where W is [rows, cols] in `type` blocks (row-major, each row
// cols / block elems blocks; cols a multiple of 256 for the K types, of 32 otherwise). Any
// alignment. Single-threaded: callers split the rows.
void quant_matmul(QuantType type, const void* w, int64_t rows, int64_t cols, const float* x,
                  int64_t m, float* y, Isa isa);
void quant_matmul(QuantType type, const void* w, int64_t rows, int64_t cols, const float* x,
                  int64_t m, float* y);

}  // namespace ls::kernels::cpu
