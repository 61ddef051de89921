#include "kernels/cpu/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quant_dot4.h"

namespace ls::kernels::cpu {
namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline int32_t dot32(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += static_cast<int32_t>(a[i]) * b[i];
  return s;
}

inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// ---- scalar: one weight block against its activation blocks ----------------------------------

float block_dot_scalar(QuantType type, const uint8_t* b, const Q8Block* a) {
  int8_t q[32];
  switch (type) {
    case QuantType::kQ8_0:
      return f16_at(b) * a->d * static_cast<float>(dot32(reinterpret_cast<const int8_t*>(b + 2), a->q));
    case QuantType::kQ4_0: {
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>((b[2 + j] & 0xF) - 8);
        q[j + 16] = static_cast<int8_t>((b[2 + j] >> 4) - 8);
      }
      return f16_at(b) * a->d * static_cast<float>(dot32(q, a->q));
    }
    case QuantType::kQ4_1: {
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>(b[4 + j] & 0xF);
        q[j + 16] = static_cast<int8_t>(b[4 + j] >> 4);
      }
      return f16_at(b) * a->d * static_cast<float>(dot32(q, a->q)) +
             f16_at(b + 2) * a->d * static_cast<float>(a->sum);
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const bool five = type == QuantType::kQ5_K;
      const float d = f16_at(b), dmin = f16_at(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      float total = 0;
      for (int j = 0; j < 8; ++j) {  // sub-block j: nibble (j & 1) of bytes 32 * (j / 2) ...
        const uint8_t* p = qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) {
          int v = (j & 1) ? (p[l] >> 4) : (p[l] & 0xF);
          if (five && (qh[l] >> j) & 1) v += 16;
          q[l] = static_cast<int8_t>(v);
        }
        int sc, m;
        scale_min_k4(j, scales, &sc, &m);
        total += a[j].d * (d * static_cast<float>(sc) * static_cast<float>(dot32(q, a[j].q)) -
                           dmin * static_cast<float>(m) * static_cast<float>(a[j].sum));
      }
      return total;
    }
    case QuantType::kQ6_K: {
      const float d = f16_at(b + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      float total = 0;
      for (int n = 0; n < 2; ++n) {
        const uint8_t* ql = b + 64 * n;
        const uint8_t* qh = b + 128 + 32 * n;
        for (int g = 0; g < 4; ++g) {
          const Q8Block& x = a[4 * n + g];
          int32_t s0 = 0, s1 = 0;
          for (int l = 0; l < 32; ++l) {
            const uint8_t lo = g & 1 ? ql[l + 32] : ql[l];
            const int v = ((g < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
            (l < 16 ? s0 : s1) += v * x.q[l];
          }
          total += x.d * d *
                   static_cast<float>(sc[8 * n + 2 * g] * s0 + sc[8 * n + 2 * g + 1] * s1);
        }
      }
      return total;
    }
  }
  return 0;
}

// ---- AVX2: the 32-weight types, as llama.cpp's ggml_vec_dot_q*_q8_* ---------------------------

#if defined(__AVX2__)
inline __m256 mul_sum_i8(__m256i x, __m256i y) {
  // |x| * sign(y, x): maddubs wants one unsigned operand.
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  const __m256i dot16 = _mm256_maddubs_epi16(ax, sy);
  const __m256i dot32 = _mm256_madd_epi16(dot16, _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(dot32);
}

inline __m256i unpack_nibbles(const uint8_t* p) {  // 16 bytes -> 32 values: low, then high
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float row_dot_avx2(QuantType type, const uint8_t* w, const Q8Block* a, int64_t nblocks) {
  __m256 acc = _mm256_setzero_ps();
  float extra = 0;  // Q4_1's m * sum terms
  const int64_t bytes = quant_block_bytes(type);
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = w + i * bytes;
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].q));
    __m256i qw;
    if (type == QuantType::kQ8_0) {
      qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    } else if (type == QuantType::kQ4_0) {
      qw = _mm256_sub_epi8(unpack_nibbles(b + 2), _mm256_set1_epi8(8));
    } else {
      qw = unpack_nibbles(b + 4);
      extra += f16_at(b + 2) * a[i].d * static_cast<float>(a[i].sum);
    }
    const __m256 scale = _mm256_set1_ps(f16_at(b) * a[i].d);
    acc = _mm256_fmadd_ps(scale, mul_sum_i8(qw, qa), acc);
  }
  return hsum(acc) + extra;
}

