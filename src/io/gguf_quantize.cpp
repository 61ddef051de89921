#include "io/gguf_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace ls {
namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

int nearest(float v) { return static_cast<int>(std::lrintf(v)); }

void q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(nearest(x[j] * id)));
}

// w = d (q - 8), q in 0..15: the element of largest magnitude maps to q = 0 (d = that value / -8).
void q4_0(const float* x, uint8_t* b) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 16; ++j) {
    const int a = std::clamp(nearest(x[j] * id) + 8, 0, 15);
    const int c = std::clamp(nearest(x[j + 16] * id) + 8, 0, 15);
    b[2 + j] = static_cast<uint8_t>(a | (c << 4));
  }
}

// w = d q + m, q in 0..15 over [min, max].
void q4_1(const float* x, uint8_t* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / 15.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_f16(b, d);
  put_f16(b + 2, lo);
  for (int j = 0; j < 16; ++j) {
    const int a = std::clamp(nearest((x[j] - lo) * id), 0, 15);
    const int c = std::clamp(nearest((x[j + 16] - lo) * id), 0, 15);
    b[4 + j] = static_cast<uint8_t>(a | (c << 4));
  }
}

// The best (scale, min) for n values as w = scale q - min, q in 0..nmax: the min/max range and
// a few narrower ones (the ends pulled in), each refit by least squares on its rounding.
void fit_scale_min(const float* x, int n, int nmax, float* scale, float* min) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);  // the format's minimum is subtracted and stored unsigned
  if (hi <= lo) {
    *scale = 0;
    *min = -lo;
    return;
  }
  float best_err = INFINITY;
  for (int step = 0; step <= 12; ++step) {
    const float s0 = (hi - lo) / (static_cast<float>(nmax) + 0.1f * static_cast<float>(step) - 0.6f);
    if (!(s0 > 0)) continue;
    // Round with this scale, then fit scale and offset to the rounded values (least squares).
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    int q[32];
    for (int i = 0; i < n; ++i) {
      q[i] = std::clamp(nearest((x[i] - lo) / s0), 0, nmax);
      sq += q[i];
      sx += x[i];
      sqq += static_cast<double>(q[i]) * q[i];
      sqx += static_cast<double>(q[i]) * x[i];
    }
    const double det = n * sqq - sq * sq;
    float s = s0, off = lo;
    if (det > 0) {
      s = static_cast<float>((n * sqx - sq * sx) / det);
      off = static_cast<float>((sqq * sx - sq * sqx) / det);
    }
    if (off > 0) {  // the minimum must stay <= 0; refit the scale alone
      off = 0;
      s = sqq > 0 ? static_cast<float>(sqx / sqq) : s0;
    }
    if (!(s > 0)) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const int qi = std::clamp(nearest((x[i] - off) / s), 0, nmax);
      const double e = s * qi + off - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      *scale = s;
      *min = -off;
    }
  }
  if (best_err == INFINITY) {
    *scale = (hi - lo) / static_cast<float>(nmax);
    *min = -lo;
  }
}

// Q4_K: 8 sub-blocks of 32, w = d sc q - dmin m with 6-bit sc, m.
void q4_k(const float* x, uint8_t* b) {
  float scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(x + 32 * j, 32, 15, &scales[j], &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float d = f16_round(max_scale / 63.0f), dmin = f16_round(max_min / 63.0f);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? std::clamp(nearest(scales[j] / d), 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0 ? std::clamp(nearest(mins[j] / dmin), 0, 63) : 0);
  }
  put_f16(b, d);
  put_f16(b + 2, dmin);
  uint8_t* s = b + 4;
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] |= sc[j] & 63;
      s[j + 4] |= m[j] & 63;
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
  uint8_t* qs = b + 16;
  std::memset(qs, 0, 128);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * m[j];
    for (int l = 0; l < 32; ++l) {
      const int q = ds > 0 ? std::clamp(nearest((x[32 * j + l] + dm) / ds), 0, 15) : 0;
      qs[32 * (j / 2) + l] |= static_cast<uint8_t>((j & 1) ? q << 4 : q);
    }
  }
}

// Q6_K: 16 groups of 16, w = d sc (q - 32), q in 0..63, sc int8.
void q6_k(const float* x, uint8_t* b) {
  float scales[16];
  float max_abs_scale = 0, max_scale = 0;
  for (int g = 0; g < 16; ++g) {
    // The element of largest magnitude maps to -32; try a few scales around that, keep the best.
    float amax = 0, max = 0;
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(x[16 * g + i]) > amax) {
        amax = std::fabs(x[16 * g + i]);
        max = x[16 * g + i];
      }
    }
    float best = max / -32.0f, best_err = INFINITY;
    for (int step = -4; step <= 4 && max != 0; ++step) {
      const float s = max / (-32.0f + 0.25f * static_cast<float>(step));
      double err = 0;
      for (int i = 0; i < 16; ++i) {
        const int q = std::clamp(nearest(x[16 * g + i] / s), -32, 31);
        const double e = s * q - x[16 * g + i];
        err += e * e;
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        best = s;
      }
    }
    scales[g] = best;
    if (std::fabs(best) > max_abs_scale) {
      max_abs_scale = std::fabs(best);
      max_scale = best;
    }
  }
  const float d = f16_round(max_scale / -128.0f);
  int8_t sc[16];
  for (int g = 0; g < 16; ++g) {
    sc[g] = static_cast<int8_t>(d != 0 ? std::clamp(nearest(scales[g] / d), -128, 127) : 0);
  }
  int q[256];
  for (int g = 0; g < 16; ++g) {
    const float s = d * sc[g];
    for (int i = 0; i < 16; ++i) {
      q[16 * g + i] = (s != 0 ? std::clamp(nearest(x[16 * g + i] / s), -32, 31) : 0) + 32;
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = q[128 * n + l], q2 = q[128 * n + l + 32];
      const int q3 = q[128 * n + l + 64], q4 = q[128 * n + l + 96];
      ql[64 * n + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[64 * n + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[32 * n + l] =
          static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
  std::memcpy(b + 192, sc, 16);
  put_f16(b + 208, d);
}

}  // namespace

bool ggml_type_quantizable(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 ||
         type == GgmlType::kQ4_K || type == GgmlType::kQ6_K;
}

Status quantize_row(GgmlType type, const float* x, int64_t n, uint8_t* dst) {
  if (!ggml_type_quantizable(type)) {
    return unimplemented("cannot quantize to {}", ggml_type_name(type));
  }
  const int64_t be = *ggml_block_elems(type), bb = *ggml_block_bytes(type);
  if (n % be != 0) {
    return invalid_argument("{} elements are not a whole number of {} blocks of {}", n,
                            ggml_type_name(type), be);
  }
  for (int64_t i = 0; i < n / be; ++i) {
    const float* xb = x + i * be;
    uint8_t* b = dst + i * bb;
    switch (type) {
      case GgmlType::kQ8_0:
        q8_0(xb, b);
        break;
      case GgmlType::kQ4_0:
        q4_0(xb, b);
        break;
      case GgmlType::kQ4_1:
        q4_1(xb, b);
        break;
      case GgmlType::kQ4_K:
        q4_k(xb, b);
        break;
      default:
        q6_k(xb, b);
        break;
    }
  }
  return {};
}

}  // namespace ls
