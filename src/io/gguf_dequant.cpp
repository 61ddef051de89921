#include "io/gguf_dequant.h"

#include <cstring>

#include "core/dtype.h"

namespace ls {
namespace {

// Blocks are read through memcpy'd scalars: GGUF data is aligned to 32 bytes, but blocks of 18,
// 20 or 34 bytes leave later blocks unaligned.
inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q4_0(const uint8_t* b, float* y) {  // f16 d; u8 qs[16]
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {  // f16 d, m; u8 qs[16]
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void q5_0(const uint8_t* b, float* y) {  // f16 d; u32 qh; u8 qs[16]
  const float d = f16_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = static_cast<int>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

void q5_1(const uint8_t* b, float* y) {  // f16 d, m; u32 qh; u8 qs[16]
  const float d = f16_at(b);
  const float m = f16_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const uint32_t x0 = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    const uint32_t x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

void q8_0(const uint8_t* b, float* y) {  // f16 d; i8 qs[32]
  const float d = f16_at(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

void q2_k(const uint8_t* b, float* y) {  // u8 scales[16]; u8 qs[64]; f16 d, dmin
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = f16_at(b + 80);
  const float dmin = f16_at(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
      shift += 2;
    }
    q += 32;
  }
}

void q3_k(const uint8_t* b, float* y) {  // u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const float d_all = f16_at(b + 108);
  // The 16 6-bit scales are packed into 12 bytes: low 4 bits in bytes 0-7, high 2 bits in 8-11.
  uint32_t aux[4];
  std::memcpy(aux, b + 96, 12);
  constexpr uint32_t kmask1 = 0x03030303;
  constexpr uint32_t kmask2 = 0x0f0f0f0f;
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      shift += 2;
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

// The 8 (scale, min) pairs of a Q4_K/Q5_K super-block, 6 bits each, packed into 12 bytes.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q4_k(const uint8_t* b, float* y) {  // f16 d, dmin; u8 scales[12]; u8 qs[128]
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

void q5_k(const uint8_t* b, float* y) {  // f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
  const float d = f16_at(b);
  const float dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
    ql += 32;
    is += 2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void q6_k(const uint8_t* b, float* y) {  // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * static_cast<float>(sc[is + 0] * q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return q4_0;
    case GgmlType::kQ4_1:
      return q4_1;
    case GgmlType::kQ5_0:
      return q5_0;
    case GgmlType::kQ5_1:
      return q5_1;
    case GgmlType::kQ8_0:
      return q8_0;
    case GgmlType::kQ2_K:
      return q2_k;
    case GgmlType::kQ3_K:
      return q3_k;
    case GgmlType::kQ4_K:
      return q4_k;
    case GgmlType::kQ5_K:
      return q5_k;
    case GgmlType::kQ6_K:
      return q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

bool ggml_type_dequantizable(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         block_fn(type) != nullptr;
}

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return {};
    case GgmlType::kF16:
      convert_to_f32(DType::kF16, p, dst, n);
      return {};
    case GgmlType::kBF16:
      convert_to_f32(DType::kBF16, p, dst, n);
      return {};
    default:
      break;
  }
  const BlockFn fn = block_fn(type);
  if (fn == nullptr) {
    return unimplemented("dequantizing ggml type {} is not supported", ggml_type_name(type));
  }
  const int64_t elems = *ggml_block_elems(type);
  const int64_t bytes = *ggml_block_bytes(type);
  if (n % elems != 0) {
    return invalid_argument("{} elements are not a whole number of {} blocks of {}", n,
                            ggml_type_name(type), elems);
  }
  for (int64_t i = 0; i < n / elems; ++i) fn(p + i * bytes, dst + i * elems);
  return {};
}

}  // namespace ls
