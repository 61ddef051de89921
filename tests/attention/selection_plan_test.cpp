// The host half of page selection: when each sequence reselects, reuses its selection, or
// attends causally (SelectingPolicy::plan_step), across the reuse interval and slot reuse.
#include <gtest/gtest.h>

#include "attention/policy_registry.h"
#include "backend/backend.h"

namespace ls {
namespace {

std::unique_ptr<AttentionPolicy> make_policy(const std::string& name, int32_t interval,
                                             Backend& backend) {
  AttentionConfig c;
  c.policy = name;
  c.token_budget = 256;
  c.select_interval = interval;
  PolicyModelInfo m{2, 4, 2, 16};
  auto p = make_attention_policy(c, m);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE((*p)->bind(backend, 4).ok());
  return std::move(*p);
}

TEST(SelectionPlan, ReselectsEveryIntervalAndReusesInBetween) {
  auto backend = make_cpu_backend(1);
  for (int32_t interval : {1, 2, 4}) {
    auto policy = make_policy("lserve", interval, *backend);
    StepAttentionPlan plan;
    // Slot 2 prefills 1000 tokens (beyond the 256-token budget): prefill is causal.
    std::vector<StepSequence> prefill{{2, 1000, 1000, true}};
    policy->plan_step(prefill, plan);
    EXPECT_EQ(plan.selected_rows[0], -1);
    EXPECT_EQ(plan.select_rows[0], -1);
    EXPECT_FALSE(plan.any_select);
    EXPECT_EQ(plan.local_tokens[0], 8192);
    for (int32_t step = 0; step < 12; ++step) {
      std::vector<StepSequence> decode{{2, 1, 1001 + step, false}};
      policy->plan_step(decode, plan);
      EXPECT_EQ(plan.local_tokens[0], 256);
      EXPECT_EQ(plan.selected_rows[0], 2) << "step " << step;
      const bool reselect = step % interval == 0;
      EXPECT_EQ(plan.select_rows[0], reselect ? 2 : -1) << "interval " << interval << " step " << step;
      EXPECT_EQ(plan.any_select, reselect);
    }
  }
}

TEST(SelectionPlan, ShortContextsUseEveryPageAndSlotsStartFresh) {
  auto backend = make_cpu_backend(1);
  auto policy = make_policy("quest", 4, *backend);
  StepAttentionPlan plan;
  // Within the budget: no selection (causal), and none is cached.
  std::vector<StepSequence> short_decode{{0, 1, 200, false}, {1, 1, 256, false}};
  policy->plan_step(short_decode, plan);
  EXPECT_EQ(plan.selected_rows, (std::vector<int32_t>{-1, -1}));
  EXPECT_FALSE(plan.any_select);
  // Crossing the budget selects at once, whatever happened before.
  std::vector<StepSequence> crossing{{0, 1, 257, false}};
  policy->plan_step(crossing, plan);
  EXPECT_EQ(plan.select_rows[0], 0);
  std::vector<StepSequence> reuse{{0, 1, 258, false}};
  policy->plan_step(reuse, plan);
  EXPECT_EQ(plan.select_rows[0], -1);
  EXPECT_EQ(plan.selected_rows[0], 0);
  // A new sequence prefilling in slot 0 drops the old selection; its first long decode selects.
  std::vector<StepSequence> new_prefill{{0, 300, 300, true}};
  policy->plan_step(new_prefill, plan);
  EXPECT_EQ(plan.selected_rows[0], -1);
  std::vector<StepSequence> first_decode{{0, 1, 301, false}};
  policy->plan_step(first_decode, plan);
  EXPECT_EQ(plan.select_rows[0], 0);
}

TEST(SelectionPlan, DenseAndStreamingNeverSelect) {
  auto backend = make_cpu_backend(1);
  for (const char* name : {"dense", "streaming"}) {
    auto policy = make_policy(name, 1, *backend);
    StepAttentionPlan plan;
    std::vector<StepSequence> decode{{1, 1, 5000, false}};
    policy->plan_step(decode, plan);
    EXPECT_EQ(plan.selected_rows[0], -1) << name;
    EXPECT_FALSE(plan.any_select) << name;
  }
}

}  // namespace
}  // namespace ls
