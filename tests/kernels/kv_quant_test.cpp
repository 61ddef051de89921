// Quantized KV formats (kernels/kv_quant.h) against independent references:
//  - fp8 e4m3: the encoder picks the nearest of the 254 finite codes (ties to the even mantissa),
//    found by brute force over a decode table built here from the OCP definition;
//  - int8 / int4: codes equal a double-precision reference quantizer's, the parameters are the
//    row's min and range / qmax, and the round-trip error stays within the bound
//    docs/kv-quantization.md derives, over random rows with outlier channels and outlier tokens;
//  - the page layout: every row's codes and parameters stay inside their own page;
//  - the CPU page dequantization (vectorised where the machine has AVX2) decodes every code
//    byte, in every position of a row and in the scalar tails, bit for bit as the reference.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kv_dequant.h"
#include "kernels/kv_quant.h"

namespace ls::kernels::test {
namespace {

// OCP E4M3 from its definition: bias 7, subnormals m/8 * 2^-6, S.1111.111 is NaN.
double e4m3_reference(int code) {
  const int sign = code >> 7, e = (code >> 3) & 0xf, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}

bool is_nan_code(int code) { return (code & 0x7f) == 0x7f; }

TEST(KvQuantFp8, DecodeMatchesTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if (is_nan_code(c)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), e4m3_reference(c)) << c;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0.015625f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0.001953125f);
}

// Nearest finite code by brute force; a tie goes to the code with the even mantissa.
int nearest_e4m3(float x) {
  if (x >= 448.0f) return 0x7e;
  if (x <= -448.0f) return 0xfe;
  int best = -1;
  double best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    if (e4m3_reference(c) == 0.0 && ((c & 0x80) != 0) != std::signbit(x)) continue;  // ±0
    const double err = std::fabs(e4m3_reference(c) - static_cast<double>(x));
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

TEST(KvQuantFp8, EncoderRoundsToNearestEvenAndSaturates) {
  std::mt19937 rng(1);
  std::vector<float> xs = {0.0f, -0.0f, 448.0f, -448.0f, 464.0f, 1e9f, -1e9f, 0.015625f,
                           0.0009765625f /* tie between 0 and 2^-9 */, 1.0625f /* tie 1, 1.125 */,
                           1.1875f /* tie 1.125, 1.25 */, 0.0146484375f /* tie 7/8, 1 x 2^-6 */};
  // Every code's value and the midpoints between neighbours (ties), plus random values over
  // the whole exponent range.
  for (int c = 0; c < 128; ++c) {
    if (is_nan_code(c)) continue;
    xs.push_back(static_cast<float>(e4m3_reference(c)));
    if (c + 1 < 127) {
      xs.push_back(static_cast<float>((e4m3_reference(c) + e4m3_reference(c + 1)) / 2));
    }
  }
  std::uniform_real_distribution<float> expo(-12.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = std::exp2(expo(rng));
    xs.push_back(i % 2 ? v : -v);
  }
  for (float x : xs) {
    ASSERT_EQ(static_cast<int>(f32_to_e4m3(x)), nearest_e4m3(x)) << "x=" << x;
  }
  EXPECT_EQ(f32_to_e4m3(NAN) & 0x7f, 0x7f);
}

// Rows of random normal values with outliers: a few channels 20-100x larger (the key outlier
// channels KIVI and KVQuant report) and, per row, sometimes one huge element.
std::vector<float> outlier_row(std::mt19937& rng, int32_t d, int row) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(d));
  for (int32_t e = 0; e < d; ++e) {
    float v = n(rng);
    if (e % 17 == 3) v *= 40.0f;          // outlier channels
    if (row % 5 == 2) v += 7.0f;          // shifted rows (asymmetric ranges)
    x[static_cast<size_t>(e)] = v;
  }
  if (row % 7 == 0) x[static_cast<size_t>(row % d)] = row % 14 == 0 ? 3000.0f : -900.0f;
  if (row % 11 == 4) std::fill(x.begin(), x.end(), 0.25f);  // constant row: exact
  return x;
}

std::vector<float> dequantized(KvQuant q, const std::vector<uint8_t>& codes,
                               const std::vector<float>& params, int32_t d) {
  std::vector<float> out(static_cast<size_t>(d));
  for (int32_t e = 0; e < d; ++e)
    out[static_cast<size_t>(e)] = kv_dequantize_element(q, codes.data(), params.data(), e);
  return out;
}

