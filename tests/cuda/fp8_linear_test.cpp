// FP8 weights on the CUDA backend (docs/fp8-weights.md, kernels/cuda/fp8_linear.h): linear() with
// e4m3 weights and per-row scales against a double reference over the dequantized weights.
// - The GEMV (m <= 8) multiplies unquantized activations: only f32 summation and the output's
//   rounding separate it from the reference.
// - The FP8 GEMM (m > 8) quantizes each activation row: every element moves by at most half an
//   e4m3 step, |dx| <= 2^-4 |x| (2^-10 s_x in the subnormal range), so
//   |y - y_ref| <= sum_k (2^-4 |x_k| + 2^-10 s_x) |w_k| + the output's rounding (2^-8 |y| bf16,
//   2^-11 f16). The test asserts that bound element by element, and that the activation
//   quantization kernel equals core/fp8.h's host quantizer bit for bit.
// - With fast accumulation (BackendOptions::fp8_fast_accum) the FP8 GEMM sums the whole k in the
//   tensor cores' own accumulator, about 14 significant bits on Hopper (DeepSeek-V3 report,
//   section 3.3.2; measurements describe an e8m13 accumulator that truncates). Model: one
//   truncation of the accumulator per MMA k-step of 32 products, each below 2^-13 of the partial
//   sum, which is at most S = sum_k |xq_k| |w_k| (xq the quantized activations); with a factor 2
//   for what the model leaves out (alignment of the products inside a step),
//   |accumulation error| <= 2 ceil(k/32) 2^-13 S. The fast-mode test asserts the bound above plus
//   this term, and this term alone (plus f32 and output rounding) against a reference over the
//   quantized activations (core/fp8.h's quantizer equals the kernel's bit for bit), at k up to
//   14336 and with same-sign data, where truncation errors add up instead of cancelling.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend_options.h"
#include "backend/cuda/cuda_backend.h"
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

