#pragma once
// Internal to kernels/cuda: mma.sync B fragments straight from a quantized page's code bytes
// (kernels/kv_quant.h), for the decode kernel (attention_decode.cuh). docs/kv-quantization.md
// ("Kernels") says why the decode works this way.
//
// With k = s_t c + z_t per token t (fp8: z_t = 0), the scale and zero point leave the inner loop:
//   q . k_t            = s_t (q . c_t) + z_t sum(q)
//   sum_t p_t v_t      = sum_t (p_t s_t) c_t + sum_t p_t z_t
// so both MMAs run on the raw codes, converted EXACTLY to f16 (fp8 e4m3 by the native
// cvt.rn.f16x2.e4m3x2; u8 codes 0..255 and u4 codes 0..15 by the magic-number trick: the code
// in the mantissa of 1024.0 (0x6400), then 1024 subtracted), one instruction per two codes plus,
// for int8 / int4, one subtraction per two codes; fp32 accumulation as everywhere.
//
// Fragment layouts (mma.cuh): B (16 x 8, col) b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g),
// lane = 4 g + t. The decode kernel runs the products swapped (S^T = K Q^T, O^T = V^T P^T: keys
// and head_dim are the 16 MMA rows, the query heads the 8 columns), and an A fragment (16 x 16,
// row) is two of these halves: a0 / a2 = b0 / b1 of row g, a1 / a3 = b0 / b1 of row g + 8 (K:
// key rows g and g + 8; V: n-tiles 2 d and 2 d + 1 below as head_dim rows g and g + 8). The
// reduction order is free, so:
//   - Q K^T (k = head_dim, n = key): the head_dim is permuted so that thread t of a key row
//     reads one run of contiguous code bytes of that row (8-bit: kD / 4 bytes at kD / 4 * t, i.e.
//     one 32-bit word per mma k-step; int4: kD / 8 bytes at kD / 8 * t, one word per two
//     k-steps). The queries take the same permutation (k_phys) once per block.
//   - P V (k = key, n = head_dim): the output columns are permuted instead: n-tile j, column g
//     holds head_dim element v_phys(j, g) = kD / 8 * g + j, so thread g reads one run of kD / 8
//     codes of each of its four key rows (2t, 2t + 1, 2t + 8, 2t + 9); the epilogue puts the
//     columns back.
//
// Stages hold the code rows packed ([64, kCodeBytes] u8) with their 16-byte chunks XOR-swizzled
// within each 128-byte line (code_offset), so that every shared load below is free of bank
// conflicts for 32-, 64- and 128-byte rows.

#include <cstdint>

#include "kernels/kv_quant.h"

