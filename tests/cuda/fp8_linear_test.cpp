// FP8 weights on the CUDA backend (docs/fp8-weights.md, kernels/cuda/fp8_linear.h): linear() with
// e4m3 weights and per-row scales against a double reference over the dequantized weights.
// - The GEMV (m <= 8) multiplies unquantized activations: only f32 summation and the output's
//   rounding separate it from the reference.
// - The FP8 GEMM (m > 8) quantizes each activation row: every element moves by at most half an
//   e4m3 step, |dx| <= 2^-4 |x| (2^-10 s_x in the subnormal range), so
//   |y - y_ref| <= sum_k (2^-4 |x_k| + 2^-10 s_x) |w_k| + the output's rounding (2^-8 |y| bf16,
//   2^-11 f16). The test asserts that bound element by element, and that the activation
//   quantization kernel equals core/fp8.h's host quantizer bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "cuda_test_util.h"
#include "kernels/cuda/fp8_linear.h"

namespace ls::cuda_test {
namespace {

TensorView dev(const DeviceArray& a, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView(a.data(), dt, shape, Device::kCuda);
}

struct Fp8Weight {
  std::vector<uint8_t> codes;  // [n, k] e4m3
  std::vector<float> scales;   // [n]
  std::vector<double> deq;     // [n, k] codes * scales
};

Fp8Weight random_fp8_weight(std::mt19937& rng, int64_t n, int64_t k) {
  std::uniform_real_distribution<float> d(-0.1f, 0.1f);
  std::uniform_real_distribution<float> row_mag(0.25f, 4.0f);
  Fp8Weight w;
  w.codes.resize(static_cast<size_t>(n * k));
  w.scales.resize(static_cast<size_t>(n));
  w.deq.resize(static_cast<size_t>(n * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    const float mag = row_mag(rng);  // rows of different magnitudes: per-row scales matter
    for (auto& v : row) v = d(rng) * mag;
    w.scales[static_cast<size_t>(r)] = quantize_row_e4m3(row.data(), k, w.codes.data() + r * k);
    for (int64_t c = 0; c < k; ++c) {
      w.deq[static_cast<size_t>(r * k + c)] =
          static_cast<double>(e4m3_to_f32(w.codes[static_cast<size_t>(r * k + c)])) *
          w.scales[static_cast<size_t>(r)];
    }
  }
  return w;
}

TEST(CudaFp8, QuantizeRowsMatchesHost) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(81);
  // f32 too: the loader quantizes f32 checkpoints' weights with it.
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    // 16-byte vectors held in registers (up to 2, 4, 8 per thread: k 16 to 14336); k not a
    // multiple of a vector and rows past 16384 elements are read twice, an element at a time.
    for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 16},
                        {5, 4096},
                        {300, 272},
                        {7, 14336},
                        {4, 2056},
                        {3, 20},
                        {2, 20008}}) {
      HostArray x = random_array(rng, m * k, dt, -3, 3);
      if (m > 2) {
        for (int64_t c = 0; c < k; ++c) x.set(k + c, 0.0f);  // an all-zero row: scale 1
      }
      DeviceArray dx = DeviceArray::of(x), dq(m * k), ds(m * 4);
      ASSERT_TRUE(kernels::cuda::quantize_rows_e4m3(dx.data(), m, k, dt, dq.data(), ds.as<float>(),
                                                    static_cast<cudaStream_t>(gpu()->stream_handle()))
                      .ok());
      std::vector<uint8_t> want(static_cast<size_t>(m * k));
      std::vector<float> want_s(static_cast<size_t>(m));
      for (int64_t r = 0; r < m; ++r) {
        want_s[static_cast<size_t>(r)] =
            quantize_row_e4m3(x.values.data() + r * k, k, want.data() + r * k);
      }
      EXPECT_EQ(dq.download(), want) << dtype_label(dt) << " m " << m << " k " << k;
      EXPECT_EQ(ds.download_as<float>(), want_s) << dtype_label(dt) << " m " << m << " k " << k;
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// The unscaled FP8 product's epilogue: out * factor * (row_scale * col_scale) (+ bias), rounded
// once, against the same f32 products on the host (1 ulp of slack: either side may contract the
// bias add into an FMA).
TEST(CudaFp8, ScaleRowsColsMatchesHost) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(83);
  std::uniform_real_distribution<float> sd(0.01f, 3.0f);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    // n % 8 == 0: a 16-byte vector per thread (4104: a second, partial block of columns); else
    // an element per thread.
    for (auto [m, n] : {std::pair<int64_t, int64_t>{3, 8}, {5, 4104}, {2, 7}, {9, 1000}}) {
      for (bool bias : {false, true}) {
        HostArray y = random_array(rng, m * n, dt, -2, 2);
        std::vector<float> rs(static_cast<size_t>(m)), cs(static_cast<size_t>(n)),
            b(static_cast<size_t>(n));
        for (auto& v : rs) v = sd(rng);
        for (auto& v : cs) v = sd(rng);
        for (auto& v : b) v = sd(rng) - 1.5f;
        DeviceArray dy = DeviceArray::of(y), drs = DeviceArray::of(rs), dcs = DeviceArray::of(cs),
                    db = DeviceArray::of(b);
        const float factor = 3.0f;  // |out| <= 2 * 3 * 9 + 1.5: inside f16's range
        ASSERT_TRUE(
            kernels::cuda::scale_rows_cols(dy.data(), m, n, factor, drs.as<float>(),
                                           dcs.as<float>(), bias ? db.as<float>() : nullptr, dt,
                                           static_cast<cudaStream_t>(gpu()->stream_handle()))
                .ok());
        std::vector<float> want(static_cast<size_t>(m * n));
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            const size_t i = static_cast<size_t>(r * n + c);
            const float v =
                y.values[i] * factor * (rs[static_cast<size_t>(r)] * cs[static_cast<size_t>(c)]);
            want[i] = bias ? v + b[static_cast<size_t>(c)] : v;
          }
        }
        const std::vector<float> got = dy.download_floats(dt, m * n);
        const double ulp = dt == DType::kBF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
        int64_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          if (!(std::fabs(got[i] - want[i]) <= ulp * std::fabs(want[i]) + 1e-30)) ++bad;
        }
        EXPECT_EQ(bad, 0) << dtype_label(dt) << " m " << m << " n " << n << " bias " << bias;
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

