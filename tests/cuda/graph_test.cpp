// CUDA graphs on the CUDA backend: a captured decode attention replays to the bit-identical
// output of an eager run (with ticketed splits: to the reference), and reads the device data as it
// is at replay (new queries uploaded in place between replays), so the kernels take every length
// from device memory; a captured chain of dense ops (cuBLASLt GEMM, norm) replays the same way; ops
// that cannot be captured make end_capture fail cleanly and leave the backend usable.

#include <gtest/gtest.h>

#include <random>

#include "attention_scenario.h"
#include "cuda_test_util.h"

namespace ls::cuda_test {
namespace {

using kernels::HeadMode;

// Ticketed decode splits (attention.h): the captured prologue (it lets the decode kernel start
// before its own wait) and the ticket draws replay against the reference with new data each time;
// not compared bit for bit, since which split reads which block depends on timing.
TEST(CudaGraphs, CapturedTicketedDecodeAttentionMatchesTheReference) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(43);
  ScenarioConfig cfg;
  cfg.head_dim = 128;
  cfg.group = 4;
  cfg.page_tokens = 16;
  cfg.modes = {HeadMode::kSelected, HeadMode::kStreaming, HeadMode::kCausal};
  cfg.sink_tokens = 16;
  std::vector<SeqSpec> seqs;
  for (int32_t i = 0; i < 24; ++i) {  // 72 (sequence, kv head) rows of 1 to 47 key blocks
    SeqSpec q{.kv_len = 1 + 127 * i, .q_len = 1, .local_tokens = 200};
    if (i % 2 == 1) {
      q.selected_row = i;
      q.selected = {{0, 3, 7, 20, 50, 90}};
    }
    seqs.push_back(q);
  }
  AttentionScenario sc(rng, cfg, seqs);
  const int64_t n = sc.out_numel();
  DeviceArray out(dtype_nbytes(cfg.dtype, n));
  const kernels::AttentionParams p = sc.device_params(out.data());
  kernels::cuda::AttentionOptions o;
  o.decode_ticketed_splits = 1;
  ScopedAttentionOptions scoped(o);
  gpu()->attention(p);  // eager: sizes the scratch
  ASSERT_TRUE(gpu()->begin_capture().ok());
  gpu()->attention(p);
  auto graph = gpu()->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (int round = 0; round < 4; ++round) {
    if (round > 0) sc.refresh_queries(rng);
    out.poison(cfg.dtype, n);
    ASSERT_TRUE(gpu()->replay(*graph).ok());
    std::vector<float> f(static_cast<size_t>(n));
    convert_to_f32(cfg.dtype, out.download().data(), f.data(), n);
    EXPECT_TRUE(close_to(f, sc.reference(), 1e-2, 2e-2)) << "round " << round;
  }
  EXPECT_TRUE(gpu()->take_error().ok());
  gpu()->drop_graphs();
}

TEST(CudaGraphs, CapturedDecodeAttentionReplaysWithNewData) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(41);
  ScenarioConfig cfg;
  cfg.head_dim = 128;
  cfg.group = 4;
  cfg.page_tokens = 64;
  cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
  cfg.sink_tokens = 64;
  std::vector<SeqSpec> seqs = {{.kv_len = 3000, .q_len = 1, .local_tokens = 256},
                               {.kv_len = 65, .q_len = 1, .local_tokens = 256},
                               {.kv_len = 1200,
                                .q_len = 1,
                                .local_tokens = 256,
                                .selected_row = 0,
                                .selected = {{}, {}, {0, 4, 9}}}};
  AttentionScenario sc(rng, cfg, seqs);
  const int64_t n = sc.out_numel();
  DeviceArray out(dtype_nbytes(cfg.dtype, n));
  const kernels::AttentionParams p = sc.device_params(out.data());
  gpu()->attention(p);  // eager: sizes the scratch
  const std::vector<uint8_t> eager = out.download();

  ASSERT_TRUE(gpu()->begin_capture().ok());
  gpu()->attention(p);
  auto graph = gpu()->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (int round = 0; round < 3; ++round) {
    if (round > 0) sc.refresh_queries(rng);
    out.poison(cfg.dtype, n);
    ASSERT_TRUE(gpu()->replay(*graph).ok());
    const std::vector<uint8_t> replayed = out.download();
    out.poison(cfg.dtype, n);
    gpu()->attention(p);
    EXPECT_EQ(replayed, out.download()) << "round " << round;
    std::vector<float> f(static_cast<size_t>(n));
    convert_to_f32(cfg.dtype, replayed.data(), f.data(), n);
    EXPECT_TRUE(close_to(f, sc.reference(), 1e-2, 2e-2)) << "round " << round;
  }
  EXPECT_NE(eager.size(), 0u);
  EXPECT_TRUE(gpu()->take_error().ok());
  gpu()->drop_graphs();
}

TEST(CudaGraphs, CapturedDenseChainReplays) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(42);
  const int64_t m = 4, k = 512, nout = 768;
  HostArray x = random_array(rng, m * k, DType::kBF16),
            w = random_array(rng, nout * k, DType::kBF16, -0.1f, 0.1f);
  std::vector<float> nw(static_cast<size_t>(nout), 1.0f);
  DeviceArray dx = DeviceArray::of(x), dw = DeviceArray::of(w), dn = DeviceArray::of(nw);
  DeviceArray y(dtype_nbytes(DType::kBF16, m * nout));
  LinearWeight lw;
  lw.w = TensorView(dw.data(), DType::kBF16, {nout, k}, Device::kCuda);
  const TensorView xv(dx.data(), DType::kBF16, {m, k}, Device::kCuda);
  const TensorView yv(y.data(), DType::kBF16, {m, nout}, Device::kCuda);
  const TensorView nv(dn.data(), DType::kF32, {nout}, Device::kCuda);
  auto run = [&]() {
    gpu()->linear(xv, lw, yv);
    gpu()->rmsnorm(yv, nv, 1e-5f, yv);
  };
  run();
  const std::vector<uint8_t> eager = y.download();
  ASSERT_TRUE(gpu()->begin_capture().ok());
  run();
  auto graph = gpu()->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  y.poison(DType::kBF16, m * nout);
  ASSERT_TRUE(gpu()->replay(*graph).ok());
  EXPECT_EQ(y.download(), eager);
  gpu()->drop_graphs();
}

TEST(CudaGraphs, UncapturableOpsFailTheCaptureCleanly) {
  LS_REQUIRE_CUDA();
  std::vector<float> host(64, 1.0f);
  DeviceArray d(256);
  ASSERT_TRUE(gpu()->begin_capture().ok());
  gpu()->copy_bytes(d.data(), host.data(), 256);  // pageable source: not capturable
  auto graph = gpu()->end_capture();
  EXPECT_FALSE(graph.ok());
  (void)gpu()->take_error();
  // The backend still works.
  gpu()->copy_bytes(d.data(), host.data(), 256);
  EXPECT_EQ(d.download_as<float>(), host);
  EXPECT_TRUE(gpu()->take_error().ok());
}

}  // namespace
}  // namespace ls::cuda_test
