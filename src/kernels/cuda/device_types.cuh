#pragma once
// Internal to kernels/cuda: the device element types behind core's float DTypes, exact widening
// to f32 and round-to-nearest-even narrowing (the conversions core/dtype.h does on the host), and
// 16-byte vector loads/stores of a few elements. Every kernel computes in f32 and rounds once
// when it stores.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace ls::kernels::cuda {

template <DType kDt>
struct DeviceType;
template <>
struct DeviceType<DType::kF32> {
  using T = float;
};
template <>
struct DeviceType<DType::kBF16> {
  using T = __nv_bfloat16;
};
template <>
struct DeviceType<DType::kF16> {
  using T = __half;
};

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// Elements of T in one 16-byte vector.
template <typename T>
inline constexpr int kVecElems = static_cast<int>(16 / sizeof(T));

// Loads kVecElems<T> consecutive elements (16-byte aligned) widened to f32.
template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[kVecElems<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVecElems<T>; ++i) out[i] = to_f32(e[i]);
}

// Stores kVecElems<T> f32 values rounded to T (16-byte aligned).
template <typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[kVecElems<T>]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVecElems<T>; ++i) e[i] = from_f32<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

}  // namespace ls::kernels::cuda
