#include "core/dtype.h"
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace ls {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_nbytes(DType::kI4, 5), 3);
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::kBF16);
  EXPECT_EQ(dtype_name(DType::kF16), "f16");
  EXPECT_FALSE(dtype_from_name("q4_k").has_value());
}

TEST(DType, Bf16RoundTripAndRounding) {
  // Every bf16 bit pattern that is a finite number survives f32 and back.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bf16_to_f32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_bf16(f), bits) << b;
  }
  // 1 + 2^-8 is exactly between bf16 neighbours 1 and 1+2^-7: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
}

TEST(DType, F16MatchesReferenceRounding) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = f16_to_f32(bits);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), bits) << b;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-60000.f, 60000.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = dist(rng);
    EXPECT_LE(std::fabs(f16_to_f32(f32_to_f16(x)) - x), std::fabs(x) * 4.9e-4f + 1e-7f);
  }
}

TEST(DType, ConvertBuffers) {
  const float src[4] = {1.5f, -2.25f, 0.0f, 1e-3f};
  uint16_t half[4];
  float back[4];
  convert_from_f32(src, DType::kBF16, half, 4);
  convert_to_f32(DType::kBF16, half, back, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(back[i], src[i], std::fabs(src[i]) / 128 + 1e-9);
}

// e4m3 by brute force over its 256 codes: every finite code's value is what the format
// defines (sign, 4-bit exponent with bias 7, 3-bit mantissa, subnormals below 2^-6), encoding
// returns it exactly, midpoints between neighbours round to the even code, and anything past
// 448 saturates.
TEST(Fp8, E4m3CodesRoundTripAndRoundToEven) {
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  for (int c = 0; c < 0x7f; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_e4m3(v), c) << c;
    EXPECT_EQ(f32_to_e4m3(-v), c == 0 ? 0x80 : c | 0x80) << c;
    if (c + 1 < 0x7f) {
      const float next = e4m3_to_f32(static_cast<uint8_t>(c + 1));
      const float mid = (v + next) / 2;  // exact in f32
      EXPECT_EQ(f32_to_e4m3(mid), c % 2 == 0 ? c : c + 1) << c;
      EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.0f)), c) << c;
      EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1e9f)), c + 1) << c;
    }
  }
  EXPECT_EQ(f32_to_e4m3(460.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -11)), 0);  // below half the smallest subnormal
}

// A row's scale maps its largest magnitude to 448, and every element comes back within half an
// e4m3 step: relative 2^-4 in the normal range, scale * 2^-10 among the subnormals.
TEST(Fp8, QuantizeRowBound) {
  std::vector<float> x(300);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(static_cast<float>(i) * 0.37f) * std::exp(static_cast<float>(i % 17) - 8.0f);
  }
  std::vector<uint8_t> q(x.size());
  const float scale = quantize_row_e4m3(x.data(), static_cast<int64_t>(x.size()), q.data());
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(scale, amax / 448.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    const double back = static_cast<double>(e4m3_to_f32(q[i])) * scale;
    const double bound = std::max(std::fabs(static_cast<double>(x[i])) * std::ldexp(1.0, -4),
                                  scale * std::ldexp(1.0, -10));
    EXPECT_LE(std::fabs(back - x[i]), bound * (1 + 1e-6)) << i;
  }
  std::vector<float> zeros(8, 0.0f);
  EXPECT_EQ(quantize_row_e4m3(zeros.data(), 8, q.data()), 1.0f);
  EXPECT_EQ(q[0], 0);
}

}  // namespace
}  // namespace ls