Fp8Weight random_fp8_weight(std::mt19937& rng, int64_t n, int64_t k, bool positive = false) {
  std::uniform_real_distribution<float> d(positive ? 0.0f : -0.1f, 0.1f);
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
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 16}, {5, 4096}, {300, 272}, {7, 14336}}) {
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

struct Shape {
  int64_t m, n, k;
};

// A second backend on device 0 created with fast FP8 accumulation (null without a device). It
// reads buffers gpu() allocated: callers synchronize gpu() before and fast_gpu() after its ops.
CudaBackend* fast_gpu() {
  static std::unique_ptr<CudaBackend> backend = []() -> std::unique_ptr<CudaBackend> {
    if (!gpu()) return nullptr;
    BackendOptions o;
    o.fp8_fast_accum = true;
    auto b = CudaBackend::create(0, o);
    return b.ok() ? std::move(*b) : nullptr;
  }();
  return backend.get();
}

// The accumulation term of the fast mode's bound for one output (see the top of the file):
// 2 ceil(k/32) 2^-13 times the sum of |xq_k| |w_k|.
double fast_accum_bound(int64_t k, double abs_sum) {
  return 2.0 * static_cast<double>((k + 31) / 32) * std::ldexp(1.0, -13) * abs_sum;
}

struct BoundReport {
  int64_t bad = 0;             // elements outside the bound against the unquantized reference
  int64_t bad_quantized = 0;   // fast mode: outside the accumulation bound (quantized reference)
  double worst_ratio = 0;      // worst error / bound
  double worst_accum_rel = 0;  // worst |y - y_ref(xq)| / S, GEMM rows only
};

// linear() on `b` for `s` (random rows of mixed magnitudes; `positive`: x and w >= 0) against
// the double references, element by element.
BoundReport check_linear(CudaBackend& b, bool fast, const Shape& s, DType dt, bool bias,
                         bool positive, std::mt19937& rng) {
  const double out_round = dt == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  HostArray x = random_array(rng, s.m * s.k, dt, positive ? 0.0f : -1.0f, 1);
  const Fp8Weight w = random_fp8_weight(rng, s.n, s.k, positive);
  std::vector<float> bv(static_cast<size_t>(s.n));
  std::uniform_real_distribution<float> bd(-1.0f, 1.0f);
  for (auto& v : bv) v = bd(rng);
  DeviceArray dx = DeviceArray::of(x), dw = DeviceArray::of(w.codes),
              dscale = DeviceArray::of(w.scales), db = DeviceArray::of(bv);
  DeviceArray dout(dtype_nbytes(dt, s.m * s.n));
  dout.poison(dt, s.m * s.n);
  gpu()->synchronize();  // the uploads are on gpu()'s stream
  LinearWeight lw;
  lw.w = dev(dw, DType::kU8, {s.n, s.k});
  lw.scale = dev(dscale, DType::kF32, {s.n});
  if (bias) lw.bias = dev(db, DType::kF32, {s.n});
  b.linear(dev(dx, dt, {s.m, s.k}), lw, dev(dout, dt, {s.m, s.n}));
  b.synchronize();
  const std::vector<float> got = dout.download_floats(dt, s.m * s.n);
  const bool quantized_x = s.m > kernels::cuda::kFp8GemvMaxRows && s.n % 8 == 0;
  BoundReport rep;
  std::vector<uint8_t> xq(static_cast<size_t>(s.k));
  std::vector<double> xdq(static_cast<size_t>(s.k));
  for (int64_t i = 0; i < s.m; ++i) {
    const float* xrow = x.values.data() + i * s.k;
    float amax = 0;
    for (int64_t c = 0; c < s.k; ++c) amax = std::max(amax, std::fabs(xrow[c]));
    const double sx = amax / 448.0;
    // The activations as the GEMM sees them (the host quantizer equals the kernel bit for bit).
    const float qscale = quantize_row_e4m3(xrow, s.k, xq.data());
    for (int64_t c = 0; c < s.k; ++c) {
      xdq[static_cast<size_t>(c)] =
          quantized_x ? static_cast<double>(e4m3_to_f32(xq[static_cast<size_t>(c)])) * qscale
                      : static_cast<double>(xrow[c]);
    }
    for (int64_t j = 0; j < s.n; ++j) {
      const double b0 = bias ? bv[static_cast<size_t>(j)] : 0.0;
      double ref = b0, ref_q = b0, mag = 0, mag_q = 0, xerr = 0;
      for (int64_t c = 0; c < s.k; ++c) {
        const double xv = xrow[c], xqv = xdq[static_cast<size_t>(c)];
        const double wv = w.deq[static_cast<size_t>(j * s.k + c)];
        ref += xv * wv;
        ref_q += xqv * wv;
        mag += std::fabs(xv * wv);
        mag_q += std::fabs(xqv * wv);
        xerr += (std::ldexp(std::fabs(xv), -4) + std::ldexp(sx, -10)) * std::fabs(wv);
      }
      const double accum = fast && quantized_x ? fast_accum_bound(s.k, mag_q) : 0.0;
      // f32 summation: k * 2^-24 of the magnitudes, generously; the output's rounding.
      // The unscaled-product fallback rounds the output twice: 2 out_round.
      const double xq_err = quantized_x ? xerr : 0.0;
      const double bound = xq_err + accum + mag * s.k * std::ldexp(1.0, -23) +
                           2 * out_round * (std::fabs(ref) + xq_err + accum) + 1e-6;
      const double y = got[static_cast<size_t>(i * s.n + j)];
      const double err = std::fabs(y - ref);
      if (!(err <= bound)) ++rep.bad;
      rep.worst_ratio = std::max(rep.worst_ratio, err / bound);
      if (quantized_x) {
        const double err_q = std::fabs(y - ref_q);
        if (mag_q > 0) rep.worst_accum_rel = std::max(rep.worst_accum_rel, err_q / mag_q);
        const double bound_q = accum + mag_q * s.k * std::ldexp(1.0, -23) +
                               2 * out_round * (std::fabs(ref_q) + accum) + 1e-6;
        if (fast && !(err_q <= bound_q)) ++rep.bad_quantized;
      }
    }
  }
  return rep;
}

// m 1..8: the GEMV; larger m: per-token quantization + cuBLASLt's FP8 GEMM (n % 8 != 0: the
// GEMV in chunks of eight rows). The f16 cases check that unscaled products stay in range. n odd
// and k not a multiple of a warp's 512 weights per pass; m not a multiple of any tile.
const std::vector<Shape> kShapes = {{1, 64, 64},     {2, 7, 208},      {3, 1000, 4096},
                                    {4, 33, 1040},   {1, 4097, 1296},  {5, 96, 128},
                                    {17, 200, 272},  {37, 256, 320},   {128, 512, 512},
                                    {300, 200, 112}, {255, 264, 1024}, {9, 130, 16},
                                    {6, 13, 64},     {2, 130, 14336},  {64, 1536, 512}};

TEST(CudaFp8, LinearWithinTheFp8Bound) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(82);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const Shape& s : kShapes) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m " << s.m << " n " << s.n
                                          << " k " << s.k << " bias " << bias);
        const BoundReport r = check_linear(*gpu(), false, s, dt, bias, false, rng);
        EXPECT_EQ(r.bad, 0) << "worst error / bound " << r.worst_ratio;
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// Fast accumulation: the shapes above plus the Llama-3-8B k's (4096, 14336) for the GEMM, and
// same-sign data at k = 14336, within the precise bound plus the accumulation term, and within
// the accumulation term alone against the reference over the quantized activations. The worst
// accumulation error relative to S is printed per mode (precise printed for comparison, not
// asserted against that term).
TEST(CudaFp8, FastAccumulationWithinItsBound) {
  LS_REQUIRE_CUDA();
  ASSERT_NE(fast_gpu(), nullptr);
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({64, 256, 4096});
  shapes.push_back({33, 128, 14336});
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (bool positive : {false, true}) {
      const std::vector<Shape> cases =
          positive ? std::vector<Shape>{{48, 64, 14336}, {24, 128, 4096}} : shapes;
      double worst[2] = {0, 0};  // precise, fast
      for (const Shape& s : cases) {
        for (bool bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " m " << s.m << " n " << s.n
                                            << " k " << s.k << " bias " << bias << " positive "
                                            << positive);
          std::mt19937 rng(static_cast<uint32_t>(83 + s.m * 7 + s.k));
          std::mt19937 rng_same = rng;  // both modes on the same data
          const BoundReport f = check_linear(*fast_gpu(), true, s, dt, bias, positive, rng);
          EXPECT_EQ(f.bad, 0) << "worst error / bound " << f.worst_ratio;
          EXPECT_EQ(f.bad_quantized, 0) << "worst accumulation error / S " << f.worst_accum_rel
                                        << ", bound / S "
                                        << fast_accum_bound(s.k, 1.0);
          worst[1] = std::max(worst[1], f.worst_accum_rel);
          if (!bias) {
            const BoundReport p = check_linear(*gpu(), false, s, dt, bias, positive, rng_same);
            EXPECT_EQ(p.bad, 0) << "precise: worst error / bound " << p.worst_ratio;
            worst[0] = std::max(worst[0], p.worst_accum_rel);
          }
        }
      }
      std::cout << "[ fp8 accum ] " << dtype_label(dt) << (positive ? " same-sign" : " mixed-sign")
                << ": worst |y - y_ref(xq)| / sum|xq||w|: precise " << worst[0] << ", fast "
                << worst[1] << " (2^-13 = " << std::ldexp(1.0, -13) << ")\n";
    }
  }
  EXPECT_TRUE(fast_gpu()->take_error().ok());
  EXPECT_TRUE(gpu()->take_error().ok());
}

}  // namespace
}  // namespace ls::cuda_test
