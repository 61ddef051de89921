// Admission control through the engine on the bundled qwen3 fixture (CPU backend), with the
// host KV tier off (dense) and on (lserve): a burst far above the KV capacity finishes with
// preempted-and-recomputed tokens under 5% of all prefilled tokens and every request's tokens
// identical to running it alone; with the tier on, every step that admits keeps the summed working
// sets within the device page cache and the locality counters move. A request that can never fit
// is refused at once and the engine keeps serving the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace ls {
namespace {

constexpr int32_t kMaxModelLen = 512;

struct Case {
  const char* policy;
  bool offload;
};

EngineConfig config(const Case& k, int64_t kv_blocks, int64_t block_bytes) {
  EngineConfig c;
  c.model_dir = std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models/qwen3";
  c.num_threads = 1;
  c.max_num_seqs = 6;
  c.max_num_batched_tokens = 64;
  c.max_model_len = kMaxModelLen;
  c.attention.policy = k.policy;
  c.attention.page_tokens = 16;
  c.attention.token_budget = 64;
  c.attention.select_interval = 2;
  c.kv_offload = k.offload;
  if (kv_blocks > 0) {
    // Tier on: the homes (host pool) are the retrieval blocks; tier off: the device pool.
    if (k.offload) {
      c.host_kv_cache_bytes = kv_blocks * block_bytes;
      c.offload_buffer_ratio = 1;
    } else {
      c.kv_cache_bytes = kv_blocks * block_bytes;
    }
  }
  return c;
}

std::unique_ptr<EngineCore> make(const EngineConfig& c) {
  auto core = EngineCore::create(c);
  EXPECT_TRUE(core.ok()) << core.status().to_string();
  return core.ok() ? std::move(*core) : nullptr;
}

GenerateRequest request(int32_t id, int32_t prompt_len, int32_t max_tokens) {
  std::mt19937 rng(static_cast<uint32_t>(100 + id));
  GenerateRequest r;
  r.request_id = "r" + std::to_string(id);
  for (int32_t t = 0; t < prompt_len; ++t) r.prompt_ids.push_back(static_cast<int32_t>(rng() % 300));
  r.sampling.temperature = 0;
  r.stop.max_tokens = max_tokens;
  r.stop.eos_token_ids = {};
  return r;
}

using Tokens = std::map<std::string, std::vector<int32_t>>;

Status submit(EngineCore& core, const GenerateRequest& r, Tokens& tokens) {
  const std::string id = r.request_id;
  return core.add_request(r, [&tokens, id](const RequestOutput& o) {
    auto& v = tokens[id];
    v.insert(v.end(), o.token_ids.begin(), o.token_ids.end());
  });
}

int64_t block_bytes(const Case& k) {
  auto core = make(config(k, 0, 0));
  return core ? core->kv().geometry().retrieval_block_bytes() : 1;
}

class AdmissionEngine : public ::testing::TestWithParam<Case> {};

TEST_P(AdmissionEngine, BurstFarAboveCapacityBarelyRecomputesAndMatchesRunningAlone) {
  const Case k = GetParam();
  const int64_t bb = block_bytes(k);
  // 40 blocks of 16 tokens (640 tokens of KV) against ~16 x 190 tokens offered at once.
  const EngineConfig c = config(k, 40, bb);
  std::vector<GenerateRequest> reqs;
  std::mt19937 rng(7);
  for (int32_t i = 0; i < 16; ++i) {
    reqs.push_back(request(i, 60 + static_cast<int32_t>(rng() % 150), 8 + static_cast<int32_t>(rng() % 40)));
  }
  auto core = make(c);
  ASSERT_TRUE(core);
  EXPECT_LE(core->kv().num_retrieval_blocks(), 48);  // the tier sizes homes a little differently
  Tokens together;
  for (const auto& r : reqs) ASSERT_TRUE(submit(*core, r, together).ok());
  int32_t prev_running = 0, admitting = 0, max_running = 0;
  int guard = 0;
  while (core->has_work() && guard++ < 100000) {
    ASSERT_TRUE(core->step().ok());
    const EngineStats s = core->stats();
    max_running = std::max(max_running, s.num_running);
    if (k.offload && s.num_running > prev_running) {
      ++admitting;
      EXPECT_LE(s.kv_working_set_pages, s.kv_cache_pages) << "step " << guard;
    }
    prev_running = s.num_running;
  }
  const EngineStats s = core->stats();
  EXPECT_EQ(s.kv_bytes_in_use, 0);
  EXPECT_GT(max_running, 1);  // the burst is batched, not serialised
  const int64_t prefilled = s.prompt_tokens_total + s.num_recomputed_tokens;
  std::printf("%s: %lld preemptions, %lld of %lld prefilled tokens recomputed, at most %d running, "
              "selection overlap %lld / %lld\n",
              k.policy, static_cast<long long>(s.num_preemptions),
              static_cast<long long>(s.num_recomputed_tokens), static_cast<long long>(prefilled),
              max_running, static_cast<long long>(s.kv_reused_pages_total),
              static_cast<long long>(s.kv_selected_pages_total));
  EXPECT_LT(s.num_recomputed_tokens * 20, prefilled) << s.num_recomputed_tokens << " of " << prefilled;
  if (k.offload) {
    EXPECT_GT(admitting, 1);
    EXPECT_GT(s.kv_cache_pages, 0);
    EXPECT_GT(s.kv_selected_pages_total, 0);
    EXPECT_GT(s.kv_reused_pages_total, 0);
    EXPECT_LE(s.kv_reused_pages_total, s.kv_selected_pages_total);
  }
  ASSERT_EQ(together.size(), reqs.size());
  for (const auto& r : reqs) {
    auto alone_core = make(c);
    ASSERT_TRUE(alone_core);
    Tokens alone;
    ASSERT_TRUE(submit(*alone_core, r, alone).ok());
    while (alone_core->has_work()) ASSERT_TRUE(alone_core->step().ok());
    EXPECT_EQ(together[r.request_id], alone[r.request_id]) << r.request_id;
    EXPECT_EQ(static_cast<int32_t>(together[r.request_id].size()), r.stop.max_tokens);
  }
}

// Start-up sizes every pool (and, with the tier, every device-cache partition) for one
// --max-model-len request, so what can never fit is a request beyond the context: it is refused at
// once with the reason (the server's 400), and the largest request that does fit waits for room
// and runs instead of waiting forever, while the engine keeps serving the others.
TEST_P(AdmissionEngine, NeverFitIsRefusedAndTheLargestFittingRequestStillRuns) {
  const Case k = GetParam();
  const EngineConfig c = config(k, 34, block_bytes(k));  // about one max-length request of KV
  auto core = make(c);
  ASSERT_TRUE(core);
  Tokens tokens;
  ASSERT_TRUE(submit(*core, request(0, 100, 20), tokens).ok());
  const Status refused = submit(*core, request(1, 400, 200), tokens);
  EXPECT_EQ(refused.code(), StatusCode::kOutOfRange);
  EXPECT_NE(refused.message().find("maximum context length"), std::string::npos)
      << refused.message();
  ASSERT_TRUE(submit(*core, request(2, 400, kMaxModelLen - 400), tokens).ok());  // all of it
  ASSERT_TRUE(submit(*core, request(3, 60, 10), tokens).ok());
  int guard = 0;
  while (core->has_work() && guard++ < 10000) ASSERT_TRUE(core->step().ok());
  EXPECT_FALSE(core->has_work());
  EXPECT_EQ(tokens["r0"].size(), 20u);
  EXPECT_EQ(tokens["r2"].size(), static_cast<size_t>(kMaxModelLen - 400));
  EXPECT_EQ(tokens["r3"].size(), 10u);
  EXPECT_EQ(tokens.count("r1"), 0u);
  EXPECT_EQ(core->stats().kv_bytes_in_use, 0);
}

// Elastic device budgets (docs/device-cache-budgets.md) change only what is resident: a mix of
// short and long requests gives exactly the tokens of even budgets, every step succeeds (the
// residency op fails a step whose partition cannot hold its pages), the plans stay within the
// cache and actually move slots.
TEST(DeviceBudgetEngine, ElasticBudgetsGiveTheTokensOfEvenBudgets) {
  const Case k{"lserve", true};
  std::vector<GenerateRequest> reqs;
  std::mt19937 rng(9);
  for (int32_t i = 0; i < 8; ++i) {
    const int32_t prompt = i % 2 == 0 ? 20 + static_cast<int32_t>(rng() % 20)
                                      : 300 + static_cast<int32_t>(rng() % 100);
    reqs.push_back(request(i, prompt, 24 + static_cast<int32_t>(rng() % 16)));
  }
  Tokens by_mode[2];
  for (int mode = 0; mode < 2; ++mode) {
    EngineConfig c = config(k, 0, 0);
    c.device_cache_budget = mode == 0 ? "even" : "elastic";
    c.device_budget_interval = 3;
    auto core = make(c);
    ASSERT_TRUE(core);
    for (const auto& r : reqs) ASSERT_TRUE(submit(*core, r, by_mode[mode]).ok());
    int guard = 0;
    while (core->has_work() && guard++ < 100000) {
      ASSERT_TRUE(core->step().ok()) << c.device_cache_budget << " step " << guard;
      const EngineStats s = core->stats();
      EXPECT_LE(s.kv_budget_min_pages, s.kv_budget_median_pages);
      EXPECT_LE(s.kv_budget_median_pages, s.kv_budget_max_pages);
      EXPECT_LE(s.kv_budget_max_pages, s.kv_cache_pages);
      if (mode == 1) {
        int64_t sum = 0;
        for (int32_t b : core->device_budgets()->budgets()) sum += b;
        EXPECT_LE(sum, s.kv_cache_pages) << "step " << guard;
      }
    }
    const EngineStats s = core->stats();
    EXPECT_EQ(s.kv_budget_elastic, mode == 1);
    if (mode == 1) {
      EXPECT_GT(s.kv_budget_changes_total, 0);
      EXPECT_GT(s.kv_budget_moved_pages_total, 0);
    }
    std::printf("%s budgets: hit ratio %.3f, %lld pages copied, %lld plans\n",
                c.device_cache_budget.c_str(),
                static_cast<double>(s.kv_offload_hits_total) /
                    static_cast<double>(std::max<int64_t>(1, s.kv_offload_hits_total + s.kv_offload_misses_total)),
                static_cast<long long>(s.kv_offload_misses_total),
                static_cast<long long>(s.kv_budget_changes_total));
  }
  ASSERT_EQ(by_mode[0].size(), reqs.size());
  for (const auto& r : reqs) {
    EXPECT_EQ(by_mode[0][r.request_id], by_mode[1][r.request_id]) << r.request_id;
    EXPECT_EQ(static_cast<int32_t>(by_mode[1][r.request_id].size()), r.stop.max_tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, AdmissionEngine,
                         ::testing::Values(Case{"dense", false}, Case{"lserve", true}),
                         [](const auto& info) {
                           return std::string(info.param.policy) + (info.param.offload ? "_tier" : "");
                         });

}  // namespace
}  // namespace ls
