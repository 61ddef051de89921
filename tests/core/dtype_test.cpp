#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

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

}  // namespace
}  // namespace ls
