// Quantized-weight matmul against dequantize-then-f32 (ggml's formulas in io/gguf_dequant, which
// tests/io checks against gguf-py), over every ISA of the build, random blocks of every type, and
// shapes with odd row counts and column counts that are not a power of two. The only allowed
// difference is the activations' int8 rounding: half a step per element, so |y - ref| <=
// sum over 32-blocks of (d_x / 2) * sum |w| (plus float rounding).
#include "kernels/cpu/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/gguf_dequant.h"
#include "kernels/cpu/quant_dot4.h"

namespace ls::kernels::cpu {
namespace {

struct TypeCase {
  QuantType type;
  GgmlType ggml;
  std::vector<int> f16_offsets;  // the block's f16 scale fields
};

const std::vector<TypeCase>& cases() {
  static const std::vector<TypeCase> c = {
      {QuantType::kQ8_0, GgmlType::kQ8_0, {0}},     {QuantType::kQ4_0, GgmlType::kQ4_0, {0}},
      {QuantType::kQ4_1, GgmlType::kQ4_1, {0, 2}},  {QuantType::kQ4_K, GgmlType::kQ4_K, {0, 2}},
      {QuantType::kQ5_K, GgmlType::kQ5_K, {0, 2}},  {QuantType::kQ6_K, GgmlType::kQ6_K, {208}},
  };
  return c;
}

std::vector<uint8_t> random_blocks(std::mt19937& rng, const TypeCase& tc, int64_t nblocks) {
  const int64_t bytes = quant_block_bytes(tc.type);
  std::vector<uint8_t> out(static_cast<size_t>(nblocks * bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (auto& b : out) b = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < nblocks; ++i) {
    for (int off : tc.f16_offsets) {
      const uint16_t h = f32_to_f16(scale(rng));
      std::memcpy(out.data() + i * bytes + off, &h, 2);
    }
  }
  return out;
}

// max|x| over the activation group (32, or 256 for K-quant weights) of each 32-block of x[n].
std::vector<float> group_amax(const float* x, int64_t n, int64_t group) {
  std::vector<float> out(static_cast<size_t>(n / 32));
  for (int64_t g = 0; g < n / group; ++g) {
    float amax = 0;
    for (int64_t k = 0; k < group; ++k) amax = std::max(amax, std::fabs(x[g * group + k]));
    for (int64_t b = 0; b < group / 32; ++b) out[static_cast<size_t>(g * group / 32 + b)] = amax;
  }
  return out;
}

TEST(QuantMatmul, MatchesDequantizedF32WithinActivationRounding) {
  std::mt19937 rng(24);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const TypeCase& tc : cases()) {
    const int64_t be = quant_block_elems(tc.type);
    const std::vector<int64_t> col_choices =
        be == 32 ? std::vector<int64_t>{32, 96, 288} : std::vector<int64_t>{256, 768};
    for (int64_t cols : col_choices) {
      for (int64_t rows : {1, 3, 6, 17, 35}) {  // tails of the 4-row kernels: 1, 2, 3
        for (int64_t m : {1, 3, 19}) {
          const int64_t nblocks = rows * cols / be;
          const auto w = random_blocks(rng, tc, nblocks);
          std::vector<float> x(static_cast<size_t>(m * cols));
          for (float& v : x) v = normal(rng);
          x[0] = 25.f;  // an outlier widens the first activation block's step
          std::vector<float> wf(static_cast<size_t>(rows * cols));
          ASSERT_TRUE(dequantize_row(tc.ggml, w.data(), wf.data(), rows * cols).ok());
          std::vector<float> y_avx2;
          for (Isa isa : available_isas()) {
            std::vector<float> y(static_cast<size_t>(m * rows), -1.f);
            quant_matmul(tc.type, w.data(), rows, cols, x.data(), m, y.data(), isa);
            if (isa == Isa::kAvx2) y_avx2 = y;
            if (isa == Isa::kAvx512) {  // VNNI (or the same AVX2 kernels): identical integer sums
              ASSERT_EQ(y, y_avx2) << quant_kernel_name(isa) << " type "
                                   << static_cast<int>(tc.type) << " rows " << rows << " cols "
                                   << cols << " m " << m;
            }
            for (int64_t i = 0; i < m; ++i) {
              const std::vector<float> amax = group_amax(x.data() + i * cols, cols, be);
              for (int64_t r = 0; r < rows; ++r) {
                double ref = 0, bound = 0, mag = 0;
                for (int64_t b = 0; b < cols / 32; ++b) {
                  float wabs = 0;
                  for (int64_t k = 32 * b; k < 32 * b + 32; ++k) {
                    const double wv = wf[static_cast<size_t>(r * cols + k)];
                    const double xv = x[static_cast<size_t>(i * cols + k)];
                    ref += wv * xv;
                    mag += std::fabs(wv * xv);
                    wabs += static_cast<float>(std::fabs(wv));
                  }
                  bound += amax[static_cast<size_t>(b)] / 127.0 / 2.0 * wabs;
                }
                const double got = y[static_cast<size_t>(i * rows + r)];
                EXPECT_LE(std::fabs(got - ref), bound * 1.0001 + 1e-5 * mag + 1e-6)
                    << isa_name(isa) << " type " << static_cast<int>(tc.type) << " rows " << rows
                    << " cols " << cols << " m " << m << " at " << i << "," << r;
              }
            }
          }
        }
      }
    }
  }
}

// The pooled linear over a fused matrix of mixed block types (as llama.cpp's Q4_K_M stores q/k in
// Q4_K and v in Q6_K), with a bias, decode and prefill-sized m (a tail of the 16-row tiles), 1 and
// 3 threads, against dequantize-then-f32 within the same rounding bound.
TEST(QuantMatmul, PooledLinearOverMixedPartsMatchesDequantized) {
  std::mt19937 rng(2424);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t cols = 512;
  const std::vector<std::pair<size_t, int64_t>> layout = {{3, 37}, {5, 16}, {0, 21}, {2, 5},
                                                          {4, 3},  {1, 9}};  // case index, rows
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<float> wf;
  QuantMatrix qm;
  qm.cols = cols;
  for (const auto& [ci, rows] : layout) {
    const TypeCase& tc = cases()[ci];
    blocks.push_back(random_blocks(rng, tc, rows * cols / quant_block_elems(tc.type)));
    std::vector<float> part(static_cast<size_t>(rows * cols));
    ASSERT_TRUE(dequantize_row(tc.ggml, blocks.back().data(), part.data(), rows * cols).ok());
    wf.insert(wf.end(), part.begin(), part.end());
    qm.parts.push_back(QuantPart{tc.type, blocks.back().data(), rows});
    qm.rows += rows;
  }
  std::vector<float> bias(static_cast<size_t>(qm.rows));
  for (float& b : bias) b = normal(rng);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t m : {1, 2, 40}) {
      std::vector<float> x(static_cast<size_t>(m * cols));
      for (float& v : x) v = normal(rng);
      std::vector<float> y_avx2;
      for (Isa isa : available_isas()) {
        std::vector<float> y(static_cast<size_t>(m * qm.rows), -7.f);
        quant_linear(qm, x.data(), m, bias.data(), y.data(), pool, isa);
        if (isa == Isa::kAvx2) y_avx2 = y;
        if (isa == Isa::kAvx512) {
          ASSERT_EQ(y, y_avx2) << quant_kernel_name(isa) << " threads " << threads << " m " << m;
        }
        for (int64_t i = 0; i < m; ++i) {
          // The matrix has K-quant parts, so all its rows see activations in groups of 256.
          const std::vector<float> amax = group_amax(x.data() + i * cols, cols, 256);
          for (int64_t r = 0; r < qm.rows; ++r) {
            double ref = bias[static_cast<size_t>(r)], bound = 0, mag = 0;
            for (int64_t b = 0; b < cols / 32; ++b) {
              float wabs = 0;
              for (int64_t k = 32 * b; k < 32 * b + 32; ++k) {
                const double wv = wf[static_cast<size_t>(r * cols + k)];
                const double xv = x[static_cast<size_t>(i * cols + k)];
                ref += wv * xv;
                mag += std::fabs(wv * xv);
                wabs += static_cast<float>(std::fabs(wv));
              }
              bound += amax[static_cast<size_t>(b)] / 127.0 / 2.0 * wabs;
            }
            const double got = y[static_cast<size_t>(i * qm.rows + r)];
            ASSERT_LE(std::fabs(got - ref), bound * 1.0001 + 1e-5 * mag + 1e-5)
                << isa_name(isa) << " threads " << threads << " m " << m << " at " << i << "," << r;
          }
        }
      }
    }
  }
}

