// The hierarchical KV tier must not change a single bit of the model's output: every policy with
// --kv-offload on gives logits identical (memcmp) to the same policy with every page resident,
// across prompt lengths, mixed steps (prefill chunks + decodes, sequences joining, ending and
// aborting), select intervals, both replacement rules and device caches from generous down to the
// smallest start-up accepts (one layer's pages of a max-model-len request, the pages a prefill step
// needs). The reference is the untiered runner fed the same schedule. The tight caches must miss
// (else the test would not exercise the tier), and after every sequence ends both pools are empty.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine_core.h"
#include "kv/kv_tier_config.h"
#include "model/model_stack.h"

namespace ls {
namespace {

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

constexpr int32_t kMaxModelLen = 640;
constexpr int32_t kMaxSeqs = 3;

enum class CacheSize { kSmallest, kDouble, kEverything };

ModelStackOptions options(const std::string& model, const std::string& policy,
                          int32_t select_interval) {
  ModelStackOptions o;
  o.model_dir = fixture_dir(model);
  o.num_threads = 2;
  o.max_num_seqs = kMaxSeqs;
  o.max_step_tokens = 256;
  o.max_logit_rows = 256;
  o.max_model_len = kMaxModelLen;
  o.attention.policy = policy;
  o.attention.token_budget = policy == "quest" ? 64 : 128;  // a few pages: selection matters
  o.attention.select_interval = select_interval;
  o.attention.sink_tokens = 16;
  o.attention.decode_local_tokens = 64;
  o.attention.prefill_local_tokens = 128;
  o.attention.streaming_ratio = 0.5;
  return o;
}

struct Seq {
  int32_t slot = -1;
  std::vector<int32_t> ids;  // prompt then teacher-forced continuation
  int32_t prompt = 0;
  int32_t done = 0;  // tokens computed
  bool abort_midway = false;
};

class TierLogits
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int32_t, CacheSize, bool>> {
};

TEST_P(TierLogits, IdenticalToEveryPageResident) {
  const auto& [model, policy, interval, cache, plain_lru] = GetParam();
  ModelStackOptions base = options(model, policy, interval);
  auto ref_stack = build_model_stack(base);
  ASSERT_TRUE(ref_stack.ok()) << ref_stack.status().to_string();

  ModelStackOptions tiered = base;
  tiered.kv_offload = true;
  tiered.kv_plain_lru = plain_lru;
  const KvGeometry& g = (*ref_stack)->kv->geometry();
  const int64_t slot_bytes = 2 * g.page_bytes();
  const int64_t layer_need = tier_slots_for_layer(g, kMaxModelLen);
  const int64_t all_pages =
      int64_t{g.roles.num_retrieval()} * ((kMaxModelLen + g.page_tokens - 1) / g.page_tokens);
  const int64_t per_row = cache == CacheSize::kSmallest ? layer_need
                          : cache == CacheSize::kDouble ? 2 * layer_need
                                                        : all_pages;
  tiered.device_kv_cache_bytes = per_row * kMaxSeqs * slot_bytes;
  auto tier_stack = build_model_stack(tiered);
  ASSERT_TRUE(tier_stack.ok()) << tier_stack.status().to_string();
  ModelStack& a = **ref_stack;
  ModelStack& b = **tier_stack;
  if (g.roles.num_retrieval() == 0) {
    EXPECT_FALSE(b.pool->tiered());  // streaming: nothing to offload
  } else {
    ASSERT_TRUE(b.pool->tiered());
    EXPECT_EQ(b.pool->tier().config().slots_per_row, per_row);
  }
  const int32_t vocab = a.runner->vocab_size();

  std::mt19937 rng(1234u + static_cast<uint32_t>(interval) * 7u);
  auto random_ids = [&](int32_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
  };
  // Prompt lengths around page boundaries and budgets; decode lengths push contexts past the
  // token budget so selections are made and reused. The last sequence is aborted mid-decode, the
  // fourth reuses a row.
  const std::vector<std::pair<int32_t, int32_t>> lengths = {{300, 60}, {37, 40}, {513, 70}, {130, 30}};
  std::vector<Seq> seqs;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Seq s;
    s.prompt = lengths[i].first;
    s.ids = random_ids(lengths[i].first + lengths[i].second);
    s.abort_midway = i == 2;
    seqs.push_back(std::move(s));
  }