TEST(KvQuantInt, CodesMatchADoubleReferenceAndErrorsStayWithinTheBound) {
  std::mt19937 rng(2);
  for (KvQuant q : {KvQuant::kInt8, KvQuant::kInt4}) {
    const double qmax = q == KvQuant::kInt8 ? 255.0 : 15.0;
    for (int32_t d : {16, 64, 96, 128, 130}) {
      for (int row = 0; row < 200; ++row) {
        const std::vector<float> x = outlier_row(rng, d, row);
        std::vector<uint8_t> codes(static_cast<size_t>(kv_quant_row_code_bytes(q, d)), 0xa5);
        std::vector<float> params(2);
        kv_quantize_row(q, x.data(), d, codes.data(), params.data());
        const double mn = *std::min_element(x.begin(), x.end());
        const double mx = *std::max_element(x.begin(), x.end());
        EXPECT_EQ(params[1], static_cast<float>(mn));
        if (mx > mn) {
          EXPECT_NEAR(params[0], (mx - mn) / qmax, 1e-6 * (mx - mn) / qmax);
        }
        const std::vector<float> y = dequantized(q, codes, params, d);
        const double scale = params[0];
        for (int32_t e = 0; e < d; ++e) {
          const double xe = x[static_cast<size_t>(e)];
          const double t = (xe - params[1]) / scale;
          const double ref = std::clamp(std::nearbyint(t), 0.0, qmax);
          const int got = q == KvQuant::kInt8 ? codes[static_cast<size_t>(e)]
                                              : (codes[static_cast<size_t>(e / 2)] >> (e % 2 * 4)) & 15;
          // The f32 division may land on the other side of a .5 boundary only when t is that
          // close to it.
          if (std::fabs(t - std::floor(t) - 0.5) > 1e-4) {
            ASSERT_EQ(got, static_cast<int>(ref)) << "d=" << d << " row=" << row << " e=" << e;
          }
          // Bound: half a step, plus f32 rounding of the division, the code and the fma.
          const double bound = scale / 2 * (1 + 1e-5) + 1e-6 * (std::fabs(mn) + std::fabs(mx));
          ASSERT_LE(std::fabs(static_cast<double>(y[static_cast<size_t>(e)]) - xe), bound)
              << kv_quant_name(q) << " d=" << d << " row=" << row << " e=" << e;
        }
        if (mx == mn) {
          for (int32_t e = 0; e < d; ++e) ASSERT_EQ(y[static_cast<size_t>(e)], x[static_cast<size_t>(e)]);
        }
      }
    }
  }
}

TEST(KvQuantFp8, RowErrorsStayWithinTheBound) {
  std::mt19937 rng(3);
  for (int32_t d : {16, 64, 128}) {
    for (int row = 0; row < 300; ++row) {
      const std::vector<float> x = outlier_row(rng, d, row);
      std::vector<uint8_t> codes(static_cast<size_t>(d));
      std::vector<float> params(1);
      kv_quantize_row(KvQuant::kFp8, x.data(), d, codes.data(), params.data());
      double amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
      EXPECT_NEAR(params[0], amax / 448.0, 1e-6 * amax / 448.0);
      const std::vector<float> y = dequantized(KvQuant::kFp8, codes, params, d);
      for (int32_t e = 0; e < d; ++e) {
        const double xe = x[static_cast<size_t>(e)];
        // The code is the nearest e4m3 value of x / scale (independent brute force).
        ASSERT_EQ(static_cast<int>(codes[static_cast<size_t>(e)]),
                  nearest_e4m3(x[static_cast<size_t>(e)] / params[0]));
        const double bound = std::max(std::fabs(xe) / 16, params[0] / 1024.0) * (1 + 1e-6) + 1e-30;
        ASSERT_LE(std::fabs(static_cast<double>(y[static_cast<size_t>(e)]) - xe), bound)
            << "d=" << d << " row=" << row << " e=" << e;
      }
    }
  }
}

TEST(KvQuant, NonFiniteRowsReadBackAsNaN) {
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    std::vector<float> x(32, 1.0f);
    x[5] = NAN;
    std::vector<uint8_t> codes(32);
    std::vector<float> params(2);
    kv_quantize_row(q, x.data(), 32, codes.data(), params.data());
    for (int32_t e = 0; e < 32; ++e)
      EXPECT_TRUE(std::isnan(kv_dequantize_element(q, codes.data(), params.data(), e)));
    x[5] = INFINITY;
    kv_quantize_row(q, x.data(), 32, codes.data(), params.data());
    EXPECT_TRUE(std::isnan(kv_dequantize_element(q, codes.data(), params.data(), 0)));
  }
}