namespace ls::kernels::cuda {

// Byte offset, within a stage of packed code rows of kCodeBytes bytes, of 16-byte chunk `chunk`
// of row `row`.
template <int kCodeBytes>
__device__ __forceinline__ int code_offset(int row, int chunk) {
  static_assert(kCodeBytes == 32 || kCodeBytes == 64 || kCodeBytes == 128, "code row bytes");
  constexpr int kRowsPerLine = 128 / kCodeBytes;
  constexpr int kChunks = kCodeBytes / 16;
  constexpr int kSwz = kCodeBytes == 128 ? 1 : 2;
  const int line = row / kRowsPerLine;
  const int pos = ((row % kRowsPerLine) * kChunks + chunk) ^ ((line * kSwz) & 7);
  return line * 128 + pos * 16;
}

// kBytes (4, 8 or 16, not crossing a 16-byte chunk) at byte `byte` of row `row` of a stage.
template <int kCodeBytes, int kBytes>
__device__ __forceinline__ void load_codes(const unsigned char* stage, int row, int byte,
                                           uint32_t* w) {
  const unsigned char* src = stage + code_offset<kCodeBytes>(row, byte / 16) + byte % 16;
  if constexpr (kBytes == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    w[0] = v.x;
    w[1] = v.y;
  } else {
    static_assert(kBytes == 4, "4, 8 or 16 bytes");
    w[0] = *reinterpret_cast<const uint32_t*>(src);
  }
}

// ---- exact code -> f16x2 conversions ----

inline constexpr uint32_t kF16Magic = 0x64006400u;  // (1024.0, 1024.0)

__device__ __forceinline__ uint32_t hsub2_u32(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ uint32_t hfma2_u32(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Bytes 0 and 1 of x (u8 codes) as f16 (low half: byte 0).
__device__ __forceinline__ uint32_t u8x2_lo_to_f16x2(uint32_t x) {
  return hsub2_u32(__byte_perm(x, 0x64646464u, 0x4140), kF16Magic);
}
// Bytes 2 and 3 of x as f16.
__device__ __forceinline__ uint32_t u8x2_hi_to_f16x2(uint32_t x) {
  return hsub2_u32(__byte_perm(x, 0x64646464u, 0x4342), kF16Magic);
}
// (x & kMask) | 0x64006400 as ONE lop3 (written in C, the compiler emits an AND and an OR: a
// LOP3 takes one immediate, and it does not put the other constant in a register).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or_magic(uint32_t x) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(x), "n"(kMask), "n"(kF16Magic));
  return d;
}
// Nibbles 0 and 4 of x (bits 0..3 and 16..19; u4 codes) as f16.
__device__ __forceinline__ uint32_t u4x2_lo_to_f16x2(uint32_t x) {
  return hsub2_u32(and_or_magic<0x000f000fu>(x), kF16Magic);
}
// Nibbles 1 and 5 of x (bits 4..7 and 20..23) as f16: 1024 + 16 c, times 1/16, minus 64.
__device__ __forceinline__ uint32_t u4x2_hi_to_f16x2(uint32_t x) {
  return hfma2_u32(and_or_magic<0x00f000f0u>(x), 0x2c002c00u, 0xd400d400u);
}
// e4m3 bytes 0 and 1 (resp. 2 and 3) of x as f16 (exact: e4m3 is a subset of f16; NaN stays
// NaN).
__device__ __forceinline__ uint32_t e4m3x2_lo_to_f16x2(uint32_t x) {
  uint32_t d;
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}"
      : "=r"(d)
      : "r"(x));
  return d;
}
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2(uint32_t x) {
  uint32_t d;
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, h;\n}"
      : "=r"(d)
      : "r"(x));
  return d;
}

// ---- Q K^T: one key row's codes as B fragments ----

// 32-bit words of a key row that thread t reads (8-bit: one per k-step; int4: one per two).
template <int kD, KvQuant kQ>
inline constexpr int kKWords = kQ == KvQuant::kInt4 ? kD / 32 : kD / 16;

// The words of key row `row` for thread t.
template <int kD, KvQuant kQ>
__device__ __forceinline__ void load_k_words(const unsigned char* stage, int row, int t,
                                             uint32_t (&w)[kKWords<kD, kQ>]) {
  constexpr int kCodeBytes = kQ == KvQuant::kInt4 ? kD / 2 : kD;
  constexpr int kBytes = 4 * kKWords<kD, kQ>;
#pragma unroll
  for (int c = 0; c < (kBytes + 15) / 16; ++c) {
    constexpr int kPiece = kBytes < 16 ? kBytes : 16;
    load_codes<kCodeBytes, kPiece>(stage, row, kBytes * t + 16 * c, w + 4 * c);
  }
}

// B fragment (b0, b1) of k-step kk from the thread's words of one key row. fp8: the values. int8 /
// int4: the codes plus an offset, one instruction per two codes (the subtraction is left out and
// undone once per score, k_offset_q): int8 1024 + c; int4 1024 + c in b0 (low nibbles) and
// 1024 + 16 c in b1 (high nibbles), whose query elements are scaled by 1/16 (k_query_weight).
template <KvQuant kQ>
__device__ __forceinline__ void k_fragment(const uint32_t* w, int kk, uint32_t& b0, uint32_t& b1) {
  if constexpr (kQ == KvQuant::kInt4) {
    const uint32_t x = (kk % 2 == 0) ? w[kk / 2] : (w[kk / 2] >> 8);
    b0 = and_or_magic<0x000f000fu>(x);
    b1 = and_or_magic<0x00f000f0u>(x);
  } else if constexpr (kQ == KvQuant::kFp8) {
    b0 = e4m3x2_lo_to_f16x2(w[kk]);
    b1 = e4m3x2_hi_to_f16x2(w[kk]);
  } else {
    b0 = __byte_perm(w[kk], 0x64646464u, 0x4140);
    b1 = __byte_perm(w[kk], 0x64646464u, 0x4342);
  }
}

