// Tensor parallelism on GPUs (docs/tensor-parallel.md; needs 2 GPUs, skips otherwise): TP = 2
// over NCCL against TP = 1 on the fixture models, dense and lserve, over the schedule of
// tests/model/tensor_parallel_compare.h (chunked prefills, two sequences, decode steps replayed
// as recorded CUDA graphs with the all-reduces inside). bf16 everywhere: the ranks' partial sums
// are rounded to bf16 before NCCL adds them, so the tolerance is model_test.cpp's bf16 one.

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

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallel,
                         ::testing::Combine(::testing::Values("llama3", "mistral", "qwen2", "qwen3"),
                                            ::testing::Values("dense", "lserve")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ls