// Q4_K / Q5_K: each 32-weight sub-block is unsigned (0..15, or 0..31 with the 5th bit), so
// maddubs multiplies it with the signed activations directly; the sub-block's minimum enters
// through the activation block's sum.
float row_dot_q45k_avx2(const uint8_t* w, const Q8Block* a, int64_t nblocks, bool five) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const int64_t bytes = five ? 176 : 144;
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = w + i * bytes;
    const Q8Block* x = a + 8 * i;
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + (five ? 48 : 16);
    const __m256i hbits =
        five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)) : _mm256_setzero_si256();
    for (int j2 = 0; j2 < 4; ++j2) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j2));
      for (int s = 0; s < 2; ++s) {
        const int j = 2 * j2 + s;
        __m256i v = s ? _mm256_and_si256(_mm256_srli_epi16(q, 4), low4) : _mm256_and_si256(q, low4);
        if (five) {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
          const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), bit);
          v = _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
        }
        int sc, m;
        scale_min_k4(j, scales, &sc, &m);
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j].q));
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(v, qa), ones16);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc) * x[j].d),
                              _mm256_cvtepi32_ps(dot), acc);
        mins += dmin * static_cast<float>(m) * x[j].d * static_cast<float>(x[j].sum);
      }
    }
  }
  return hsum(acc) - mins;
}

// Q6_K: q (0..63) times the activations with maddubs, minus 32 times them (the -32 offset), then
// each half of the 32 (16 weights) times its own int8 scale in madd.
float row_dot_q6k_avx2(const uint8_t* w, const Q8Block* a, int64_t nblocks) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i k32 = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = w + i * 210;
    const float d = f16_at(b + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = b + 64 * n;
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      for (int g = 0; g < 4; ++g) {
        const Q8Block& x = a[8 * i + 4 * n + g];
        const __m256i lo = (g & 1) ? ql1 : ql0;
        const __m256i nib =
            g < 2 ? _mm256_and_si256(lo, low4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), low4);
        const __m256i hi =
            _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), three);
        const __m256i v = _mm256_or_si256(nib, _mm256_slli_epi16(hi, 4));
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q));
        const __m256i dot16 =
            _mm256_sub_epi16(_mm256_maddubs_epi16(v, qa), _mm256_maddubs_epi16(k32, qa));
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[8 * n + 2 * g + 1]),
                                                _mm_set1_epi16(sc[8 * n + 2 * g]));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * x.d),
                              _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, scales)), acc);
      }
    }
  }
  return hsum(acc);
}
#endif

// One output: weight row `row` (nblocks blocks) against one quantized activation row.
float row_dot(QuantType type, const uint8_t* row, const Q8Block* act, int64_t nblocks, Isa isa) {
#if defined(__AVX2__)
  if (isa != Isa::kScalar) {
    switch (type) {
      case QuantType::kQ8_0:
      case QuantType::kQ4_0:
      case QuantType::kQ4_1:
        return row_dot_avx2(type, row, act, nblocks);
      case QuantType::kQ4_K:
        return row_dot_q45k_avx2(row, act, nblocks, false);
      case QuantType::kQ5_K:
        return row_dot_q45k_avx2(row, act, nblocks, true);
      case QuantType::kQ6_K:
        return row_dot_q6k_avx2(row, act, nblocks);
    }
  }
#endif
  (void)isa;
  const int64_t bytes = quant_block_bytes(type);
  const int64_t per_block = quant_block_elems(type) / 32;  // activation blocks per weight block
  float s = 0;
  for (int64_t b = 0; b < nblocks; ++b) s += block_dot_scalar(type, row + b * bytes, act + b * per_block);
  return s;
}

// Rows [r0, r1) of one part against all m activation rows, in tiles of kTile weight rows x kTile
// activation rows so both stay in L1 while every pair is formed (the prefill case).
constexpr int64_t kTile = 16;

void part_rows(const QuantPart& part, int64_t cols, const Q8Block* act, int64_t m, int64_t r0,
               int64_t r1, float* y, int64_t ldy, Isa isa) {
  const auto* wb = static_cast<const uint8_t*>(part.blocks);
  const int64_t nblocks = cols / quant_block_elems(part.type);
  const int64_t row_bytes = nblocks * quant_block_bytes(part.type);
  const int64_t act_row = cols / 32;
  for (int64_t rt = r0; rt < r1; rt += kTile) {
    const int64_t re = std::min(r1, rt + kTile);
    for (int64_t it = 0; it < m; it += kTile) {
      const int64_t ie = std::min(m, it + kTile);
      int64_t r = rt;
#if defined(LS_QUANT_DOT4)
      if (isa != Isa::kScalar) {  // four rows at a time; the last rows % 4 one at a time
        const bool vnni = quant_uses_vnni(isa);
        for (; r + 4 <= re; r += 4) {
          const uint8_t* row = wb + r * row_bytes;
          for (int64_t i = it; i < ie;) {
            int n = quant_dot4_rows(part.type);
            while (i + n > ie) n /= 2;
            if (vnni) {
              quant_dot4_vnni(part.type, row, row_bytes, act + i * act_row, act_row, nblocks,
                              y + i * ldy + r, ldy, n);
            } else {
              quant_dot4_avx2(part.type, row, row_bytes, act + i * act_row, act_row, nblocks,
                              y + i * ldy + r, ldy, n);
            }
            i += n;
          }
        }
      }
#endif
      for (; r < re; ++r) {
        const uint8_t* row = wb + r * row_bytes;
        for (int64_t i = it; i < ie; ++i) {
          y[i * ldy + r] = row_dot(part.type, row, act + i * act_row, nblocks, isa);
        }
      }
    }
  }
}

}  // namespace

