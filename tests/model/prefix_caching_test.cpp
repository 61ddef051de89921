// Prefix caching must not change a bit of the output: through the engine on the CPU backend,
// for every attention policy (dense, streaming heads only, quest's page selection, lserve's mix
// of both), each request's greedy tokens and the logprobs of its top tokens with
// --enable-prefix-caching equal those without, across a miss, partial hits, full hits (the last
// prompt token recomputed), a hit shorter than the streaming window, multi-turn follow-ups (the
// pages the first turn's answer filled are cached while decode attends what prefill would: a
// short chat hits through its answer for every policy, a long one with dense attention), a
// burst that shares pages while a small cache preempts sequences holding shared pages, and an
// abort; also with quantized KV pages. The reference is the same workload with caching off. Afterwards
// no KV is in use (cached pages are free to take) and the cache was actually hit.
// Steps have at most 16 tokens so that the CPU kernels' results per row do not depend on how a
// step is composed (see config()).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine_outcome.h"

namespace ls {
namespace {

using test::concat;
using test::drain;
using test::Outcome;
using test::random_tokens;
using test::request;
using test::submit;


EngineConfig config(const std::string& policy, bool caching, int64_t kv_cache_bytes,
                    bool host_tier = false, const std::string& kv_dtype = "auto",
                    int32_t summary_levels = 1) {
  EngineConfig c;
  c.model_dir = std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models/llama3";
  c.num_threads = 2;
  c.max_num_seqs = 4;
  // At most 16 rows per step: the CPU GEMMs stay in their small-M kernel, whose rows do not
  // depend on the batch, so steps composed differently (a hit skips chunks) still give the same
  // bits. Larger steps switch kernels by row count (docs/layer-segmented-prefill.md), and then
  // any change of schedule, caching or not, moves the last bits.
  c.max_num_batched_tokens = 16;
  c.max_model_len = 640;
  c.attention.policy = policy;
  c.attention.token_budget = policy == "quest" ? 64 : 128;
  c.attention.select_interval = 2;
  c.attention.sink_tokens = 16;
  c.attention.decode_local_tokens = 64;
  c.attention.prefill_local_tokens = 128;
  c.attention.streaming_ratio = 0.5;
  c.kv_cache_bytes = kv_cache_bytes;
  c.enable_prefix_caching = caching;
  c.kv_offload = host_tier;
  c.kv_cache_dtype = kv_dtype;
  // Two levels: coarse groups of 2 pages, so a 321-token context spans several groups.
  c.attention.page_summary_levels = summary_levels;
  if (summary_levels == 2) c.attention.summary_group_pages = 2;
  // Caching alone: shared-prefix attention (on by default, engaged by shared blocks) changes the
  // attention's summation order; shared_prefix_engine_test.cpp compares it with and without.
  c.shared_prefix_attention = false;
  return c;
}

// One request at a time, each after the previous ended: the cache holds what they left.
Outcome sequential(const std::string& policy, bool caching, bool host_tier = false,
                   const std::string& kv_dtype = "auto", int32_t summary_levels = 1) {
  Outcome run;
  auto core_or =
      EngineCore::create(config(policy, caching, 0, host_tier, kv_dtype, summary_levels));
  EXPECT_TRUE(core_or.ok()) << core_or.status().to_string();
  if (!core_or.ok()) return run;
  EngineCore& core = **core_or;
  std::mt19937 rng(5);
  const std::vector<int32_t> doc = random_tokens(rng, 300);
  const std::vector<int32_t> a = concat(doc, random_tokens(rng, 21));
  auto run_one = [&](const GenerateRequest& g) {
    submit(core, g, run);
    drain(core);
  };
  run_one(request("miss", a, 80));  // fills pages while decoding
  run_one(request("partial", concat(doc, random_tokens(rng, 40)), 12));  // the document's pages
  run_one(request("full", a, 12));  // the whole prompt cached but its last token
  run_one(request("aligned", std::vector<int32_t>(doc.begin(), doc.begin() + 256), 8));  // pages
  run_one(request("short", std::vector<int32_t>(doc.begin(), doc.begin() + 70), 8));  // in window
  // Multi-turn: the first answer and a new question follow the first prompt.
  const std::vector<int32_t> turn2 = concat(concat(a, run.tokens["miss"]), random_tokens(rng, 30));
  run_one(request("turn2", turn2, 12));
  // A short chat: its 79 computed tokens stay within every policy's exact decode length (sinks +
  // decode window = 80 tokens for streaming heads, the token budget of 64 or 128 for quest and
  // lserve), so its answer's pages are cached for all of them.
  const std::vector<int32_t> chat = random_tokens(rng, 20);
  run_one(request("chat1", chat, 60));
  run_one(request("chat2", concat(concat(chat, run.tokens["chat1"]), random_tokens(rng, 10)), 8));
  run.stats = core.stats();
  return run;
}

// A shorter context and no decode reserve beyond what admission must keep, so that a small
// cache preempts.
EngineConfig burst_config(const std::string& policy, bool caching, int64_t kv_cache_bytes) {
  EngineConfig c = config(policy, caching, kv_cache_bytes);
  c.max_model_len = 512;
  c.decode_reserve_ratio = 0;
  return c;
}

// Requests sharing a document arrive at once into a cache too small for all of them: pages are
// shared while they run, sequences holding shared pages are preempted and recompute (hitting
// the cache), and one request is aborted midway.
Outcome burst(const std::string& policy, bool caching, int64_t kv_cache_bytes) {
  Outcome run;
  auto core_or = EngineCore::create(burst_config(policy, caching, kv_cache_bytes));
  EXPECT_TRUE(core_or.ok()) << core_or.status().to_string();
  if (!core_or.ok()) return run;
  EngineCore& core = **core_or;
  std::mt19937 rng(11);
  const std::vector<int32_t> doc = random_tokens(rng, 200);
  submit(core, request("first", concat(doc, random_tokens(rng, 10)), 4), run);
  drain(core);
  for (int32_t i = 0; i < 6; ++i) {
    submit(core, request("q" + std::to_string(i), concat(doc, random_tokens(rng, 5 + 13 * i)), 200),
           run);
  }
  for (int32_t step = 0; core.has_work() && step < 20000; ++step) {
    EXPECT_TRUE(core.step().ok());
    if (run.tokens["q2"].size() == 10) core.abort("q2");  // after as many tokens in both runs
  }
  run.stats = core.stats();
  return run;
}

// Greedy tokens equal and logprobs bit for bit, except for the requests in `decode_hits`, whose
// prompts hit pages that decode steps filled: a decode step attends exactly the keys a prefill
// would (that is when such pages are cached), but the CPU attention kernel's tile layout and the
// GEMMs depend on the number of rows in the step (one token vs a chunk), so those K/V may differ
// from a prefill's in the last bits, as a step's rows do with the batch around them, and a bf16
// page can then hold the neighbouring bf16 value. Those requests get the same greedy tokens and
// logprobs within 1e-3 (logprobs of order 1..10; the K/V a decode over a window or a page
// selection writes change the greedy tokens within a few steps).
void expect_same(const Outcome& off, const Outcome& on,
                 const std::set<std::string>& decode_hits = {}) {
  ASSERT_EQ(off.tokens.size(), on.tokens.size());
  for (const auto& [id, tokens] : off.tokens) {
    ASSERT_TRUE(on.tokens.count(id)) << id;
    EXPECT_EQ(on.tokens.at(id), tokens) << id;
    const auto& a = off.logprobs.at(id);
    const auto& b = on.logprobs.at(id);
    ASSERT_EQ(a.size(), b.size()) << id;
    if (decode_hits.count(id) != 0) {
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3) << id << " " << i;
      continue;
    }
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << id;
  }
  EXPECT_EQ(on.stats.kv_bytes_in_use, 0);
  EXPECT_EQ(off.stats.kv_bytes_in_use, 0);
  EXPECT_EQ(on.stats.num_running + on.stats.num_waiting, 0);
}

// The requests of sequential() whose prompts hit pages filled by decode steps.
std::set<std::string> decode_hits(const std::string& policy) {
  if (policy == "dense") return {"turn2", "chat2"};
  return {"chat2"};
}

class PrefixCaching : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCaching, SequentialHitsChangeNothing) {
  const Outcome off = sequential(GetParam(), false);
  const Outcome on = sequential(GetParam(), true);
  expect_same(off, on, decode_hits(GetParam()));
  if (HasFatalFailure()) return;
  EXPECT_EQ(off.cached.at("full"), -1);  // caching off: no prompt_tokens_details
  EXPECT_EQ(on.cached.at("miss"), 0);
  EXPECT_GT(on.cached.at("partial"), 0);
  EXPECT_GT(on.cached.at("full"), on.cached.at("partial"));
  EXPECT_GT(on.cached.at("short"), 0);
  // Multi-turn. Dense attention: the second turn hits through the first answer, every full page
  // of the first turn's computed tokens (its 321 prompt tokens and 79 of its 80 outputs: the
  // last output's K/V was never written). Sparse policies decoded that answer over a window or a
  // page selection (context > 80 tokens), which a prefill does not reproduce: the prompt's pages
  // hit, the answer's are not cached.
  if (GetParam() == "dense") {
    EXPECT_EQ(on.cached.at("turn2"), (321 + 79) / 64 * 64);
  } else {
    EXPECT_EQ(on.cached.at("turn2"), on.cached.at("full"));
  }
  // The short chat (20 prompt tokens, 79 computed) hits its first 64 tokens, into the answer.
  EXPECT_EQ(on.cached.at("chat2"), 64);
  EXPECT_EQ(on.stats.prefix_cache_hits, on.stats.prompt_tokens_cached);  // no preemption here
  int64_t cached = 0;
  for (const auto& [id, n] : on.cached) cached += n;
  EXPECT_EQ(on.stats.prompt_tokens_cached, cached);
  EXPECT_EQ(on.stats.prefix_cache_queries, on.stats.prompt_tokens_total);
  EXPECT_EQ(off.stats.prefix_cache_queries, 0);
}

