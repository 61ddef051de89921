// Shared-prefix decode attention inside the engine (docs/shared-prefix-attention.md): with
// prefix caching on, requests over one cached document share its blocks, and decode steps
// attend the shared part once per group. Through the engine on the CPU backend, each request's
// greedy tokens and top-5 logprobs with --shared-prefix-attention on equal those with it off
// (the ordinary per-sequence kernel), up to fp32 summation order: the steps are composed the
// same way in both runs (attention does not change scheduling), so only the attention's
// summation order differs. Workloads: several requests over one cached prefix with suffixes of
// different lengths (prefixes ending inside a page), requests finishing at different steps, one
// aborted mid-batch, and a cache small enough that sequences holding shared pages are
// preempted and recompute. The shared path must actually run (counted steps), and for sparse
// policies it must keep per-sequence attention where heads do not read every page.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine_outcome.h"

namespace ls {
namespace {

using test::concat;
using test::Outcome;
using test::random_tokens;
using test::request;


EngineConfig config(const std::string& policy, bool shared, int64_t kv_cache_bytes,
                    bool caching = true, bool host_tier = false) {
  EngineConfig c;
  c.model_dir = std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models/llama3";
  c.num_threads = 2;
  c.max_num_seqs = 6;
  c.max_num_batched_tokens = 16;  // as in prefix_caching_test: one GEMM kernel per row count
  c.max_model_len = 512;
  c.attention.policy = policy;
  c.attention.token_budget = policy == "quest" ? 64 : 128;
  c.attention.select_interval = 2;
  c.attention.sink_tokens = 16;
  c.attention.decode_local_tokens = 64;
  c.attention.prefill_local_tokens = 128;
  c.attention.streaming_ratio = 0.5;
  c.kv_cache_bytes = kv_cache_bytes;
  c.decode_reserve_ratio = 0;
  c.enable_prefix_caching = caching;
  c.kv_offload = host_tier;
  c.shared_prefix_attention = shared;
  // f32 pages: with bf16 pages a last-bit difference of one step's attention output can round a
  // later token's K/V to the neighbouring bf16 value, which then grows over a long generation;
  // f32 pages keep the comparison at the attention's own summation error.
  c.kv_cache_dtype = "f32";
  return c;
}

// A document is prefilled once (cached), then six questions about it arrive together: their
// tables start with the document's blocks. Suffixes of 5 + 13 i tokens put the shared prefix's
// end inside each sequence's own page; max_tokens differ so sequences leave the batch at
// different steps; q2 is aborted after 10 tokens.
Outcome burst(const std::string& policy, bool shared, int64_t kv_cache_bytes,
              int32_t long_tokens = 0, bool caching = true, bool host_tier = false) {
  Outcome run;
  auto core_or = EngineCore::create(config(policy, shared, kv_cache_bytes, caching, host_tier));
  EXPECT_TRUE(core_or.ok()) << core_or.status().to_string();
  if (!core_or.ok()) return run;
  EngineCore& core = **core_or;
  auto submit = [&](const GenerateRequest& g) { test::submit(core, g, run); };
  std::mt19937 rng(23);
  const std::vector<int32_t> doc = random_tokens(rng, 200);
  submit(request("first", concat(doc, random_tokens(rng, 10)), 4));
  for (int32_t guard = 0; core.has_work() && guard < 20000; ++guard) EXPECT_TRUE(core.step().ok());
  for (int32_t i = 0; i < 6; ++i) {
    submit(request("q" + std::to_string(i), concat(doc, random_tokens(rng, 5 + 13 * i)),
                   long_tokens > 0 ? long_tokens : 100 + 20 * i));
  }
  for (int32_t step = 0; core.has_work() && step < 20000; ++step) {
    EXPECT_TRUE(core.step().ok());
    if (run.tokens["q2"].size() == 10) core.abort("q2");
  }
  run.stats = core.stats();
  return run;
}

// Greedy tokens equal, every logprob within fp32 summation error of the attention (tiny model,
// logprobs of order 1..10: 1e-4 leaves a wide margin over summation error and catches any
// wrong key, a missed suffix or a wrong merge weight).
void expect_close(const Outcome& off, const Outcome& on) {
  ASSERT_EQ(off.tokens.size(), on.tokens.size());
  for (const auto& [id, tokens] : off.tokens) {
    ASSERT_TRUE(on.tokens.count(id)) << id;
    EXPECT_EQ(on.tokens.at(id), tokens) << id;
    const auto& a = off.logprobs.at(id);
    const auto& b = on.logprobs.at(id);
    ASSERT_EQ(a.size(), b.size()) << id;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << id << " " << i;
  }
  EXPECT_EQ(on.tokens.at("q2").size(), 10u);  // aborted
  EXPECT_EQ(on.stats.kv_bytes_in_use, 0);
  EXPECT_EQ(on.stats.num_running + on.stats.num_waiting, 0);
  EXPECT_EQ(off.stats.shared_prefix_steps, 0);
}

TEST(SharedPrefixEngine, DenseBurstEqualsPerSequenceAttention) {
  const Outcome off = burst("dense", false, 0);
  const Outcome on = burst("dense", true, 0);
  expect_close(off, on);
  EXPECT_GT(on.stats.prompt_tokens_cached, 0);
  // Most decode steps of the six questions share the document's pages.
  EXPECT_GT(on.stats.shared_prefix_steps, 40);
  // Each such step covers the document's three cached pages (192 tokens, the whole pages of its
  // 200 tokens) once per member of the group, and a group has 2 to 6 members.
  EXPECT_EQ(on.stats.shared_prefix_tokens % 192, 0);
  EXPECT_GE(on.stats.shared_prefix_tokens, 2 * 192 * on.stats.shared_prefix_steps);
  EXPECT_LE(on.stats.shared_prefix_tokens, 6 * 192 * on.stats.shared_prefix_steps);
  EXPECT_EQ(off.stats.shared_prefix_tokens, 0);
  EXPECT_EQ(on.stats.num_preemptions, off.stats.num_preemptions);
}

// A cache too small for the burst: sequences holding shared pages are preempted, recompute
// (hitting the cache again) and rejoin groups; with dense attention a preempted sequence's
// recompute is the same prefill in both runs, so every request still agrees.
TEST(SharedPrefixEngine, DenseBurstWithPreemptionEqualsPerSequenceAttention) {
  int64_t bytes = 0;
  for (int64_t b = 256 << 10; b < (16 << 20) && bytes == 0; b += 32 << 10) {
    if (EngineCore::create(config("dense", false, b)).ok()) bytes = b;
  }
  ASSERT_GT(bytes, 0);
  Outcome off, on;
  for (const int64_t margin : {bytes / 3, bytes / 6, bytes / 12, int64_t{0}}) {
    off = burst("dense", false, bytes + margin, 200);
    on = burst("dense", true, bytes + margin, 200);
    if (off.stats.num_preemptions > 0 && on.stats.num_preemptions > 0) break;
  }
  expect_close(off, on);
  EXPECT_GT(on.stats.num_preemptions, 0);
  EXPECT_GT(on.stats.shared_prefix_steps, 0);
}

// Sparse policies: streaming heads (lserve) read sinks and a ring, retrieval heads with a page
// selection read their own pages; the runner keeps those per sequence (by layer and by step),
// so outputs still agree with the ordinary path.
TEST(SharedPrefixEngine, SparsePoliciesKeepPerSequenceAttentionWhereNeeded) {
  for (const char* name : {"lserve", "quest"}) {
    const std::string policy = name;
    const Outcome off = burst(policy, false, 0);
    const Outcome on = burst(policy, true, 0);
    SCOPED_TRACE(policy);
    expect_close(off, on);
  }
}

// Prefix caching with the host KV tier (--kv-offload on), in a burst: a retrieval page is never
// shared by two live sequences there (the tier's residency table gives a head-page one slot in
// one request row's partition), so the first question takes the document's cached pages back
// (their homes fetched like misses) and the others, arriving while it holds them, recompute;
// later hits after preemption take cached-free pages again. Against caching off with the tier
// on: the same greedy tokens and logprobs within the fp32 bound; shared-prefix attention never
// engages with the tier.
TEST(SharedPrefixEngine, HostTierBurstWithCachingEqualsCachingOff) {
  const Outcome off = burst("dense", true, 0, 0, false, true);
  const Outcome on = burst("dense", true, 0, 0, true, true);
  expect_close(off, on);
  EXPECT_TRUE(on.stats.kv_offload);
  EXPECT_GT(on.stats.prompt_tokens_cached, 0);
  EXPECT_EQ(on.stats.shared_prefix_steps, 0);
}

}  // namespace
}  // namespace ls
