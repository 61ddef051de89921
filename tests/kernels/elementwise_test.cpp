// rmsnorm, add_rmsnorm, rope, silu_mul, add, embedding against naive double-precision loops,
// for every compiled ISA, over shapes that exercise vector bodies and scalar tails.

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/add.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

ThreadPool& test_pool() {
  static ThreadPool pool(2);
  return pool;
}

std::vector<double> rmsnorm_reference(const std::vector<float>& x, const std::vector<float>& w,
                                      float eps, int64_t rows, int64_t dim) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = w[i] * (x[r * dim + i] * inv);
  }
  return out;
}

TEST(Rmsnorm, MatchesReferenceForEveryIsaAndShape) {
  std::mt19937 rng(1);
  for (Isa isa : all_isas()) {
    for (int64_t rows : {1, 3, 40}) {
      for (int64_t dim : {1, 7, 16, 64, 100, 1000}) {
        SCOPED_TRACE(isa_label(isa) + " rows=" + std::to_string(rows) +
                     " dim=" + std::to_string(dim));
        const auto x = random_floats(rng, rows * dim, -3, 3);
        const auto w = random_floats(rng, dim, 0.5, 1.5);
        std::vector<float> out(x.size(), kNaN);
        cpu::rmsnorm(x.data(), w.data(), 1e-6f, rows, dim, out.data(), test_pool(), isa);
        EXPECT_TRUE(all_close(out, rmsnorm_reference(x, w, 1e-6f, rows, dim), 1e-6, 2e-6));
        // In place (out aliases x).
        auto y = x;
        cpu::rmsnorm(y.data(), w.data(), 1e-6f, rows, dim, y.data(), test_pool(), isa);
        EXPECT_TRUE(all_close(y, rmsnorm_reference(x, w, 1e-6f, rows, dim), 1e-6, 2e-6));
      }
    }
  }
}

TEST(AddRmsnorm, UpdatesResidualAndNormalises) {
  std::mt19937 rng(2);
  for (Isa isa : all_isas()) {
    for (int64_t dim : {5, 64, 300}) {
      const int64_t rows = 9;
      auto x = random_floats(rng, rows * dim, -2, 2);
      const auto y = random_floats(rng, rows * dim, -2, 2);
      const auto w = random_floats(rng, dim, 0.5, 1.5);
      std::vector<float> sum(x.size());
      for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + y[i];
      std::vector<float> out(x.size(), kNaN);
      cpu::add_rmsnorm(x.data(), y.data(), w.data(), 1e-5f, rows, dim, out.data(), test_pool(),
                       isa);
      std::vector<double> sum_d(sum.begin(), sum.end());
      EXPECT_TRUE(all_close(x, sum_d, 0, 0));  // fp32 add is exact to compare
      EXPECT_TRUE(all_close(out, rmsnorm_reference(sum, w, 1e-5f, rows, dim), 1e-6, 2e-6));
    }
  }
}

TEST(Rope, MatchesNeoxPairingOnRotaryDims) {
  std::mt19937 rng(3);
  for (Isa isa : all_isas()) {
    for (auto [head_dim, rotary_dim] :
         {std::pair<int64_t, int64_t>{64, 64}, {128, 64}, {96, 96}, {10, 6}}) {
      const int64_t tokens = 7, heads = 3, half = rotary_dim / 2;
      SCOPED_TRACE(isa_label(isa) + " head_dim=" + std::to_string(head_dim) +
                   " rotary=" + std::to_string(rotary_dim));
      auto x = random_floats(rng, tokens * heads * head_dim, -2, 2);
      std::vector<float> cos(tokens * half), sin(tokens * half);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = (t + 3) * std::pow(10000.0, -2.0 * i / rotary_dim);
          cos[t * half + i] = static_cast<float>(std::cos(angle));
          sin[t * half + i] = static_cast<float>(std::sin(angle));
        }
      }
      std::vector<double> want(x.size());
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* r = x.data() + (t * heads + h) * head_dim;
          double* o = want.data() + (t * heads + h) * head_dim;
          for (int64_t i = 0; i < head_dim; ++i) o[i] = r[i];
          for (int64_t i = 0; i < half; ++i) {
            const double c = cos[t * half + i], s = sin[t * half + i];
            o[i] = r[i] * c - double(r[i + half]) * s;
            o[i + half] = r[i + half] * c + double(r[i]) * s;
          }
        }
      }
      cpu::rope(x.data(), tokens, heads, head_dim, rotary_dim, cos.data(), sin.data(), test_pool(),
                isa);
      EXPECT_TRUE(all_close(x, want, 1e-6, 1e-6));
    }
  }
}

TEST(SiluMul, MatchesReferenceIncludingLargeMagnitudes) {
  std::mt19937 rng(4);
  for (Isa isa : all_isas()) {
    for (int64_t tokens : {1, 5}) {
      for (int64_t inter : {3, 16, 17, 200, 20000}) {
        SCOPED_TRACE(isa_label(isa) + " tokens=" + std::to_string(tokens) +
                     " inter=" + std::to_string(inter));
        auto gu = random_floats(rng, tokens * 2 * inter, -12, 12);
        gu[0] = -100.0f;  // exp overflow side
        gu[1 % gu.size()] = 100.0f;
        std::vector<float> out(tokens * inter, kNaN);
        cpu::silu_mul(gu.data(), tokens, inter, out.data(), test_pool(), isa);
        std::vector<double> want(out.size());
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t i = 0; i < inter; ++i) {
            const double g = gu[t * 2 * inter + i], u = gu[t * 2 * inter + inter + i];
            want[t * inter + i] = g / (1.0 + std::exp(-g)) * u;
          }
        }
        EXPECT_TRUE(all_close(out, want, 1e-6, 4e-6));
      }
    }
  }
}

TEST(Add, AddsInPlace) {
  std::mt19937 rng(5);
  for (Isa isa : all_isas()) {
    for (int64_t n : {1, 15, 16, 33, 100000}) {
      auto x = random_floats(rng, n);
      const auto y = random_floats(rng, n);
      std::vector<double> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = x[i] + y[i];
      cpu::add_inplace(x.data(), y.data(), n, test_pool(), isa);
      EXPECT_TRUE(all_close(x, want, 0, 1e-7)) << isa_label(isa) << " n=" << n;
    }
  }
}

TEST(Embedding, GathersAndWidensRows) {
  std::mt19937 rng(6);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t vocab = 50, hidden = 37;
    const TypedArray table = random_array(rng, vocab * hidden, dt, -3, 3);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 0, 12, 33, 48, 2};
    std::vector<float> out(ids.size() * hidden, kNaN);
    cpu::embedding(ids.data(), static_cast<int64_t>(ids.size()), table.data(), dt, hidden,
                   out.data(), test_pool());
    std::vector<double> want(out.size());
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int64_t i = 0; i < hidden; ++i) want[t * hidden + i] = table.values[ids[t] * hidden + i];
    }
    EXPECT_TRUE(all_close(out, want, 0, 0)) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace ls::kernels::test