// In a burst, caching changes how steps are composed (hits skip chunks) and when sequences are
// preempted, and neither is bit-neutral in this engine with caching off either: a step's rows
// can differ in the last bits with the batch around them, and a preempted sequence recomputes
// its generated tokens by prefill (decode-mode attention — windows, page selection — is not what
// prefill computes). So the burst checks: requests preempted in neither run give the same greedy
// tokens and logprobs to rounding; dense attention gives the same greedy tokens for all; the
// cache was hit and sequences holding shared pages were preempted; nothing stays in use. The
// bitwise claims are the sequential test's, where steps are composed alike.
TEST_P(PrefixCaching, BurstWithPreemptionAndAbortAgrees) {
  // The smallest KV budget the engine accepts (one longest sequence), and a little more: the
  // burst's sequences outgrow their decode reserve and preempt one another.
  int64_t bytes = 0;
  for (int64_t b = 256 << 10; b < (16 << 20) && bytes == 0; b += 32 << 10) {
    if (EngineCore::create(burst_config(GetParam(), false, b)).ok()) bytes = b;
  }
  ASSERT_GT(bytes, 0);
  // How far above that budget the burst still preempts depends on the page format and the
  // machine's kernels (pages per block, scratch): shrink the margin until both runs preempt.
  Outcome off, on;
  for (const int64_t margin : {bytes / 3, bytes / 6, bytes / 12, int64_t{0}}) {
    off = burst(GetParam(), false, bytes + margin);
    on = burst(GetParam(), true, bytes + margin);
    if (GetParam() == "streaming" ||
        (off.stats.num_preemptions > 0 && on.stats.num_preemptions > 0)) {
      break;
    }
  }
  ASSERT_EQ(off.tokens.size(), on.tokens.size());
  int32_t compared = 0;
  for (const auto& [id, tokens] : off.tokens) {
    ASSERT_TRUE(on.tokens.count(id)) << id;
    const bool preempted = off.preemptions.at(id) > 0 || on.preemptions.at(id) > 0;
    if (!preempted || GetParam() == "dense") {
      EXPECT_EQ(on.tokens.at(id), tokens) << id;
    }
    if (preempted) continue;
    ++compared;
    const auto& a = off.logprobs.at(id);
    const auto& b = on.logprobs.at(id);
    ASSERT_EQ(a.size(), b.size()) << id;
    // To rounding: a last-bit difference of an f32 K or V value (steps composed differently)
    // can flip its rounding into the page format, one f16 step (2^-11 relative) under the CPU's
    // default f16 pages, which moves a logprob by up to ~3e-4 on this fixture.
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3) << id << " " << i;
  }
  EXPECT_GE(compared, 3);
  if (GetParam() != "streaming") {  // streaming heads alone hold a bounded, pre-sized pool
    EXPECT_GT(on.stats.num_preemptions, 0);
  }
  EXPECT_GT(on.stats.prefix_cache_hits, on.stats.prompt_tokens_cached - 1);
  EXPECT_GT(on.stats.prompt_tokens_cached, 0);
  EXPECT_EQ(on.tokens.at("q2").size(), 10u);  // aborted
  EXPECT_EQ(on.stats.kv_bytes_in_use, 0);
  EXPECT_EQ(on.stats.num_running + on.stats.num_waiting, 0);
}

