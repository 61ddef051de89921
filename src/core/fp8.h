#pragma once
// FP8 e4m3 ("e4m3fn", as torch.float8_e4m3fn and the OCP spec): 1 sign bit, 4 exponent bits
// (bias 7), 3 mantissa bits; no infinities, 0x7f / 0xff are NaN, the largest finite value is 448.
// Host-side conversions used where weights are quantized or dequantized at load.

#include <cstdint>

namespace ls {

inline constexpr float kE4m3Max = 448.0f;

// The exact value of an e4m3 code (NaN for 0x7f / 0xff).
float e4m3_to_f32(uint8_t code);

// Round to nearest, ties to even, saturating to +-448 (what quantizers want: a scaled value
// never overflows into NaN); NaN stays NaN (0x7f with the sign).
uint8_t f32_to_e4m3(float f);

// One row quantized with its own scale: scale = max|x| / 448 (1 when the row is all zeros, so
// dequantization stays exact), q[i] = e4m3(x[i] / scale). x ~= q * scale, each element within
// half an e4m3 step (relative 2^-4) of x, or within scale * 2^-10 in e4m3's subnormal range.
// Returns the scale.
float quantize_row_e4m3(const float* x, int64_t n, uint8_t* q);

}  // namespace ls