TEST(KvQuant, PageLayoutKeepsEveryRowInsideItsPageAndCpuDequantMatchesReference) {
  std::mt19937 rng(4);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t pt : {1, 16, 64}) {
      for (int32_t d : {16, 64, 96, 128}) {
        const int64_t page_bytes = kv_quant_page_bytes(q, pt, d);
        ASSERT_EQ(page_bytes % 16, 0);
        ASSERT_GE(page_bytes, pt * (kv_quant_row_code_bytes(q, d) + 4 * kv_quant_params_per_token(q)));
        // Three pages of sentinel bytes; write every row of page 1.
        std::vector<uint8_t> mem(static_cast<size_t>(3 * page_bytes), 0x5a);
        std::vector<std::vector<float>> rows;
        for (int32_t r = 0; r < pt; ++r) {
          rows.push_back(outlier_row(rng, d, r));
          const KvQuantRow at = kv_quant_row(q, mem.data(), 1, r, pt, d);
          kv_quantize_row(q, rows.back().data(), d, at.codes, at.params);
        }
        for (int64_t b = 0; b < page_bytes; ++b) {
          ASSERT_EQ(mem[static_cast<size_t>(b)], 0x5a);
          ASSERT_EQ(mem[static_cast<size_t>(2 * page_bytes + b)], 0x5a);
        }
        // Rows read back as quantized on their own (no row overwrote another), and the CPU
        // kernels' page dequantization gives the reference values bit for bit.
        std::vector<float> page(static_cast<size_t>(pt * d));
        cpu::dequantize_page_rows(q, mem.data(), 1, pt, d, pt, page.data());
        for (int32_t r = 0; r < pt; ++r) {
          std::vector<uint8_t> codes(static_cast<size_t>(kv_quant_row_code_bytes(q, d)));
          std::vector<float> params(2);
          kv_quantize_row(q, rows[static_cast<size_t>(r)].data(), d, codes.data(), params.data());
          const KvQuantRow at = kv_quant_row(q, mem.data(), 1, r, pt, d);
          for (int32_t e = 0; e < d; ++e) {
            const float want = kv_dequantize_element(q, codes.data(), params.data(), e);
            ASSERT_EQ(kv_dequantize_element(q, at.codes, at.params, e), want);
            ASSERT_EQ(page[static_cast<size_t>(r * d + e)], want);
          }
        }
      }
    }
  }
}

// Every code byte at every position of the row (the rows shift the byte pattern by one), with
// head dims whose rows end in a scalar tail after the 8- / 16-wide vector steps, under scales
// and zero points of both signs and NaN scales: bitwise the reference decoding (NaN for NaN).
TEST(KvQuant, CpuPageDequantizationDecodesEveryCodeBitwise) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t d : {2, 8, 16, 18, 24, 30, 40, 64, 72, 128}) {
      const int32_t pt = 64;
      const int64_t row_bytes = kv_quant_row_code_bytes(q, d);
      std::vector<uint8_t> mem(static_cast<size_t>(kv_quant_page_bytes(q, pt, d)));
      for (int32_t r = 0; r < pt; ++r) {
        const KvQuantRow at = kv_quant_row(q, mem.data(), 0, r, pt, d);
        for (int64_t b = 0; b < row_bytes; ++b) {
          at.codes[b] = static_cast<uint8_t>((r * row_bytes + b + r) & 0xff);
        }
        at.params[0] = r == 5 ? NAN : std::ldexp(u(rng), static_cast<int>(rng() % 20) - 10);
        if (kv_quant_params_per_token(q) == 2) at.params[1] = u(rng) * 4.0f;
      }
      std::vector<float> page(static_cast<size_t>(pt * d));
      cpu::dequantize_page_rows(q, mem.data(), 0, pt, d, pt, page.data());
      for (int32_t r = 0; r < pt; ++r) {
        const KvQuantRow at = kv_quant_row(q, mem.data(), 0, r, pt, d);
        for (int32_t e = 0; e < d; ++e) {
          const float want = kv_dequantize_element(q, at.codes, at.params, e);
          const float got = page[static_cast<size_t>(r * d + e)];
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << kv_quant_name(q) << " d " << d << " row " << r;
            continue;
          }
          uint32_t a = 0, b = 0;
          std::memcpy(&a, &want, 4);
          std::memcpy(&b, &got, 4);
          ASSERT_EQ(a, b) << kv_quant_name(q) << " d " << d << " row " << r << " element " << e
                          << ": " << got << " vs " << want;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ls::kernels::test
