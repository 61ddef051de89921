// matmul (small-M kernel for every ISA, the OpenBLAS path in both threading modes, and the
// dispatching entry point) against a double-precision reference, over f32/bf16/f16 weights,
// with and without bias, over shapes with vector tails and odd row counts.

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/matmul.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

struct Problem {
  int64_t m, k, n;
  DType w_dtype;
  bool bias;
  std::vector<float> x;
  TypedArray w;
  std::vector<float> b;
  std::vector<double> want;
  std::vector<double> abs_sum;  // sum |x w| per output: scales the fp32 rounding bound
};

Problem make_problem(std::mt19937& rng, int64_t m, int64_t k, int64_t n, DType dt, bool bias) {
  Problem p{m,
            k,
            n,
            dt,
            bias,
            random_floats(rng, m * k, -1, 1),
            random_array(rng, n * k, dt, -1, 1),
            bias ? random_floats(rng, n, -1, 1) : std::vector<float>{},
            {},
            {}};
  p.want.assign(static_cast<size_t>(m * n), 0.0);
  p.abs_sum.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double s = bias ? p.b[c] : 0.0, a = 0.0;
      for (int64_t e = 0; e < k; ++e) {
        const double t = double(p.x[r * k + e]) * p.w.values[c * k + e];
        s += t;
        a += std::abs(t);
      }
      p.want[r * n + c] = s;
      p.abs_sum[r * n + c] = a;
    }
  }
  return p;
}

::testing::AssertionResult check(const Problem& p, const std::vector<float>& y) {
  for (size_t i = 0; i < y.size(); ++i) {
    const double tol = 1e-6 + 2e-6 * p.abs_sum[i] * std::sqrt(double(p.k));
    if (!(std::abs(y[i] - p.want[i]) <= tol)) {
      return ::testing::AssertionFailure() << "y[" << i << "] = " << y[i] << ", want " << p.want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(Matmul, SmallMKernelEveryIsaDtypeAndShape) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t m : {1, 2, 3, 4, 5, 8, 13}) {
        for (auto [k, n] :
             {std::pair<int64_t, int64_t>{16, 4}, {100, 7}, {64, 33}, {257, 130}, {512, 64},
              {1411, 70}}) {
          SCOPED_TRACE(isa_label(isa) + " " + std::string(dtype_name(dt)) + " m=" +
                       std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
          const Problem p = make_problem(rng, m, k, n, dt, (m + k) % 2 == 0);
          std::vector<float> y(m * n, kNaN);
          cpu::matmul_small_m(p.x.data(), m, k, p.w.data(), dt, n, p.bias ? p.b.data() : nullptr,
                              y.data(), pool, isa);
          EXPECT_TRUE(check(p, y));
        }
      }
    }
  }
}

TEST(Matmul, LanesKernelEveryIsaDtypeAndShape) {
  std::mt19937 rng(14);
  ThreadPool pool(2);
  for (Isa isa : all_isas()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      // Row counts around the vector width and the 64-row transpose chunk.
      for (int64_t m : {1, 5, 16, 17, 40, 64, 65, 130}) {
        for (auto [k, n] : {std::pair<int64_t, int64_t>{16, 4}, {100, 33}, {257, 47}}) {
          SCOPED_TRACE(isa_label(isa) + " " + std::string(dtype_name(dt)) + " m=" +
                       std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
          const Problem p = make_problem(rng, m, k, n, dt, (m + n) % 2 == 0);
          std::vector<float> y(m * n, kNaN);
          cpu::matmul_lanes(p.x.data(), m, k, p.w.data(), dt, n, p.bias ? p.b.data() : nullptr,
                            y.data(), pool, isa);
          EXPECT_TRUE(check(p, y));
        }
      }
    }
  }
}

TEST(Matmul, BlasPathBothThreadingModesAndPanelSizes) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto threading : {cpu::BlasThreading::kPoolSplit, cpu::BlasThreading::kBlasThreads}) {
      for (auto [m, k, n] :
           {std::tuple<int64_t, int64_t, int64_t>{9, 64, 48}, {40, 100, 70}, {130, 256, 300}}) {
        for (int64_t panel : {0, 16, 1000}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                       " panel=" + std::to_string(panel));
          const Problem p = make_problem(rng, m, k, n, dt, n % 2 == 0);
          std::vector<float> y(m * n, kNaN);
          cpu::matmul_blas(p.x.data(), m, k, p.w.data(), dt, n, p.bias ? p.b.data() : nullptr,
                           y.data(), pool, threading, panel);
          EXPECT_TRUE(check(p, y));
        }
      }
    }
  }
}

TEST(Matmul, EntryPointAcrossTheSmallLargeBoundary) {
  std::mt19937 rng(13);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (DType dt : {DType::kBF16, DType::kF32}) {
      for (int64_t m : {int64_t{1}, cpu::kSmallMMaxRows, cpu::kSmallMMaxRows + 1,
                        cpu::kLanesMaxRows, cpu::kLanesMaxRows + 1}) {
        const Problem p = make_problem(rng, m, 96, 40, dt, true);
        std::vector<float> y(m * 40, kNaN);
        cpu::matmul(p.x.data(), m, 96, p.w.data(), dt, 40, p.b.data(), y.data(), pool);
        EXPECT_TRUE(check(p, y)) << "threads=" << threads << " m=" << m;
      }
    }
  }
}

}  // namespace
}  // namespace ls::kernels::test