// With the host KV tier (--kv-offload on) every retrieval page's home is in host memory
// (written through), so a hit's pages are brought back by the tier's residency op like any
// miss: the same bits as caching off with the tier on, in the sequential scenario (a row that
// a new sequence takes starts with an empty cache partition, even when its first step starts
// after a hit).
// (Streaming heads alone keep no tiered pages: the policies with retrieval heads.)
TEST(PrefixCachingHostTier, SequentialHitsChangeNothing) {
  for (const char* name : {"dense", "quest", "lserve"}) {
    const std::string policy = name;
    SCOPED_TRACE(policy);
    const Outcome off = sequential(policy, false, true);
    const Outcome on = sequential(policy, true, true);
    expect_same(off, on, decode_hits(policy));
    if (HasFatalFailure()) return;
    EXPECT_GT(on.cached.at("partial"), 0);
    EXPECT_GT(on.cached.at("full"), on.cached.at("partial"));
    EXPECT_TRUE(on.stats.kv_offload);
    EXPECT_GT(on.stats.kv_offload_misses_total, 0);
  }
}

// Quantized KV pages (their scales inside the page bytes, the format in the key seed): pages
// written by decode steps hit like prefill's and change no bit of the output.
TEST(PrefixCachingKvFormats, DecodePagesHitWithQuantizedPages) {
  for (const char* dtype : {"int8", "int4"}) {
    SCOPED_TRACE(dtype);
    const Outcome off = sequential("dense", false, false, dtype);
    const Outcome on = sequential("dense", true, false, dtype);
    expect_same(off, on, decode_hits("dense"));
    if (HasFatalFailure()) return;
    EXPECT_EQ(on.cached.at("turn2"), (321 + 79) / 64 * 64);
    EXPECT_EQ(on.cached.at("chat2"), 64);
  }
}

