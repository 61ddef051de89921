// The CPU backend: aligned allocation and its failure modes, plain copies, and each op routed
// to its kernel with the right shapes (checked against naive references on small tensors);
// malformed views are refused without touching the output.

#include <gtest/gtest.h>

#include "attention_case.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "kernel_test_util.h"

namespace ls::kernels::test {
namespace {

TEST(CpuBackend, IdentityAndAlignedAllocation) {
  auto backend = make_cpu_backend(2);
  EXPECT_EQ(backend->device(), Device::kCpu);
  EXPECT_EQ(backend->act_dtype(), DType::kF32);
  EXPECT_NE(backend->name().find("2 threads"), std::string::npos) << backend->name();
  for (int64_t bytes : {0, 1, 63, 64, 1000, 1 << 20}) {
    for (MemoryTier tier : {MemoryTier::kDevice, MemoryTier::kHost}) {
      auto buf = backend->allocate(bytes, tier);
      ASSERT_TRUE(buf.ok()) << buf.status().to_string();
      EXPECT_NE(buf->data(), nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
      EXPECT_EQ(buf->bytes(), bytes);
      EXPECT_EQ(buf->tier(), tier);
      backend->fill_zero(buf->data(), bytes);
      for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(buf->as<uint8_t>()[i], 0);
    }
  }
  // Large buffers take the mapped path; allocate_zeroed is zero on both paths.
  for (int64_t bytes : {int64_t{100}, int64_t{3} << 20}) {
    auto buf = backend->allocate(bytes);
    ASSERT_TRUE(buf.ok()) << buf.status().to_string();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
    std::memset(buf->data(), 0xAB, static_cast<size_t>(bytes));
    EXPECT_EQ(buf->as<uint8_t>()[bytes - 1], 0xAB);
    buf = backend->allocate_zeroed(bytes);  // the old buffer is released by the move
    ASSERT_TRUE(buf.ok()) << buf.status().to_string();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
    for (int64_t i = 0; i < bytes; i += 997) ASSERT_EQ(buf->as<uint8_t>()[i], 0) << "byte " << i;
    EXPECT_EQ(buf->as<uint8_t>()[bytes - 1], 0);
  }
  EXPECT_EQ(backend->allocate(-1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->allocate(int64_t{1} << 62).status().code(), StatusCode::kResourceExhausted);
  // Copies.
  auto a = backend->allocate(256), b = backend->allocate(256);
  for (int i = 0; i < 256; ++i) a->as<uint8_t>()[i] = static_cast<uint8_t>(i);
  backend->copy_bytes(b->data(), a->data(), 256);
  EXPECT_EQ(std::memcmp(a->data(), b->data(), 256), 0);
  backend->synchronize();
}

TEST(CpuBackend, LinearWithAndWithoutBiasForEachWeightDtype) {
  std::mt19937 rng(61);
  auto backend = make_cpu_backend(2);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 3, 40}) {
      const int64_t k = 72, n = 50;
      auto x = random_floats(rng, m * k);
      TypedArray w = random_array(rng, n * k, dt);
      auto bias = random_floats(rng, n);
      for (bool with_bias : {false, true}) {
        std::vector<float> y(m * n, kNaN);
        LinearWeight lw{TensorView(w.data(), dt, {n, k}),
                        with_bias ? TensorView(bias.data(), DType::kF32, {n}) : TensorView()};
        backend->linear(TensorView(x.data(), DType::kF32, {m, k}), lw,
                        TensorView(y.data(), DType::kF32, {m, n}));
        std::vector<double> want(m * n);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            double s = with_bias ? bias[c] : 0.0;
            for (int64_t e = 0; e < k; ++e) s += double(x[r * k + e]) * w.values[c * k + e];
            want[r * n + c] = s;
          }
        }
        EXPECT_TRUE(all_close(y, want, 2e-5, 2e-5))
            << dtype_name(dt) << " m=" << m << " bias=" << with_bias;
      }
    }
  }
}

