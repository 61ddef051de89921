#pragma once
// Quantized KV page formats (docs/kv-quantization.md): the byte layout of a quantized head-page
// and the quantize / dequantize arithmetic of one token row, shared by the CPU kernels, the CUDA
// kernels (host + device inline functions) and the tests, so every writer and reader agrees on
// the bytes and on the rounding.
//
// A head-page of K (or of V) in a quantized pool is ONE contiguous run of `page_bytes` bytes:
//   [0, params_offset)                       codes  [page_tokens, row_code_bytes] u8
//   [params_offset, params_offset + ...)     params [page_tokens, params_per_token] f32
//   padding to a multiple of 16 bytes
// so the scales travel with the page: selection, page_copy (host tier) and eviction move a page
// as bytes whatever its format.
//
// Per token per kv head (QServe's granularity), chosen because a page fills one token at a time
// (decode appends one row per step): a token's parameters depend on that token only, so appending
// never re-quantizes the rows already written, and one outlier token cannot coarsen its page.
//   int8 / int4  asymmetric: scale = (max - min) / qmax, zero = min, code = round((x - zero) /
//                scale) clamped to [0, qmax] (qmax 255 / 15); x^ = fma(code, scale, zero).
//                Error |x - x^| <= scale / 2 (+ f32 rounding): (max - min) / 510 resp. / 30.
//                int4 packs element 2i in the low nibble and 2i+1 in the high nibble of byte i.
//   fp8          e4m3 (bias 7, no infinities, max 448) of x / scale with scale = amax / 448,
//                rounded to nearest even, saturating; x^ = e4m3(code) * scale. Error: half an
//                ulp, |x - x^| <= max(|x| / 16, scale / 1024) (normal / subnormal range).
// Rows with a non-finite value get a NaN scale, so they read back as NaN and are never silently
// turned into finite numbers.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LS_KVQ_HD __host__ __device__ __forceinline__
#else
#define LS_KVQ_HD inline
#endif

namespace ls::kernels {

// Element format of a KV pool's pages. kNone: the pool's float dtype (PagedKvPool::dtype).
enum class KvQuant : int32_t { kNone = 0, kFp8 = 1, kInt8 = 2, kInt4 = 3 };

LS_KVQ_HD const char* kv_quant_name(KvQuant q) {
  switch (q) {
    case KvQuant::kFp8:
      return "fp8";
    case KvQuant::kInt8:
      return "int8";
    case KvQuant::kInt4:
      return "int4";
    default:
      return "none";
  }
}

// Bytes of the codes of one token row.
LS_KVQ_HD int64_t kv_quant_row_code_bytes(KvQuant q, int32_t head_dim) {
  return q == KvQuant::kInt4 ? (int64_t{head_dim} + 1) / 2 : int64_t{head_dim};
}
// f32 parameters per token row: fp8 a scale; int8 / int4 a scale and a zero point.
LS_KVQ_HD int32_t kv_quant_params_per_token(KvQuant q) { return q == KvQuant::kFp8 ? 1 : 2; }
LS_KVQ_HD int64_t kv_round16(int64_t bytes) { return (bytes + 15) / 16 * 16; }
// Byte offset of the parameters within a page (16-byte aligned).
LS_KVQ_HD int64_t kv_quant_params_offset(KvQuant q, int32_t page_tokens, int32_t head_dim) {
  return kv_round16(int64_t{page_tokens} * kv_quant_row_code_bytes(q, head_dim));
}
// Bytes of one quantized head-page of K (or of V), a multiple of 16.
LS_KVQ_HD int64_t kv_quant_page_bytes(KvQuant q, int32_t page_tokens, int32_t head_dim) {
  return kv_round16(kv_quant_params_offset(q, page_tokens, head_dim) +
                    int64_t{page_tokens} * kv_quant_params_per_token(q) * 4);
}
// Bytes one token of one kv head occupies, K or V (codes + parameters, page padding excluded).
LS_KVQ_HD double kv_quant_token_bytes(KvQuant q, int32_t head_dim) {
  return static_cast<double>(kv_quant_row_code_bytes(q, head_dim)) +
         4.0 * kv_quant_params_per_token(q);
}

// ---- fp8 e4m3 (OCP FP8 E4M3: bias 7, exponent 15 with mantissa 7 is NaN, no infinity) ----

inline constexpr float kFp8E4m3Max = 448.0f;

// Round to nearest even, saturating to +-448 (CUDA's __NV_SATFINITE); NaN -> 0x7f.
LS_KVQ_HD uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (!(a == a)) return 0x7f;
  if (a >= kFp8E4m3Max) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal, step 2^-9 (m == 8 is the smallest normal 0x08)
    return sign | static_cast<uint8_t>(std::rint(a * 512.0f));
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int m = static_cast<int>(std::rint((f * 2.0f - 1.0f) * 8.0f));  // 3 mantissa bits
  int exp = e - 1 + 7;
  if (m == 8) {
    m = 0;
    ++exp;
  }
  return sign | static_cast<uint8_t>((exp << 3) | m);  // a < 448 keeps exp <= 15, m <= 6 there
}

