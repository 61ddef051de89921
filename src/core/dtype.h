#pragma once
// Element types and their host-side conversions. bf16/f16 are stored as raw uint16_t bits.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ls {

enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kI4, kI32, kI64, kU8 };

// Bytes per element; kI4 packs two elements per byte and reports 0 (use dtype_nbytes).
int dtype_size(DType dtype);
// Bytes needed for `numel` elements (handles packed kI4).
int64_t dtype_nbytes(DType dtype, int64_t numel);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
std::optional<DType> dtype_from_name(std::string_view name);  // accepts "f32"/"float32"/"bf16"...

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round-to-nearest-even, NaN stays NaN (as torch does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float f);  // round-to-nearest-even, overflow to inf

// Converts `n` elements of `src` (dtype f32/f16/bf16) into f32.
void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n);
// Converts `n` f32 elements into `dst_dtype` (f32/f16/bf16).
void convert_from_f32(const float* src, DType dst_dtype, void* dst, int64_t n);

}  // namespace ls
