// Tensor parallelism on GPUs (docs/tensor-parallel.md; needs 2 GPUs, skips otherwise): TP = 2
// over NCCL against TP = 1 on the fixture models, dense and lserve, over the schedule of
// tests/model/tensor_parallel_compare.h (chunked prefills, two sequences, decode steps replayed
// as recorded CUDA graphs with the all-reduces inside). bf16 everywhere: the ranks' partial sums
// are rounded to bf16 before NCCL adds them, so the tolerance is model_test.cpp's bf16 one.
// --quantization fp8 with TP = 2 (each rank's slices quantized after slicing) against TP = 1 in
// bf16, within model_test.cpp's FP8 tolerance.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "model/model_stack.h"
#include "../model/tensor_parallel_compare.h"

namespace ls {
namespace {

// model_test.cpp's bf16 logit tolerance (sharp attention in the random fixtures).
constexpr double kLogitTol = 0.15;

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

ModelStackOptions options(const std::string& model, const std::string& policy, int32_t tp) {
  ModelStackOptions o;
  o.model_dir = fixture_dir(model);
  o.device = "cuda";
  o.max_num_seqs = 2;
  o.max_step_tokens = 128;
  o.max_logit_rows = 128;
  o.max_model_len = 512;
  o.kv_cache_bytes = int64_t{64} << 20;
  o.attention.policy = policy;
  o.attention.token_budget = 128;  // 2 of the first sequence's 4 pages: selection matters
  o.attention.sink_tokens = 16;
  o.attention.decode_local_tokens = 64;
  o.attention.prefill_local_tokens = 64;
  o.attention.streaming_ratio = 0.5;
  o.tensor_parallel_size = tp;
  return o;
}

class CudaTensorParallel : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaTensorParallel, TwoRanksEqualOne) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  const auto& [model, policy] = GetParam();
  auto one = build_model_stack(options(model, policy, 1));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = build_model_stack(options(model, policy, 2));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  const TpComparison cmp = compare_tp_runs(**one, **two, 2 * kLogitTol);
  EXPECT_EQ(cmp.decoded, 80);
  EXPECT_LT(cmp.worst_relative, kLogitTol) << model << " " << policy;
  std::printf("%s %s TP=2: worst relative logit error %.4f, %d greedy tokens compared\n",
              model.c_str(), policy.c_str(), cmp.worst_relative, cmp.greedy_checked);
  // The decode steps were replayed from recordings that hold the NCCL all-reduces.
  for (const auto& rank : (*two)->tp_ranks) EXPECT_GT(rank->runner->replayed_steps(), 0);
}

// FP8 weights quantized per output row of each rank's slice: q/k/v and gate/up rows keep their
// one-GPU scales, the row-parallel o_proj / down_proj rows get the scale of the rank's columns,
// and the activations are quantized per token over the rank's columns. So TP = 2 in FP8 is not
// TP = 1 in FP8 bit for bit; both are e4m3 roundings of the same bf16 model, and TP = 2 in FP8
// must stay within model_test.cpp's FP8-vs-bf16 tolerance of TP = 1 in bf16.
constexpr double kFp8LogitTol = 0.8;

TEST(CudaTensorParallelFp8, TwoRanksQuantizeTheirSlices) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  for (const std::string model : {"mistral", "qwen2"}) {
    auto bf16 = build_model_stack(options(model, "dense", 1));
    ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
    ModelStackOptions o1 = options(model, "dense", 1);
    o1.quantization = "fp8";
    ModelStackOptions o2 = options(model, "dense", 2);
    o2.quantization = "fp8";
    auto fp8_one = build_model_stack(o1);
    ASSERT_TRUE(fp8_one.ok()) << fp8_one.status().to_string();
    auto fp8_two = build_model_stack(o2);
    ASSERT_TRUE(fp8_two.ok()) << fp8_two.status().to_string();
    for (const auto& rank : (*fp8_two)->tp_ranks) {
      const LayerWeights& l = rank->model->weights().layers[0];
      EXPECT_TRUE(l.qkv.is_fp8() && l.gate_up.is_fp8() && l.o.is_fp8() && l.down.is_fp8())
          << model;
      EXPECT_FALSE(rank->model->weights().lm_head.is_fp8());
    }
    const TpComparison one = compare_tp_runs(**bf16, **fp8_one, 2 * kFp8LogitTol);
    // A fresh bf16 stack: the schedule fills its cache from the start.
    auto bf16_again = build_model_stack(options(model, "dense", 1));
    ASSERT_TRUE(bf16_again.ok()) << bf16_again.status().to_string();
    const TpComparison two = compare_tp_runs(**bf16_again, **fp8_two, 2 * kFp8LogitTol);
    EXPECT_EQ(two.decoded, 80);
    EXPECT_LT(two.worst_relative, kFp8LogitTol) << model;
    std::printf("%s fp8 vs bf16: TP=1 worst relative logit error %.4f, TP=2 %.4f\n",
                model.c_str(), one.worst_relative, two.worst_relative);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallel,
                         ::testing::Combine(::testing::Values("llama3", "mistral", "qwen2", "qwen3"),
                                            ::testing::Values("dense", "lserve")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ls