LS_KVQ_HD float e4m3_to_f32(uint8_t c) {
  const int exp = (c >> 3) & 0xf, m = c & 0x7;
  float v;
  if ((c & 0x7f) == 0x7f) {
    v = NAN;
  } else if (exp == 0) {
    v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
  } else {
    v = std::ldexp(1.0f + static_cast<float>(m) * 0.125f, exp - 7);
  }
  return (c & 0x80) ? -v : v;
}

// ---- one token row ----

// A row's statistics: min, max, max |x| and whether every value is finite. Order-independent
// (fmin / fmax are exact), so a warp reduction gives the same bits as the serial loop.
struct KvRowStats {
  float mn = INFINITY;
  float mx = -INFINITY;
  float amax = 0.0f;
  bool finite = true;
};
LS_KVQ_HD void kv_row_stats_add(KvRowStats& s, float v) {
  s.finite = s.finite && std::isfinite(v);
  s.mn = std::fmin(s.mn, v);
  s.mx = std::fmax(s.mx, v);
  s.amax = std::fmax(s.amax, std::fabs(v));
}
LS_KVQ_HD void kv_row_stats_merge(KvRowStats& s, const KvRowStats& o) {
  s.finite = s.finite && o.finite;
  s.mn = std::fmin(s.mn, o.mn);
  s.mx = std::fmax(s.mx, o.mx);
  s.amax = std::fmax(s.amax, o.amax);
}

// The row's parameters (kv_quant_params_per_token floats) from its statistics.
LS_KVQ_HD void kv_quant_params(KvQuant q, const KvRowStats& s, float* params) {
  if (q == KvQuant::kFp8) {
    params[0] = !s.finite ? NAN : (s.amax > 0.0f ? s.amax / kFp8E4m3Max : 1.0f);
    return;
  }
  const float qmax = q == KvQuant::kInt4 ? 15.0f : 255.0f;
  float scale = (s.mx - s.mn) / qmax;
  if (!(scale > 0.0f)) scale = 1.0f;  // constant row: every code 0, x^ = zero = x exactly
  params[0] = s.finite ? scale : NAN;
  params[1] = s.finite ? s.mn : 0.0f;
}

// The (unpacked) code of one value under the row's parameters; 0 for a non-finite row.
LS_KVQ_HD uint8_t kv_quant_code(KvQuant q, float x, const float* params) {
  const float scale = params[0];
  if (!(scale == scale)) return 0;
  if (q == KvQuant::kFp8) return f32_to_e4m3(x / scale);
  const float qmax = q == KvQuant::kInt4 ? 15.0f : 255.0f;
  return static_cast<uint8_t>(std::fmin(qmax, std::fmax(0.0f, std::rint((x - params[1]) / scale))));
}

// Quantizes x[0, head_dim) into codes (kv_quant_row_code_bytes bytes) and params
// (kv_quant_params_per_token floats).
LS_KVQ_HD void kv_quantize_row(KvQuant q, const float* x, int32_t head_dim, uint8_t* codes,
                               float* params) {
  KvRowStats s;
  for (int32_t e = 0; e < head_dim; ++e) kv_row_stats_add(s, x[e]);
  kv_quant_params(q, s, params);
  if (q != KvQuant::kInt4) {
    for (int32_t e = 0; e < head_dim; ++e) codes[e] = kv_quant_code(q, x[e], params);
    return;
  }
  for (int32_t e = 0; e < head_dim; e += 2) {
    const uint8_t hi = e + 1 < head_dim ? kv_quant_code(q, x[e + 1], params) : 0;
    codes[e >> 1] = static_cast<uint8_t>(kv_quant_code(q, x[e], params) | (hi << 4));
  }
}

// The value of element e of a row from its codes and params (the reference every reader
// matches bit for bit).
LS_KVQ_HD float kv_dequantize_element(KvQuant q, const uint8_t* codes, const float* params,
                                      int32_t e) {
  if (q == KvQuant::kFp8) return e4m3_to_f32(codes[e]) * params[0];
  const int c = q == KvQuant::kInt8 ? codes[e] : (codes[e >> 1] >> ((e & 1) * 4)) & 0xf;
  return std::fma(static_cast<float>(c), params[0], params[1]);
}

// Where token row `row` of head-page `page` lives in a quantized pool's k or v array.
struct KvQuantRow {
  uint8_t* codes = nullptr;
  float* params = nullptr;
};
LS_KVQ_HD KvQuantRow kv_quant_row(KvQuant q, void* base, int64_t page, int32_t row,
                                  int32_t page_tokens, int32_t head_dim) {
  auto* p = static_cast<uint8_t*>(base) + page * kv_quant_page_bytes(q, page_tokens, head_dim);
  KvQuantRow r;
  r.codes = p + int64_t{row} * kv_quant_row_code_bytes(q, head_dim);
  r.params = reinterpret_cast<float*>(p + kv_quant_params_offset(q, page_tokens, head_dim)) +
             int64_t{row} * kv_quant_params_per_token(q);
  return r;
}

}  // namespace ls::kernels