#if defined(LS_QUANT_DOT4)
// The VNNI four-row kernels (vpdpbusd / vpdpwssd) against the AVX2 ones (maddubs + madd) for
// every type and activation row count: the integer sums are the same, so the outputs must be
// identical. Activations at +-127 and Q8_0 weights at -128 make the largest byte products
// (maddubs' pair sums stay below int16's limit). Where the build does not target AVX512_VNNI the
// VNNI kernel runs the AVX2 sequences in place of the two instructions, which still checks
// how the variant accumulates; on an AVX512_VNNI build it runs the instructions.
TEST(QuantMatmul, VnniKernelsEqualAvx2Kernels) {
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.f, 1.f);
#if defined(LS_QUANT_DOT4_VNNI)
  EXPECT_TRUE(quant_uses_vnni(Isa::kAvx512));
#endif
  std::printf("  quant kernels: avx2 -> %s, avx512 -> %s\n",
              std::string(quant_kernel_name(Isa::kAvx2)).c_str(),
              std::string(quant_kernel_name(Isa::kAvx512)).c_str());
  for (const TypeCase& tc : cases()) {
    const int64_t be = quant_block_elems(tc.type);
    const int64_t cols = 3 * 256;
    const int64_t nblocks = cols / be;
    const int64_t row_bytes = nblocks * quant_block_bytes(tc.type);
    auto w = random_blocks(rng, tc, 4 * nblocks);
    if (tc.type == QuantType::kQ8_0) {  // some weights at -128 and +127
      for (int64_t i = 0; i < 4 * nblocks; ++i) {
        w[static_cast<size_t>(i * 34 + 2 + i % 32)] = 0x80;
        w[static_cast<size_t>(i * 34 + 2 + (i + 7) % 32)] = 0x7f;
      }
    }
    for (bool saturate : {false, true}) {
      std::vector<float> x(static_cast<size_t>(4 * cols));
      for (float& v : x) v = saturate ? (normal(rng) < 0 ? -1.f : 1.f) : normal(rng);
      std::vector<Q8Block> act(static_cast<size_t>(4 * cols / 32));
      for (int t = 0; t < 4; ++t) {
        quantize_activations(x.data() + t * cols, cols, act.data() + t * (cols / 32), Isa::kScalar,
                             activation_group(tc.type));
      }
      for (int n : {1, 2, 4}) {
        float a[16], b[16];
        for (int k = 0; k < 16; ++k) a[k] = b[k] = -3.f;
        quant_dot4_avx2(tc.type, w.data(), row_bytes, act.data(), cols / 32, nblocks, a, 4, n);
        quant_dot4_vnni(tc.type, w.data(), row_bytes, act.data(), cols / 32, nblocks, b, 4, n);
        for (int k = 0; k < 4 * n; ++k) {
          ASSERT_EQ(a[k], b[k]) << "type " << static_cast<int>(tc.type) << " act rows " << n
                                << " saturate " << saturate << " at " << k;
          ASSERT_NE(a[k], -3.f);  // written
        }
        // And against the row-at-a-time kernel (another summation order): close.
        for (int t = 0; t < n; ++t) {
          for (int j = 0; j < 4; ++j) {
            std::vector<float> one(1);
            quant_matmul(tc.type, w.data() + j * row_bytes, 1, cols, x.data() + t * cols, 1,
                         one.data(), Isa::kScalar);
            EXPECT_NEAR(b[t * 4 + j], one[0], 1e-4 * (1 + std::fabs(one[0])))
                << "type " << static_cast<int>(tc.type) << " act rows " << n << " t " << t
                << " row " << j;
          }
        }
      }
    }
  }
}
#endif

