#include "core/fp8.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ls {

float e4m3_to_f32(uint8_t code) {
  const bool negative = (code & 0x80u) != 0;
  const int e = (code >> 3) & 0xf;
  const int m = code & 0x7;
  if (e == 0xf && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude =
      e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(8.0f + static_cast<float>(m), e - 10);
  return negative ? -magnitude : magnitude;
}

uint8_t f32_to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  float a;
  std::memcpy(&a, &u, sizeof a);
  if (a >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7eu);
  if (a < 0.015625f) {  // below 2^-6: e4m3 subnormals, steps of 2^-9 (scaling by 512 is exact)
    const auto m = static_cast<uint32_t>(std::nearbyint(a * 512.0f));
    return static_cast<uint8_t>(sign | m);  // m == 8 is the smallest normal's code
  }
  // Keep 3 of the 23 mantissa bits, rounding to nearest even; a carry moves into the exponent.
  u += (1u << 19) - 1u + ((u >> 20) & 1u);
  const uint32_t code = (u >> 20) - ((127u - 7u) << 3);
  return static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7eu : code));
}

float quantize_row_e4m3(const float* x, int64_t n, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_e4m3(x[i] / scale);
  return scale;
}

}  // namespace ls
