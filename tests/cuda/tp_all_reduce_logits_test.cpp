// Tensor parallelism with the one-shot peer-to-peer all-reduce (docs/p2p-all-reduce.md; needs 2
// GPUs with peer access, skips otherwise): TP = 2 with --tp-all-reduce p2p against TP = 1, and
// against TP = 2 over NCCL, on the llama3 fixture, dense and lserve, over the schedule of
// tests/model/tensor_parallel_compare.h (chunked prefills, decode steps replayed from recordings
// that hold the kernel). Within model_test.cpp's bf16 tolerance; every all-reduce of the run
// went through the kernel (the fixture's messages are far below 2 MB).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/p2p_communicator.h"
#include "model/model_stack.h"
#include "../model/tensor_parallel_compare.h"
#include "tp_stack_options.h"

namespace ls {
namespace {

constexpr double kLogitTol = 0.15;  // model_test.cpp's bf16 logit tolerance

ModelStackOptions options(const std::string& policy, int32_t tp, const std::string& all_reduce) {
  ModelStackOptions o = cuda_tp_stack_options(model_fixture_dir("llama3"), policy, tp);
  o.tp_all_reduce = all_reduce;
  return o;
}

// (policy, reference: "tp1" or "nccl")
class P2pTensorParallel : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(P2pTensorParallel, LogitsEqualTheReference) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  if (Status s = check_peer_access({0, 1}); !s.ok()) GTEST_SKIP() << s.message();
  const auto& [policy, reference] = GetParam();
  auto ref = reference == "tp1" ? build_model_stack(options(policy, 1, "auto"))
                                : build_model_stack(options(policy, 2, "nccl"));
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto p2p = build_model_stack(options(policy, 2, "p2p"));
  ASSERT_TRUE(p2p.ok()) << p2p.status().to_string();
  const TpComparison cmp = compare_tp_runs(**ref, **p2p, 2 * kLogitTol);
  EXPECT_EQ(cmp.decoded, 80);
  EXPECT_LT(cmp.worst_relative, kLogitTol) << policy << " against " << reference;
  std::printf("llama3 %s TP=2 p2p against %s: worst relative logit error %.4f, %d greedy tokens\n",
              policy.c_str(), reference.c_str(), cmp.worst_relative, cmp.greedy_checked);
  for (const auto& rank : (*p2p)->tp_ranks) EXPECT_GT(rank->runner->replayed_steps(), 0);
  for (const auto& comm : (*p2p)->tp_comms) {
    EXPECT_EQ(comm->name(), "p2p");
    EXPECT_GT(p2p_call_counts(*comm).p2p, 0);
    EXPECT_EQ(p2p_call_counts(*comm).fallback, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Llama3, P2pTensorParallel,
                         ::testing::Combine(::testing::Values("dense", "lserve"),
                                            ::testing::Values("tp1", "nccl")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_vs_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ls