TEST(QuantMatmul, ActivationsRoundToTheNearestStep) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i - 20) * 0.37f;
  Q8Block b[2];
  quantize_activations(x.data(), 64, b);
  for (int blk = 0; blk < 2; ++blk) {
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      const float v = x[static_cast<size_t>(32 * blk + j)];
      EXPECT_LE(std::fabs(b[blk].d * b[blk].q[j] - v), b[blk].d / 2 * 1.0001f);
      sum += b[blk].q[j];
    }
    EXPECT_EQ(b[blk].sum, sum);
    EXPECT_EQ(std::abs(static_cast<int>(b[blk].q[blk == 0 ? 0 : 31])), 127);
  }
}

// Every ISA's activation quantization gives the scalar loop's blocks bit for bit (the matmul
// kernels' error bound assumes it), on values with exact ties (k + 0.5 steps), zeros, a zero
// block and both signs at the block maximum, in groups of 32 and of 256.
TEST(QuantMatmul, ActivationQuantizationIsIdenticalOnEveryIsa) {
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.f, 3.f);
  const int64_t n = 32 * 9;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(32 + j)] = static_cast<float>(j - 16) + 0.5f;
  x[32] = -127.0f;  // block 1: d = 1, so every k + 0.5 is a tie (nearest even)
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(64 + j)] = 0.f;  // block 2: all zero
  x[100] = 0.f;
  x[130] = -std::fabs(x[131]) * 4.f;  // a negative block maximum
  std::vector<Q8Block> ref(static_cast<size_t>(n / 32));
  quantize_activations(x.data(), n, ref.data(), Isa::kScalar);
  EXPECT_EQ(ref[1].q[1], -14);  // -14.5 -> -14
  EXPECT_EQ(ref[1].q[2], -14);  // -13.5 -> -14
  EXPECT_EQ(ref[2].d, 0.f);
  for (Isa isa : available_isas()) {
    std::vector<Q8Block> got(ref.size());
    quantize_activations(x.data(), n, got.data(), isa);
    for (size_t b = 0; b < ref.size(); ++b) {
      EXPECT_EQ(got[b].d, ref[b].d) << isa_name(isa) << " block " << b;
      EXPECT_EQ(got[b].sum, ref[b].sum) << isa_name(isa) << " block " << b;
      EXPECT_EQ(std::memcmp(got[b].q, ref[b].q, 32), 0) << isa_name(isa) << " block " << b;
    }
  }
  // Groups of 256 (K-quant weights): the group's 8 blocks share the group's step, and every
  // element is still within half a step.
  const int64_t n256 = 512;
  std::vector<float> x256(static_cast<size_t>(n256));
  for (float& v : x256) v = normal(rng);
  x256[300] = 40.f;
  std::vector<Q8Block> ref256(static_cast<size_t>(n256 / 32));
  quantize_activations(x256.data(), n256, ref256.data(), Isa::kScalar, 256);
  for (int64_t b = 0; b < n256 / 32; ++b) {
    const Q8Block& blk = ref256[static_cast<size_t>(b)];
    EXPECT_EQ(blk.d, ref256[static_cast<size_t>(b / 8 * 8)].d);
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(blk.d * blk.q[j] - x256[static_cast<size_t>(32 * b + j)]),
                blk.d / 2 * 1.0001f);
    }
  }
  EXPECT_FLOAT_EQ(ref256[8].d, 40.f / 127.f);
  for (Isa isa : available_isas()) {
    std::vector<Q8Block> got(ref256.size());
    quantize_activations(x256.data(), n256, got.data(), isa, 256);
    for (size_t b = 0; b < ref256.size(); ++b) {
      EXPECT_EQ(got[b].d, ref256[b].d) << isa_name(isa) << " block " << b;
      EXPECT_EQ(got[b].sum, ref256[b].sum) << isa_name(isa) << " block " << b;
      EXPECT_EQ(std::memcmp(got[b].q, ref256[b].q, 32), 0) << isa_name(isa) << " block " << b;
    }
  }
}

}  // namespace
}  // namespace ls::kernels::cpu