TEST(CpuBackend, ElementwiseOpsRouteToKernels) {
  std::mt19937 rng(62);
  auto backend = make_cpu_backend(2);
  // embedding from a bf16 table
  const TypedArray table = random_array(rng, 10 * 8, DType::kBF16);
  std::vector<int32_t> ids = {3, 9, 0};
  std::vector<float> emb(3 * 8, kNaN);
  backend->embedding(TensorView(ids.data(), DType::kI32, {3}),
                     TensorView(const_cast<void*>(table.data()), DType::kBF16, {10, 8}),
                     TensorView(emb.data(), DType::kF32, {3, 8}));
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 8; ++i) EXPECT_EQ(emb[t * 8 + i], table.values[ids[t] * 8 + i]);
  }
  // A vocabulary slice: the table's 10 rows are ids [20, 30); other ids give zero rows.
  std::vector<int32_t> slice_ids = {29, 3, 20, 30, 25};
  std::vector<float> part(5 * 8, kNaN);
  backend->embedding_slice(TensorView(slice_ids.data(), DType::kI32, {5}),
                           TensorView(const_cast<void*>(table.data()), DType::kBF16, {10, 8}), 20,
                           TensorView(part.data(), DType::kF32, {5, 8}));
  ASSERT_TRUE(backend->take_error().ok());
  for (int t = 0; t < 5; ++t) {
    const int32_t row = slice_ids[static_cast<size_t>(t)] - 20;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(part[static_cast<size_t>(t * 8 + i)],
                row >= 0 && row < 10 ? table.values[static_cast<size_t>(row * 8 + i)] : 0.0f)
          << "token " << t;
    }
  }
  // rmsnorm and the fused add + rmsnorm agree with add_inplace followed by rmsnorm
  auto x = random_floats(rng, 4 * 24), y = random_floats(rng, 4 * 24),
       w = random_floats(rng, 24, 0.5, 1.5);
  auto x2 = x;
  std::vector<float> n1(x.size()), n2(x.size());
  backend->add_inplace(TensorView(x.data(), DType::kF32, {4, 24}),
                       TensorView(y.data(), DType::kF32, {4, 24}));
  backend->rmsnorm(TensorView(x.data(), DType::kF32, {4, 24}),
                   TensorView(w.data(), DType::kF32, {24}), 1e-6f,
                   TensorView(n1.data(), DType::kF32, {4, 24}));
  static_cast<CpuBackend&>(*backend).add_rmsnorm(
      TensorView(x2.data(), DType::kF32, {4, 24}), TensorView(y.data(), DType::kF32, {4, 24}),
      TensorView(w.data(), DType::kF32, {24}), 1e-6f, TensorView(n2.data(), DType::kF32, {4, 24}));
  EXPECT_EQ(x, x2);
  EXPECT_EQ(n1, n2);
  double ss = 0;
  for (int i = 0; i < 24; ++i) ss += double(x[i]) * x[i];
  EXPECT_NEAR(n1[5], w[5] * x[5] / std::sqrt(ss / 24 + 1e-6), 1e-5);
  // silu_mul
  auto gu = random_floats(rng, 2 * 6);
  std::vector<float> act(6);
  backend->silu_mul(TensorView(gu.data(), DType::kF32, {1, 12}),
                    TensorView(act.data(), DType::kF32, {1, 6}));
  EXPECT_NEAR(act[2], gu[2] / (1 + std::exp(-gu[2])) * gu[8], 1e-6);
  // rope with rotary_dim < head_dim leaves the tail alone
  auto q = random_floats(rng, 2 * 1 * 8);
  const auto q0 = q;
  std::vector<float> cos = {0.5f, 1.0f, 0.0f, 1.0f}, sin = {0.5f, 0.0f, 1.0f, 0.0f};
  backend->rope(TensorView(q.data(), DType::kF32, {2, 1, 8}),
                TensorView(cos.data(), DType::kF32, {2, 2}),
                TensorView(sin.data(), DType::kF32, {2, 2}), 4);
  EXPECT_FLOAT_EQ(q[0], q0[0] * 0.5f - q0[2] * 0.5f);
  EXPECT_FLOAT_EQ(q[2], q0[2] * 0.5f + q0[0] * 0.5f);
  EXPECT_FLOAT_EQ(q[8 + 0], -q0[8 + 2]);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(q[i], q0[i]);
  // gather_rows and convert
  std::vector<float> src = random_floats(rng, 5 * 3), gathered(2 * 3);
  std::vector<int32_t> rows = {4, 1};
  backend->gather_rows(TensorView(src.data(), DType::kF32, {5, 3}),
                       TensorView(rows.data(), DType::kI32, {2}),
                       TensorView(gathered.data(), DType::kF32, {2, 3}));
  EXPECT_EQ(gathered[0], src[12]);
  EXPECT_EQ(gathered[5], src[5]);
  std::vector<uint16_t> half(15), bf(15);
  std::vector<float> back(15);
  backend->convert(TensorView(src.data(), DType::kF32, {15}),
                   TensorView(half.data(), DType::kF16, {15}));
  backend->convert(TensorView(half.data(), DType::kF16, {15}),
                   TensorView(bf.data(), DType::kBF16, {15}));
  backend->convert(TensorView(bf.data(), DType::kBF16, {15}),
                   TensorView(back.data(), DType::kF32, {15}));
  for (int i = 0; i < 15; ++i)
    EXPECT_EQ(back[i], bf16_to_f32(f32_to_bf16(f16_to_f32(f32_to_f16(src[i])))));
}

TEST(CpuBackend, MalformedViewsAreRefusedWithoutWriting) {
  auto backend = make_cpu_backend(1);
  std::vector<float> x(12, 1.0f), out(12, kNaN), w(5, 1.0f);
  backend->rmsnorm(TensorView(x.data(), DType::kF32, {3, 4}),
                   TensorView(w.data(), DType::kF32, {5}), 1e-6f,
                   TensorView(out.data(), DType::kF32, {3, 4}));
  backend->linear(TensorView(x.data(), DType::kF32, {3, 4}),
                  LinearWeight{TensorView(w.data(), DType::kF32, {1, 5}), {}},
                  TensorView(out.data(), DType::kF32, {3, 1}));
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  std::vector<int32_t> bad_ids = {0, 99};
  std::vector<float> emb(2 * 4, kNaN);
  backend->embedding(TensorView(bad_ids.data(), DType::kI32, {2}),
                     TensorView(x.data(), DType::kF32, {3, 4}),
                     TensorView(emb.data(), DType::kF32, {2, 4}));
  for (float v : emb) EXPECT_EQ(v, 0.0f);  // refused ids give zeros, never a read out of range
}

TEST(CpuBackend, AttentionDispatchMatchesDenseReference) {
  std::mt19937 rng(63);
  auto backend = make_cpu_backend(2);
  CaseConfig cfg;
  cfg.group = 2;
  cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming};
  SeqSpec a, b;
  a.kv_len = 80;
  a.q_len = 80;
  b.kv_len = 45;
  b.q_len = 1;
  const AttentionCase c(rng, cfg, {a, b});
  const auto got = c.run([&](const AttentionParams& p) { backend->attention(p); });
  EXPECT_TRUE(all_close(got, c.reference(), 2e-5, 2e-5));
}

}  // namespace
}  // namespace ls::kernels::test