// The factor of the query element paired with half h (0: b0, 1: b1) of k_fragment (a power of
// two, so the weighted f16 query stays exact), and the offset k_fragment's values carry: with
// y = weight * q', y . B = q' . c + kKOffset * sum(y).
template <KvQuant kQ>
__device__ __forceinline__ constexpr float k_query_weight(int h) {
  return kQ == KvQuant::kInt4 && h == 1 ? 0.0625f : 1.0f;
}
template <KvQuant kQ>
inline constexpr float kKOffset = kQ == KvQuant::kFp8 ? 0.0f : 1024.0f;

// The head_dim element that the fragment of k_fragment holds at k-step kk, for thread t, half h
// (0: b0 / mma k 2t + e, 1: b1 / k 2t + 8 + e), element e: the queries' A fragment takes the
// same element there. Thread t's elements are the quarter [kD / 4 t, kD / 4 (t + 1)) of the
// row, at k_local within it.
template <KvQuant kQ>
__device__ __forceinline__ constexpr int k_local(int kk, int h, int e) {
  if constexpr (kQ == KvQuant::kInt4) {
    return 8 * (kk / 2) + 2 * (kk % 2) + h + 4 * e;
  } else {
    return 4 * kk + 2 * h + e;
  }
}
template <int kD, KvQuant kQ>
__device__ __forceinline__ constexpr int k_phys(int kk, int t, int h, int e) {
  return kD / 4 * t + k_local<kQ>(kk, h, e);
}

// ---- P V: the codes of a pair of key rows as B fragments ----

// 32-bit words of a V row that thread g reads: kD / 8 codes at kD / 8 * g.
template <int kD, KvQuant kQ>
inline constexpr int kVWords = kQ == KvQuant::kInt4 ? (kD / 16 + 3) / 4 : kD / 32;

template <int kD, KvQuant kQ>
__device__ __forceinline__ void load_v_words(const unsigned char* stage, int row, int g,
                                             uint32_t (&w)[kVWords<kD, kQ>]) {
  constexpr int kCodeBytes = kQ == KvQuant::kInt4 ? kD / 2 : kD;
  constexpr int kBytes = kQ == KvQuant::kInt4 ? kD / 16 : kD / 8;  // 4, 8 or 16
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "one shared load per V row");
  load_codes<kCodeBytes, kBytes>(stage, row, kBytes * g, w);
}

// b for n-tiles 4m .. 4m + 3 (8-bit) or 8m .. 8m + 7 (int4) from word m of rows a and b (the
// pair's keys: low half a, high half b). out[j - first n-tile].
template <KvQuant kQ>
__device__ __forceinline__ void v_fragments(uint32_t a, uint32_t b, uint32_t* out) {
  if constexpr (kQ == KvQuant::kInt4) {
    const uint32_t x = __byte_perm(a, b, 0x5410);  // [a0, a1, b0, b1]
    const uint32_t y = __byte_perm(a, b, 0x7632);  // [a2, a3, b2, b3]
    out[0] = u4x2_lo_to_f16x2(x);
    out[1] = u4x2_hi_to_f16x2(x);
    out[2] = u4x2_lo_to_f16x2(x >> 8);
    out[3] = u4x2_hi_to_f16x2(x >> 8);
    out[4] = u4x2_lo_to_f16x2(y);
    out[5] = u4x2_hi_to_f16x2(y);
    out[6] = u4x2_lo_to_f16x2(y >> 8);
    out[7] = u4x2_hi_to_f16x2(y >> 8);
  } else {
    const uint32_t x = __byte_perm(a, b, 0x5140);  // [a0, b0, a1, b1]
    const uint32_t y = __byte_perm(a, b, 0x7362);  // [a2, b2, a3, b3]
    if constexpr (kQ == KvQuant::kFp8) {
      out[0] = e4m3x2_lo_to_f16x2(x);
      out[1] = e4m3x2_hi_to_f16x2(x);
      out[2] = e4m3x2_lo_to_f16x2(y);
      out[3] = e4m3x2_hi_to_f16x2(y);
    } else {
      out[0] = u8x2_lo_to_f16x2(x);
      out[1] = u8x2_hi_to_f16x2(x);
      out[2] = u8x2_lo_to_f16x2(y);
      out[3] = u8x2_hi_to_f16x2(y);
    }
  }
}

// The head_dim element held by column g of n-tile j of the P V product.
template <int kD>
__device__ __forceinline__ int v_phys(int j, int g) {
  return kD / 8 * g + j;
}

// 2^e as f32 for -126 <= e <= 127.
__device__ __forceinline__ float exp2_int(int e) {
  return __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
}

}  // namespace ls::kernels::cuda
