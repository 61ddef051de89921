// The admission-control series of /metrics (docs/working-set-scheduling.md): the per-request
// preemption histogram observed from finished outputs, and the engine-backed preemption,
// recompute, working-set, cache and overlap series copied from EngineStats.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/server_metrics.h"

namespace ls {
namespace {

// The value of `series` (name plus labels) in the rendered text, or -1 when absent.
double sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  const size_t begin = at + 1 + series.size() + 1;
  return std::stod(text.substr(begin, text.find('\n', begin) - begin));
}

TEST(PreemptionMetrics, HistogramAndGaugesFollowTheEngine) {
  auto metrics = std::make_shared<ServerMetrics>("m", 1024);
  const std::string l = R"({model_name="m",engine="0")";
  for (int32_t preemptions : {0, 0, 3}) {
    RequestTimer timer(metrics, 0, 5);
    RequestOutput out;
    out.token_ids = {1};
    out.finished = true;
    out.finish_reason = FinishReason::kLength;
    out.num_preemptions = preemptions;
    timer.on_output(out, 1000);
  }
  EngineStats s;
  s.num_preemptions = 3;
  s.num_recomputed_tokens = 700;
  s.kv_working_set_pages = 1200;
  s.kv_cache_pages = 4096;
  s.kv_selected_pages_total = 400;
  s.kv_reused_pages_total = 300;
  const std::string text = "\n" + metrics->render(s);
  EXPECT_NE(text.find("# TYPE vllm:request_num_preemptions histogram"), std::string::npos);
  EXPECT_EQ(sample(text, "vllm:request_num_preemptions_count" + l + "}"), 3.0);
  EXPECT_EQ(sample(text, "vllm:request_num_preemptions_sum" + l + "}"), 3.0);
  EXPECT_EQ(sample(text, "vllm:request_num_preemptions_bucket" + l + R"(,le="0.0"})"), 2.0);
  EXPECT_EQ(sample(text, "vllm:request_num_preemptions_bucket" + l + R"(,le="2.0"})"), 2.0);
  EXPECT_EQ(sample(text, "vllm:request_num_preemptions_bucket" + l + R"(,le="5.0"})"), 3.0);
  EXPECT_EQ(sample(text, "vllm:num_preemptions_total" + l + "}"), 3.0);
  EXPECT_EQ(sample(text, "longserve:recomputed_tokens_total" + l + "}"), 700.0);
  EXPECT_EQ(sample(text, "longserve:kv_working_set_pages" + l + "}"), 1200.0);
  EXPECT_EQ(sample(text, "longserve:kv_device_cache_pages" + l + "}"), 4096.0);
  EXPECT_EQ(sample(text, "longserve:kv_selection_overlap" + l + "}"), 0.75);
}

// Per-request device budgets (docs/device-cache-budgets.md): gauges of the running requests'
// partitions and counters of the plans, copied from EngineStats.
TEST(PreemptionMetrics, DeviceBudgetSeriesFollowTheEngine) {
  auto metrics = std::make_shared<ServerMetrics>("m", 1024);
  const std::string l = R"({model_name="m",engine="0")";
  EngineStats s;
  s.kv_budget_elastic = true;
  s.kv_budget_min_pages = 70;
  s.kv_budget_median_pages = 96;
  s.kv_budget_max_pages = 300;
  s.kv_budget_changes_total = 12;
  s.kv_budget_moved_pages_total = 4321;
  const std::string text = "\n" + metrics->render(s);
  EXPECT_NE(text.find("# TYPE longserve:kv_device_budget_changes_total counter"), std::string::npos);
  EXPECT_EQ(sample(text, "longserve:kv_device_budget_min_pages" + l + "}"), 70.0);
  EXPECT_EQ(sample(text, "longserve:kv_device_budget_median_pages" + l + "}"), 96.0);
  EXPECT_EQ(sample(text, "longserve:kv_device_budget_max_pages" + l + "}"), 300.0);
  EXPECT_EQ(sample(text, "longserve:kv_device_budget_changes_total" + l + "}"), 12.0);
  EXPECT_EQ(sample(text, "longserve:kv_device_budget_moved_pages_total" + l + "}"), 4321.0);
}

// Shared-prefix attention (docs/shared-prefix-attention.md): steps and the prefix tokens they
// covered, copied from EngineStats as counters.
TEST(PreemptionMetrics, SharedPrefixCountersFollowTheEngine) {
  auto metrics = std::make_shared<ServerMetrics>("m", 1024);
  const std::string l = R"({model_name="m",engine="0")";
  EngineStats s;
  s.shared_prefix_steps = 17;
  s.shared_prefix_tokens = 17 * 3 * 192;
  std::string text = "\n" + metrics->render(s);
  EXPECT_NE(text.find("# TYPE longserve:shared_prefix_steps_total counter"), std::string::npos);
  EXPECT_EQ(sample(text, "longserve:shared_prefix_steps_total" + l + "}"), 17.0);
  EXPECT_EQ(sample(text, "longserve:shared_prefix_tokens_total" + l + "}"), 17.0 * 3 * 192);
  s.shared_prefix_steps = 18;
  text = "\n" + metrics->render(s);
  EXPECT_EQ(sample(text, "longserve:shared_prefix_steps_total" + l + "}"), 18.0);
}

}  // namespace
}  // namespace ls