  size_t next_seq = 0;
  int steps = 0;
  std::vector<float> la, lb;
  auto add = [&](Seq& s) {
    auto sa = a.kv->add_sequence();
    auto sb = b.kv->add_sequence();
    ASSERT_TRUE(sa.ok() && sb.ok());
    ASSERT_EQ(*sa, *sb);
    s.slot = *sa;
  };
  auto remove = [&](Seq& s) {
    a.kv->remove_sequence(s.slot);
    b.kv->remove_sequence(s.slot);
    s.slot = -1;
  };
  std::vector<Seq*> running;
  while (next_seq < seqs.size() || !running.empty()) {
    // Admit while rows are free (the fourth waits for a row).
    while (next_seq < seqs.size() && static_cast<int32_t>(running.size()) < kMaxSeqs) {
      add(seqs[next_seq]);
      running.push_back(&seqs[next_seq]);
      ++next_seq;
    }
    StepInput in;
    int32_t budget = 256;
    for (Seq* s : running) {
      const bool prefilling = s->done < s->prompt;
      int32_t len = 1;
      if (prefilling) {
        len = std::min<int32_t>(s->prompt - s->done, 1 + static_cast<int32_t>(rng() % 160));
      }
      if (len > budget) continue;
      budget -= len;
      ASSERT_TRUE(a.kv->grow(s->slot, s->done + len).ok());
      ASSERT_TRUE(b.kv->grow(s->slot, s->done + len).ok());
      for (int32_t i = 0; i < len; ++i) {
        in.tokens.push_back(s->ids[static_cast<size_t>(s->done + i)]);
        // Every row's logits for prefill chunks (a few), every decode row.
        if (!prefilling || i + 1 == len || i % 17 == 0) {
          in.logit_rows.push_back(static_cast<int32_t>(in.tokens.size()) - 1);
        }
      }
      in.seqs.push_back({s->slot, len, s->done + len, prefilling});
    }
    ASSERT_FALSE(in.seqs.empty());
    ASSERT_TRUE(a.runner->forward(in, la).ok()) << "step " << steps;
    const Status st = b.runner->forward(in, lb);
    ASSERT_TRUE(st.ok()) << "step " << steps << ": " << st.to_string();
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_EQ(la.size(), in.logit_rows.size() * static_cast<size_t>(vocab));
    ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
        << policy << " step " << steps << ": logits differ with the tier on";
    ++steps;
    // Advance, finish prefills, end or abort sequences.
    size_t k = 0;
    for (const StepSequence& ss : in.seqs) {
      while (running[k]->slot != ss.slot) ++k;
      Seq& s = *running[k];
      s.done += ss.q_len;
      if (s.done == s.prompt) {
        a.kv->finish_prefill(s.slot);
        b.kv->finish_prefill(s.slot);
      }
    }
    for (auto it = running.begin(); it != running.end();) {
      Seq& s = **it;
      const bool finished = s.done == static_cast<int32_t>(s.ids.size());
      const bool aborted = s.abort_midway && s.done == s.prompt + 5;
      if (finished || aborted) {
        remove(s);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  EXPECT_GT(steps, 40);
  if (!b.pool->tiered()) return;

  const KvTierCounters c = b.pool->tier().counters(*b.backend);
  EXPECT_GT(c.misses, 0);
  EXPECT_GT(c.hits, 0);
  const KvTierStats stats = b.runner->kv_tier_stats();  // what /metrics reports
  EXPECT_TRUE(stats.enabled);
  EXPECT_EQ(stats.misses, c.misses);
  EXPECT_EQ(stats.hits, c.hits);
  EXPECT_EQ(stats.bytes_retrieved, c.misses * 2 * g.page_bytes());
  EXPECT_EQ(stats.host_bytes, b.pool->host_bytes());
  EXPECT_FALSE(a.runner->kv_tier_stats().enabled);
  if (cache == CacheSize::kSmallest) {
    // A partition of one layer's pages cannot keep two layers: pages must have been re-fetched.
    EXPECT_GT(c.misses, all_pages) << "the tight cache never evicted";
  }
  // Every request ended: once the runner notices, no page is resident and no slot is taken.
  b.runner->release_finished_rows();
  for (int32_t v : b.pool->tier().slot_pages(*b.backend)) ASSERT_EQ(v, -1);
  for (int32_t v : b.pool->tier().page_slots(*b.backend)) ASSERT_EQ(v, -1);
  EXPECT_EQ(b.kv->num_free_retrieval_blocks(), b.kv->num_retrieval_blocks());
}

std::string name(const ::testing::TestParamInfo<TierLogits::ParamType>& info) {
  const auto& [model, policy, interval, cache, plain] = info.param;
  const char* sizes[] = {"smallest", "double", "everything"};
  return model + "_" + policy + "_interval" + std::to_string(interval) + "_" +
         sizes[static_cast<int>(cache)] + (plain ? "_lru" : "_bucketed");
}

INSTANTIATE_TEST_SUITE_P(
    Selecting, TierLogits,
    ::testing::Combine(::testing::Values("llama3", "qwen3"), ::testing::Values("quest", "lserve"),
                       ::testing::Values(1, 4),
                       ::testing::Values(CacheSize::kSmallest, CacheSize::kDouble,
                                         CacheSize::kEverything),
                       ::testing::Values(false)),
    name);

INSTANTIATE_TEST_SUITE_P(PlainLru, TierLogits,
                         ::testing::Combine(::testing::Values("qwen3"),
                                            ::testing::Values("quest", "lserve"),
                                            ::testing::Values(4),
                                            ::testing::Values(CacheSize::kSmallest,
                                                              CacheSize::kDouble),
                                            ::testing::Values(true)),
                         name);

INSTANTIATE_TEST_SUITE_P(DenseAndStreaming, TierLogits,
                         ::testing::Combine(::testing::Values("llama3"),
                                            ::testing::Values("dense", "streaming"),
                                            ::testing::Values(4),
                                            ::testing::Values(CacheSize::kSmallest),
                                            ::testing::Values(false)),
                         name);

}  // namespace
}  // namespace ls

namespace ls {
namespace {

// Through the engine: greedy requests of several lengths (more than --max-num-seqs, so rows are
// reused), one aborted mid-decode, with --kv-offload on at the smallest device cache, produce the
// same tokens as with it off; afterwards no KV is in use and the tier's counters moved.
TEST(TierEngine, SameTokensAsAllResidentWithAbortsAndRowReuse) {
  auto run = [&](bool offload, EngineStats& stats) {
    EngineConfig c;
    c.model_dir = fixture_dir("qwen3");
    c.num_threads = 2;
    c.max_num_seqs = 2;
    c.max_num_batched_tokens = 128;
    c.max_model_len = 512;
    c.attention.policy = "lserve";
    c.attention.token_budget = 128;
    c.attention.select_interval = 2;
    c.kv_offload = offload;
    c.device_kv_cache_bytes = 1;  // below the minimum: start-up must refuse it
    if (offload) {
      auto refused = EngineCore::create(c);
      EXPECT_FALSE(refused.ok());
      if (!refused.ok()) {
        EXPECT_NE(refused.status().message().find("--device-kv-cache-bytes"), std::string::npos);
      }
    }
    c.device_kv_cache_bytes = 0;  // automatic
    c.offload_buffer_ratio = 0;   // = the minimum: one layer of a max-length request
    auto core = EngineCore::create(c);
    EXPECT_TRUE(core.ok()) << core.status().to_string();
    std::map<std::string, std::vector<int32_t>> tokens;
    std::mt19937 rng(5);
    for (int i = 0; i < 5; ++i) {
      GenerateRequest r;
      r.request_id = "r" + std::to_string(i);
      for (int t = 0; t < 60 + 90 * i; ++t) r.prompt_ids.push_back(static_cast<int32_t>(rng() % 300));
      r.sampling.temperature = 0;
      r.stop.max_tokens = 40;
      r.stop.eos_token_ids = {};
      const std::string id = r.request_id;
      EXPECT_TRUE((*core)->add_request(r, [&tokens, id](const RequestOutput& o) {
                          auto& v = tokens[id];
                          v.insert(v.end(), o.token_ids.begin(), o.token_ids.end());
                        }).ok());
    }
    int steps = 0;
    while ((*core)->has_work()) {
      EXPECT_TRUE((*core)->step().ok());
      if (++steps == 30) (*core)->abort("r1");
    }
    stats = (*core)->stats();
    return tokens;
  };
  EngineStats off_stats, on_stats;
  const auto off = run(false, off_stats);
  const auto on = run(true, on_stats);
  EXPECT_EQ(on, off);
  EXPECT_EQ(on.size(), 5u);
  EXPECT_FALSE(off_stats.kv_offload);
  EXPECT_TRUE(on_stats.kv_offload);
  EXPECT_GT(on_stats.kv_offload_misses_total, 0);
  EXPECT_GT(on_stats.kv_offload_hits_total, 0);
  EXPECT_GT(on_stats.kv_host_bytes, 0);
  EXPECT_EQ(on_stats.kv_bytes_in_use, 0);
  EXPECT_EQ(on_stats.num_running + on_stats.num_waiting, 0);
}

}  // namespace
}  // namespace ls