void quantize_activations(const float* x, int64_t n, Q8Block* out, Isa isa, int64_t group) {
  const int64_t per_group = group / 32;  // blocks sharing one scale
  int64_t g = 0;
#if defined(__AVX2__)
  if (isa != Isa::kScalar) {
    // The scalar loop's arithmetic in 8 lanes: the same product x * (1 / d), rounded to nearest
    // even by cvtps (the default rounding mode, as lrintf), so both give the same blocks.
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; g < n / group; ++g) {
      const float* xg = x + group * g;
      __m256 m = _mm256_setzero_ps();
      for (int64_t k = 0; k < group; k += 8) {
        m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xg + k), abs_mask));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      const float d = amax / 127.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      for (int64_t blk = 0; blk < per_group; ++blk) {
        const float* v = xg + 32 * blk;
        __m256i q[4];
        for (int k = 0; k < 4; ++k) {
          q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), vid));
        }
        const __m256i s =
            _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        // packs work within 128-bit lanes: the permute puts the 8 groups of 4 back in order.
        const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
        const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
        const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
        Q8Block& b = out[g * per_group + blk];
        b.d = d;
        b.sum = _mm_cvtsi128_si32(s4);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.q), p8);
      }
    }
  }
#endif
  (void)isa;
  for (; g < n / group; ++g) {
    const float* xg = x + group * g;
    float amax = 0;
    for (int64_t j = 0; j < group; ++j) amax = std::max(amax, std::fabs(xg[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int64_t blk = 0; blk < per_group; ++blk) {
      const float* v = xg + 32 * blk;
      Q8Block& b = out[g * per_group + blk];
      b.d = d;
      b.sum = 0;
      for (int j = 0; j < 32; ++j) {
        b.q[j] = static_cast<int8_t>(std::lrintf(v[j] * id));
        b.sum += b.q[j];
      }
    }
  }
}

bool quant_uses_vnni(Isa isa) {
#if defined(LS_QUANT_DOT4_VNNI)
  return isa == Isa::kAvx512;
#else
  (void)isa;
  return false;
#endif
}

std::string_view quant_kernel_name(Isa isa) {
  if (isa == Isa::kScalar) return "scalar";
  if (quant_uses_vnni(isa)) return "avx512vnni";
#if defined(__AVX2__)
  return "avx2";
#else
  return "scalar";
#endif
}

int64_t activation_group(QuantType type) { return quant_block_elems(type) == 256 ? 256 : 32; }

void quant_matmul(QuantType type, const void* w, int64_t rows, int64_t cols, const float* x,
                  int64_t m, float* y, Isa isa) {
  std::vector<Q8Block> act(static_cast<size_t>(m * (cols / 32)));
  for (int64_t i = 0; i < m; ++i) {
    quantize_activations(x + i * cols, cols, act.data() + i * (cols / 32), isa,
                         activation_group(type));
  }
  part_rows(QuantPart{type, w, rows}, cols, act.data(), m, 0, rows, y, rows, isa);
}

void quantize_activations(const float* x, int64_t n, Q8Block* out, int64_t group) {
  quantize_activations(x, n, out, best_isa(), group);
}

void quant_matmul(QuantType type, const void* w, int64_t rows, int64_t cols, const float* x,
                  int64_t m, float* y) {
  quant_matmul(type, w, rows, cols, x, m, y, best_isa());
}

void quant_linear(const QuantMatrix& w, const float* x, int64_t m, const float* bias, float* y,
                  ThreadPool& pool, Isa isa) {
  const int64_t cols = w.cols;
  const int64_t act_row = cols / 32;
  // [m, cols / 32] quantized activations, reused across calls of this thread.
  thread_local std::vector<Q8Block> act;
  if (act.size() < static_cast<size_t>(m * act_row)) act.resize(static_cast<size_t>(m * act_row));
  Q8Block* a = act.data();
  int64_t group = 32;
  for (const QuantPart& part : w.parts) group = std::max(group, activation_group(part.type));
  pool.parallel_for(m, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      quantize_activations(x + i * cols, cols, a + i * act_row, isa, group);
    }
  });
  int64_t row0 = 0;
  for (const QuantPart& part : w.parts) {
    // Units of kTile rows; at least a few per thread so the split is even for decode.
    const int64_t units = (part.rows + kTile - 1) / kTile;
    pool.parallel_for(units, 1, [&](int64_t u0, int64_t u1) {
      part_rows(part, cols, a, m, u0 * kTile, std::min(part.rows, u1 * kTile), y + row0, w.rows,
                isa);
    });
    row0 += part.rows;
  }
  if (bias != nullptr) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t r = 0; r < w.rows; ++r) y[i * w.rows + r] += bias[r];
    }
  }
}

void quant_linear(const QuantMatrix& w, const float* x, int64_t m, const float* bias, float* y,
                  ThreadPool& pool) {
  quant_linear(w, x, m, bias, y, pool, best_isa());
}

}  // namespace ls::kernels::cpu
