#pragma once
// Internal to kernels/cuda: dequantization of 16 bytes of a quantized page row's codes
// (kernels/kv_quant.h) in registers into the q dtype, shared by the attention kernels that read
// quantized pages (decode: attention_decode.cuh, prefill: attention_prefill.cuh and the
// warp-specialised wgmma kernel's producer, attention_prefill_wgmma_ws.cuh).

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/kv_fragments.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/kv_quant.h"

namespace ls::kernels::cuda {

// An integer code 0 <= b < 2^23 as f32, exactly: b in the mantissa of 2^23, then 2^23 removed
// (a LOP3 and an FADD instead of an I2F, which issues at a quarter of the FADD's rate).
__device__ __forceinline__ float code_to_f32(uint32_t b) {
  return __uint_as_float(0x4B000000u | b) - 8388608.0f;
}

// Bytes of one row's codes, and elements one 16-byte vector of codes holds.
template <int kD, KvQuant kQ>
inline constexpr int kQuantCodeBytes = kQ == KvQuant::kInt4 ? kD / 2 : kD;
template <KvQuant kQ>
inline constexpr int kQuantVecElems = kQ == KvQuant::kInt4 ? 32 : 16;

// The values of the 16 code bytes `w4` under (scale, zero), in T (one rounding of the f32
// value), as kQuantVecElems<kQ> / 8 16-byte chunks of 8 values each; zeros when !valid.
template <KvQuant kQ, typename T>
__device__ __forceinline__ void dequant_vec16_chunks(const uint4& w4, float scale, float zero,
                                                     bool valid,
                                                     uint4 (&chunks)[kQuantVecElems<kQ> / 8]) {
  constexpr int kElems = kQuantVecElems<kQ>;
  const uint32_t w[4] = {w4.x, w4.y, w4.z, w4.w};
  uint32_t out[kElems / 2];
  // Invalid rows as a mask, not `valid ? pack2(...) : 0`: the conversion is inline asm, which the
  // compiler does not speculate, so the conditional became a branch around every pair (BSSY /
  // BSYNC in SASS, ~20 instructions per value on an H200 under ncu).
  const uint32_t keep = valid ? 0xffffffffu : 0u;
#pragma unroll
  for (int j = 0; j < kElems / 2; ++j) {  // the pair of values 2j, 2j + 1
    float v0, v1;
    if constexpr (kQ == KvQuant::kInt4) {
      const uint32_t b = (w[j / 4] >> (8 * (j % 4))) & 0xffu;  // byte j: elements 2j, 2j + 1
      v0 = fmaf(code_to_f32(b & 0xfu), scale, zero);
      v1 = fmaf(code_to_f32(b >> 4), scale, zero);
    } else if constexpr (kQ == KvQuant::kFp8) {
      // Bytes 2j and 2j + 1 by the native e4m3x2 -> f16x2 conversion (exact: e4m3 is a subset
      // of f16, NaN stays NaN), widened to f32 exactly: one rounding, of code * scale.
      const uint32_t h2 =
          j % 2 == 0 ? e4m3x2_lo_to_f16x2(w[j / 2]) : e4m3x2_hi_to_f16x2(w[j / 2]);
      __half2 h;
      memcpy(&h, &h2, sizeof h);
      const float2 f = __half22float2(h);
      v0 = f.x * scale;
      v1 = f.y * scale;
    } else {
      // Byte k of the word as 2^23 + code in one PRMT (code_to_f32's bits without the shift
      // and mask), then 2^23 removed.
      const uint32_t k0 = 2 * (j % 2);
      const float c0 = __uint_as_float(__byte_perm(w[j / 2], 0x4B000000u, 0x7650u | k0));
      const float c1 = __uint_as_float(__byte_perm(w[j / 2], 0x4B000000u, 0x7650u | (k0 + 1)));
      v0 = fmaf(c0 - 8388608.0f, scale, zero);
      v1 = fmaf(c1 - 8388608.0f, scale, zero);
    }
    out[j] = pack2<T>(v0, v1) & keep;
  }
#pragma unroll
  for (int k = 0; k < kElems / 8; ++k) {
    chunks[k] = make_uint4(out[4 * k], out[4 * k + 1], out[4 * k + 2], out[4 * k + 3]);
  }
}

// dst[0, kQuantVecElems<kQ>) = dequant_vec16_chunks's values, stored contiguously (dst 16-byte
// aligned, shared memory).
template <KvQuant kQ, typename T>
__device__ __forceinline__ void dequant_vec16(const uint4& w4, float scale, float zero, bool valid,
                                              T* dst) {
  uint4 chunks[kQuantVecElems<kQ> / 8];
  dequant_vec16_chunks<kQ, T>(w4, scale, zero, valid, chunks);
  uint4* d = reinterpret_cast<uint4*>(dst);
#pragma unroll
  for (int k = 0; k < kQuantVecElems<kQ> / 8; ++k) d[k] = chunks[k];
}

// cp.async of a quantized row's kBytes (4 or 8) f32 parameters, or zeros (nothing read) when
// page < 0. The .ca form: .cg copies only 16 bytes.
template <int kBytes>
__device__ __forceinline__ void cp_async_params_or_zero(void* smem, const void* gmem,
                                                        int32_t page) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  asm volatile(
      "{\n .reg .pred z;\n setp.lt.s32 z, %2, 0;\n"
      " cp.async.ca.shared.global [%0], [%1], %3, z;\n}\n" ::"r"(smem_addr(smem)),
      "l"(gmem), "r"(page), "n"(kBytes));
}

// A quantized row's scale and zero point (fp8: zero 0) from its page's parameter block.
template <KvQuant kQ>
__device__ __forceinline__ float2 load_quant_params(const char* page, int64_t params_offset,
                                                    int32_t row) {
  const float* params = reinterpret_cast<const float*>(page + params_offset) +
                        static_cast<int64_t>(row) * kv_quant_params_per_token(kQ);
  if constexpr (kQ == KvQuant::kFp8) {
    return make_float2(params[0], 0.0f);
  } else {
    return *reinterpret_cast<const float2*>(params);
  }
}

}  // namespace ls::kernels::cuda
