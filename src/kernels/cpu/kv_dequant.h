#pragma once
// Internal to kernels/cpu: dequantizes token rows of a quantized head-page (kernels/kv_quant.h)
// into f32, bit for bit the values kv_dequantize_element gives, in loops the compiler
// vectorises. The attention kernel runs it per page visit into its per-thread tile buffers, so
// the arithmetic after it is the f32 kernel unchanged.

#include <array>
#include <cmath>
#include <cstdint>

#include "kernels/kv_quant.h"

namespace ls::kernels::cpu {

// The 256 fp8 e4m3 values.
inline const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

// out[r, e] for rows [0, rows) of head-page `page` of the quantized array `base`:
// out is [rows, head_dim] f32.
inline void dequantize_page_rows(KvQuant q, const void* base, int64_t page, int32_t page_tokens,
                                 int32_t head_dim, int32_t rows, float* out) {
  const float* fp8 = q == KvQuant::kFp8 ? e4m3_table() : nullptr;
  for (int32_t r = 0; r < rows; ++r) {
    const KvQuantRow row =
        kv_quant_row(q, const_cast<void*>(base), page, r, page_tokens, head_dim);
    const uint8_t* c = row.codes;
    const float scale = row.params[0];
    float* o = out + int64_t{r} * head_dim;
    if (q == KvQuant::kFp8) {
      for (int32_t e = 0; e < head_dim; ++e) o[e] = fp8[c[e]] * scale;
      continue;
    }
    const float zero = row.params[1];
    if (q == KvQuant::kInt8) {
      for (int32_t e = 0; e < head_dim; ++e) o[e] = std::fma(static_cast<float>(c[e]), scale, zero);
      continue;
    }
    for (int32_t i = 0; i < head_dim / 2; ++i) {
      o[2 * i] = std::fma(static_cast<float>(c[i] & 0xf), scale, zero);
      o[2 * i + 1] = std::fma(static_cast<float>(c[i] >> 4), scale, zero);
    }
    if (head_dim % 2 != 0) {
      o[head_dim - 1] = std::fma(static_cast<float>(c[head_dim / 2] & 0xf), scale, zero);
    }
  }
}

}  // namespace ls::kernels::cpu