// Two-level page summaries (docs/two-level-summaries.md): the coarse level is per request row,
// so a sequence that starts from a hit gets its row rebuilt from the cached pages' stored fine
// summaries (ModelRunner::start_coarse_rows). Page selection then sees the same bounds as with
// caching off: the same bits (decode-page hits to rounding, as above), with and without the
// host tier.
// Requests over one document with an unrelated one between them in the same row, so a hit's
// row last held other keys (stale coarse bounds there would prune the wrong pages).
// tp: tensor-parallel ranks (the CPU's in-process ones): each rank's pool holds the coarse rows
// of its own heads only, while the KvManager's geometry counts every head. (A fold with the
// manager's stride changed "b"'s logprobs only in the last bits here, within the tolerance the
// TP case needs, so this case covers the path, not that stride.)
Outcome interleaved(const std::string& policy, bool caching, bool host_tier, int32_t tp = 1) {
  Outcome run;
  EngineConfig c = config(policy, caching, 0, host_tier, "auto", 2);
  c.tensor_parallel_size = tp;
  auto core_or = EngineCore::create(c);
  EXPECT_TRUE(core_or.ok()) << core_or.status().to_string();
  if (!core_or.ok()) return run;
  EngineCore& core = **core_or;
  std::mt19937 rng(17);
  const std::vector<int32_t> doc = random_tokens(rng, 300);
  auto run_one = [&](const GenerateRequest& g) {
    submit(core, g, run);
    drain(core);
  };
  run_one(request("a", concat(doc, random_tokens(rng, 21)), 12));
  if (tp > 1) {
    // Both at once, so "b" starts from its hit in row 1 (row 0 is busy): a coarse row past the
    // first is where a wrong per-rank stride would land.
    submit(core, request("unrelated", random_tokens(rng, 330), 12), run);
    submit(core, request("b", concat(doc, random_tokens(rng, 30)), 12), run);
    drain(core);
  } else {
    run_one(request("unrelated", random_tokens(rng, 330), 12));
    run_one(request("b", concat(doc, random_tokens(rng, 30)), 12));
  }
  run_one(request("unrelated2", random_tokens(rng, 330), 12));
  run_one(request("c", concat(doc, random_tokens(rng, 5)), 12));
  run.stats = core.stats();
  return run;
}

TEST(PrefixCachingTwoLevel, HitsChangeNothing) {
  for (const char* name : {"quest", "lserve"}) {
    for (const bool tier : {false, true}) {
      const std::string policy = name;
      SCOPED_TRACE(policy + (tier ? " tier" : ""));
      const Outcome off = interleaved(policy, false, tier);
      const Outcome on = interleaved(policy, true, tier);
      expect_same(off, on);
      if (HasFatalFailure()) return;
      EXPECT_GE(on.cached.at("b"), 256);
      EXPECT_GE(on.cached.at("c"), 256);
    }
    SCOPED_TRACE(std::string(name) + " tp 2");
    const Outcome off = interleaved(name, false, false, 2);
    const Outcome on = interleaved(name, true, false, 2);
    // "b" shares its steps with "unrelated" in different compositions with caching on and off
    // (its hit skips chunks), which moves last bits: tokens equal, logprobs to 1e-3.
    expect_same(off, on, {"b"});
    if (HasFatalFailure()) return;
    EXPECT_GE(on.cached.at("b"), 256);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, PrefixCaching,
                         ::testing::Values("dense", "streaming", "quest", "lserve"));

}  // namespace
}  // namespace ls
