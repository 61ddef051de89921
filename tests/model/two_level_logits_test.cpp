// Two-level page summaries must not change a bit of the model's output: a selecting policy with
// --page-summary-levels 2 (a coarse level per group of pages, the fine level refined only where
// the coarse bound can still reach the chosen pages) gives logits identical (memcmp) to one
// level, step by step, across prompt lengths, mixed steps (prefill chunks + decodes, sequences
// joining, ending, aborting, and a row reused), select intervals, group sizes, and with the fine
// summaries in host memory under the KV tier. The reference is the one-level runner fed the same
// schedule; identical logits at every step mean identical selections (the selected pages are
// what the attention reads).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine_core.h"
#include "model/model_stack.h"

namespace ls {
namespace {

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

constexpr int32_t kMaxModelLen = 640;
constexpr int32_t kMaxSeqs = 3;

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
  int32_t done = 0;
  bool abort_midway = false;
};

// model, policy, select interval, pages per group, tier on (fine summaries on the host)
class TwoLevelLogits : public ::testing::TestWithParam<
                           std::tuple<std::string, std::string, int32_t, int32_t, bool>> {};

TEST_P(TwoLevelLogits, IdenticalToOneLevel) {
  const auto& [model, policy, interval, group_pages, tier] = GetParam();
  ModelStackOptions base = options(model, policy, interval);
  base.kv_offload = tier;
  auto ref_stack = build_model_stack(base);
  ASSERT_TRUE(ref_stack.ok()) << ref_stack.status().to_string();
  ModelStackOptions two = base;
  two.attention.page_summary_levels = 2;
  two.attention.summary_group_pages = group_pages;
  auto two_stack = build_model_stack(two);
  ASSERT_TRUE(two_stack.ok()) << two_stack.status().to_string();
  ModelStack& a = **ref_stack;
  ModelStack& b = **two_stack;
  ASSERT_GT(b.pool->coarse_summary_bytes(), 0);
  EXPECT_EQ(a.pool->coarse_summary_bytes(), 0);
  EXPECT_EQ(b.pool->fine_summaries_on_host(), tier);  // auto: host exactly when the tier is on
  EXPECT_EQ(b.pool->summaries().group_pages, group_pages);
  const int32_t vocab = a.runner->vocab_size();

  std::mt19937 rng(4321u + static_cast<uint32_t>(interval * 7 + group_pages));
  auto random_ids = [&](int32_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
  };
  // Contexts past the budget so selections are made and reused; the third sequence is aborted
  // mid-decode, the fourth reuses a row (its coarse rows start empty again).
  const std::vector<std::pair<int32_t, int32_t>> lengths = {
      {300, 60}, {37, 40}, {513, 70}, {430, 40}};
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
  std::vector<Seq*> running;
  while (next_seq < seqs.size() || !running.empty()) {
    while (next_seq < seqs.size() && static_cast<int32_t>(running.size()) < kMaxSeqs) {
      auto sa = a.kv->add_sequence();
      auto sb = b.kv->add_sequence();
      ASSERT_TRUE(sa.ok() && sb.ok());
      ASSERT_EQ(*sa, *sb);
      seqs[next_seq].slot = *sa;
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
        if (!prefilling || i + 1 == len) {
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
    ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
        << policy << " step " << steps << ": logits differ with two summary levels";
    ++steps;
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
        a.kv->remove_sequence(s.slot);
        b.kv->remove_sequence(s.slot);
        s.slot = -1;
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  EXPECT_GT(steps, 40);
}

std::string name(const ::testing::TestParamInfo<TwoLevelLogits::ParamType>& info) {
  const auto& [model, policy, interval, group_pages, tier] = info.param;
  return model + "_" + policy + "_interval" + std::to_string(interval) + "_G" +
         std::to_string(group_pages) + (tier ? "_tier" : "");
}

INSTANTIATE_TEST_SUITE_P(Selecting, TwoLevelLogits,
                         ::testing::Combine(::testing::Values("llama3", "qwen3"),
                                            ::testing::Values("quest", "lserve"),
                                            ::testing::Values(1, 4), ::testing::Values(1, 3),
                                            ::testing::Values(false)),
                         name);

INSTANTIATE_TEST_SUITE_P(FineOnHost, TwoLevelLogits,
                         ::testing::Combine(::testing::Values("qwen3"),
                                            ::testing::Values("quest", "lserve"),
                                            ::testing::Values(4), ::testing::Values(2),
                                            ::testing::Values(true)),
                         name);

// Bad flags get a clear error, not a running engine.
TEST(TwoLevelFlags, Validated) {
  AttentionConfig c;
  c.page_summary_levels = 3;
  EXPECT_FALSE(c.validate().ok());
  c = AttentionConfig{};
  c.summary_group_pages = 0;
  EXPECT_FALSE(c.validate().ok());
  c = AttentionConfig{};
  c.fine_summary_memory = "disk";
  EXPECT_FALSE(c.validate().ok());
  c = AttentionConfig{};
  c.fine_summary_memory = "host";  // one level reads every fine summary each selection
  EXPECT_FALSE(c.validate().ok());
  c.page_summary_levels = 2;
  EXPECT_TRUE(c.validate().ok());
}

}  // namespace
}  // namespace ls