TEST(CudaFp8, LinearWithinTheFp8Bound) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(82);
  struct Shape {
    int64_t m, n, k;
  };
  // The GEMV where kernels::cuda::fp8_prefers_gemv says so (few rows or narrow layers), else
  // per-token quantization + cuBLASLt's FP8 GEMM (n % 8 != 0: the GEMV in chunks of eight rows).
  // The f16 cases check that unscaled products stay in range (k = 28672: a shift of 2^-17). n
  // odd and k not a multiple of a warp's 512 weights per pass; m not a multiple of any tile;
  // m = 520 takes cuBLASLt's outer-vector scales (asserted for bf16).
  const std::vector<Shape> shapes = {
      {1, 64, 64},      {2, 7, 208},     {3, 1000, 4096}, {4, 33, 1040},   {1, 4097, 1296},
      {5, 96, 128},     {17, 200, 272},  {37, 256, 320},  {128, 512, 512}, {300, 200, 112},
      {255, 264, 1024}, {9, 130, 16},    {6, 13, 64},     {2, 130, 14336}, {64, 1536, 512},
      {7, 2056, 272},   {8, 2048, 1024}, {3, 6152, 128},  {520, 136, 272}, {17, 64, 28672}};
  // Both GEMM forms: cuBLASLt's outer-vector scales (where it has them) and the unscaled
  // product + scale_rows_cols.
  for (bool outer_vec : {true, false}) {
    gpu()->set_fp8_outer_vec(outer_vec);
    for (DType dt : {DType::kBF16, DType::kF16}) {
      const double out_round = dt == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      for (const Shape& s : shapes) {
        for (bool bias : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << dtype_label(dt) << " m " << s.m << " n " << s.n << " k " << s.k
                       << " bias " << bias << " outer_vec " << outer_vec);
          HostArray x = random_array(rng, s.m * s.k, dt, -1, 1);
          const Fp8Weight w = random_fp8_weight(rng, s.n, s.k);
          std::vector<float> b(static_cast<size_t>(s.n));
          std::uniform_real_distribution<float> bd(-1.0f, 1.0f);
          for (auto& v : b) v = bd(rng);
          DeviceArray dx = DeviceArray::of(x), dw = DeviceArray::of(w.codes),
                      dscale = DeviceArray::of(w.scales), db = DeviceArray::of(b);
          DeviceArray dout(dtype_nbytes(dt, s.m * s.n));
          dout.poison(dt, s.m * s.n);
          LinearWeight lw;
          lw.w = dev(dw, DType::kU8, {s.n, s.k});
          lw.scale = dev(dscale, DType::kF32, {s.n});
          if (bias) lw.bias = dev(db, DType::kF32, {s.n});
          gpu()->linear(dev(dx, dt, {s.m, s.k}), lw, dev(dout, dt, {s.m, s.n}));
          const std::vector<float> got = dout.download_floats(dt, s.m * s.n);
          const bool quantized_x = !kernels::cuda::fp8_prefers_gemv(s.m, s.n) && s.n % 8 == 0;
          int64_t bad = 0;
          double worst_ratio = 0;
          for (int64_t i = 0; i < s.m; ++i) {
            float amax = 0;
            for (int64_t c = 0; c < s.k; ++c) {
              amax = std::max(amax, std::fabs(x.values[static_cast<size_t>(i * s.k + c)]));
            }
            const double sx = amax / 448.0;
            for (int64_t j = 0; j < s.n; ++j) {
              double ref = bias ? b[static_cast<size_t>(j)] : 0.0, mag = 0, xerr = 0;
              for (int64_t c = 0; c < s.k; ++c) {
                const double xv = x.values[static_cast<size_t>(i * s.k + c)];
                const double wv = w.deq[static_cast<size_t>(j * s.k + c)];
                ref += xv * wv;
                mag += std::fabs(xv * wv);
                xerr += (std::ldexp(std::fabs(xv), -4) + std::ldexp(sx, -10)) * std::fabs(wv);
              }
              // f32 summation: k * 2^-24 of the magnitudes, generously; the output's rounding.
              // The unscaled-product fallback rounds the output twice: 2 out_round.
              const double bound = (quantized_x ? xerr : 0.0) + mag * s.k * std::ldexp(1.0, -23) +
                                   2 * out_round * (std::fabs(ref) + (quantized_x ? xerr : 0.0)) +
                                   1e-6;
              const double err =
                  std::fabs(static_cast<double>(got[static_cast<size_t>(i * s.n + j)]) - ref);
              if (!(err <= bound)) ++bad;
              worst_ratio = std::max(worst_ratio, err / bound);
            }
          }
          EXPECT_EQ(bad, 0) << "worst error / bound " << worst_ratio;
          const bool ran_outer_vec = gpu()->fp8_outer_vec_scales(s.m, s.n, s.k);
          if (dt == DType::kBF16) {
            // The outer-vector form only where asked for and from kFp8OuterVecMinRows rows, and
            // then always (cuBLASLt 13.0 has it for every shape here).
            EXPECT_EQ(ran_outer_vec,
                      outer_vec && quantized_x && s.m >= kernels::cuda::kFp8OuterVecMinRows);
          }
        }
      }
    }
  }
  gpu()->set_fp8_outer_vec(true);
  EXPECT_TRUE(gpu()->take_error().ok());
}

}  // namespace
}  // namespace ls::cuda_test
