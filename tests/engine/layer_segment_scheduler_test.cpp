// The scheduler and engine loop with layer-segmented prefill, on a fake model: which prompts take
// it (the threshold), one at a time in FCFS order, shares sized by the budget the running tokens
// leave (at least one unit) while every running sequence still decodes each step, the whole
// prompt's blocks reserved at admission, preemption (it starts over), abort mid-prefill (every
// block back) and a failing share (only its request fails). Outputs must equal each request run
// alone: the fake model's next token hashes the whole history, and it checks that shares continue
// each other exactly.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace ls {
namespace {

constexpr int32_t kVocab = 97;
constexpr int32_t kEos = 0;
constexpr int32_t kLayers = 3;

int32_t next_token(const std::vector<int32_t>& hist) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : hist) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return 1 + static_cast<int32_t>(h % (kVocab - 1));  // never eos
}

struct Share {
  int32_t step = 0;
  int32_t slot = 0;
  int32_t num_tokens = 0;
  int32_t unit_begin = 0, unit_end = 0;
  int32_t unit_tokens = 0;  // tokens summed over the share's units
};

class FakeSegmentModel final : public StepExecutor {
 public:
  Status forward(const StepInput& step, std::vector<float>& logits) override {
    logits.assign(step.logit_rows.size() * kVocab, 0.0f);
    size_t offset = 0, row = 0;
    for (const StepSequence& s : step.seqs) {
      auto& hist = history[s.slot];
      if (s.kv_len - s.q_len == 0) hist.clear();
      if (static_cast<int32_t>(hist.size()) != s.kv_len - s.q_len) {
        return internal_error("slot {} continues at {} but holds {}", s.slot, s.kv_len - s.q_len,
                              hist.size());
      }
      if (!s.prefilling) step_decodes[engine_step].insert(s.slot);
      for (int32_t i = 0; i < s.q_len; ++i) {
        hist.push_back(step.tokens[offset + static_cast<size_t>(i)]);
        if (row < step.logit_rows.size() &&
            step.logit_rows[row] == static_cast<int32_t>(offset) + i) {
          logits[row * kVocab + static_cast<size_t>(next_token(hist))] = 10.0f;
          ++row;
        }
      }
      offset += static_cast<size_t>(s.q_len);
    }
    return {};
  }

  Status forward_layer_segments(const LayerSegmentInput& in, std::vector<float>& logits) override {
    logits.clear();
    const int32_t units = in.num_segments() * kLayers;
    if (in.unit_begin == 0) {
      progress[in.slot] = 0;
      pending[in.slot] = in.tokens;
    }
    if (progress[in.slot] != in.unit_begin || in.unit_end > units || in.unit_end <= in.unit_begin) {
      return internal_error("share [{}, {}) of slot {} does not continue unit {}", in.unit_begin,
                            in.unit_end, in.slot, progress[in.slot]);
    }
    if (in.unit_begin == 0 && static_cast<int32_t>(in.tokens.size()) != in.num_tokens) {
      return internal_error("the first share has no tokens");
    }
    Share s{engine_step, in.slot, in.num_tokens,
            in.unit_begin, in.unit_end, 0};
    for (int32_t u = in.unit_begin; u < in.unit_end; ++u) {
      const int32_t begin = (u % in.num_segments()) * in.segment_tokens;
      s.unit_tokens += std::min(in.segment_tokens, in.num_tokens - begin);
    }
    shares.push_back(s);
    if (fail_share >= 0 && static_cast<int32_t>(shares.size()) - 1 == fail_share) {
      progress.erase(in.slot);
      return internal_error("injected failure");
    }
    progress[in.slot] = in.unit_end;
    if (in.unit_end == units) {
      history[in.slot] = pending[in.slot];
      logits.assign(kVocab, 0.0f);
      logits[static_cast<size_t>(next_token(history[in.slot]))] = 10.0f;
    }
    return {};
  }

  int32_t vocab_size() const override { return kVocab; }
  int32_t num_layers() const override { return kLayers; }
  int32_t max_layer_segment_tokens() const override { return 4096; }

  std::map<int32_t, std::vector<int32_t>> history, pending;
  std::map<int32_t, int32_t> progress;
  int32_t engine_step = 0;                          // set by the harness before each step
  std::map<int32_t, std::set<int32_t>> step_decodes;  // step -> slots that decoded a token
  std::vector<Share> shares;
  int32_t fail_share = -1;  // the share (0-based) that fails, or -1
};

struct Harness {
  Harness(int32_t max_seqs, int32_t budget, int32_t kv_blocks, int32_t min_tokens,
          int32_t segment) {
    EngineConfig c;
    c.model_dir = "fake";
    c.max_num_seqs = max_seqs;
    c.max_num_batched_tokens = budget;
    c.prefill_mode = "layer-segmented";
    c.layer_segmented_min_tokens = min_tokens;
    c.prefill_segment_tokens = segment;
    // The fake model keeps each slot's tokens and checks that a sequence continues where its
    // slot left off; it does not model blocks shared through the prefix cache (a re-admitted
    // sequence would start from its own cached pages), so caching is off here
    // (tests/model/prefix_caching_test.cpp covers preemption with caching on).
    c.enable_prefix_caching = false;
    KvGeometry g;
    g.num_layers = 1;
    g.num_kv_heads = 1;
    g.head_dim = 4;
    g.page_tokens = 4;
    g.logical_page_tokens = 4;
    g.roles = HeadRoles(1, 1, {false});
    g.max_chunk_tokens = budget;
    auto model_ptr = std::make_unique<FakeSegmentModel>();
    model = model_ptr.get();
    StopParams stop;
    stop.eos_token_ids = {kEos};
    SamplingParams sampling;
    sampling.temperature = 0;
    core = std::make_unique<EngineCore>(c, std::move(model_ptr),
                                        std::make_unique<KvManager>(g, kv_blocks, 0, max_seqs),
                                        nullptr, 4096, stop, sampling);
  }

  static std::vector<int32_t> prompt(int32_t len, int32_t seed) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < len; ++i) p.push_back(1 + (seed * 7 + i * 13) % (kVocab - 1));
    return p;
  }
  void submit(const std::string& id, int32_t prompt_len, int32_t max_tokens, int32_t seed) {
    GenerateRequest r;
    r.request_id = id;
    r.prompt_ids = prompt(prompt_len, seed);
    r.sampling.temperature = 0;
    r.stop.max_tokens = max_tokens;
    r.stop.eos_token_ids = {kEos};
    ASSERT_TRUE(core->add_request(r,
                                  [this, id](const RequestOutput& out) {
                                    for (int32_t t : out.token_ids) tokens[id].push_back(t);
                                    if (out.finished) finished[id] = out;
                                  })
                    .ok());
  }
  Status step() {
    ++model->engine_step;
    return core->step();
  }
  void run(bool steps_ok = true) {
    int guard = 0;
    while (core->has_work() && guard++ < 10000) {
      Status st = step();
      if (steps_ok) {
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
    }
  }
  static std::vector<int32_t> expected(int32_t prompt_len, int32_t max_tokens, int32_t seed) {
    std::vector<int32_t> hist = prompt(prompt_len, seed), out;
    for (int32_t i = 0; i < max_tokens; ++i) {
      out.push_back(next_token(hist));
      hist.push_back(out.back());
    }
    return out;
  }

  FakeSegmentModel* model = nullptr;
  std::unique_ptr<EngineCore> core;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, RequestOutput> finished;
};

TEST(LayerSegmentScheduler, LongPromptsGoLayerByLayerWhileOthersDecode) {
  Harness h(4, 8, 256, /*min_tokens=*/16, /*segment=*/8);
  h.submit("a", 3, 40, 1);  // short: chunked, then decodes throughout
  ASSERT_TRUE(h.step().ok());
  h.submit("b", 41, 5, 2);  // long: 6 segments x 3 layers
  h.submit("c", 16, 4, 3);  // long (at the threshold): waits for b's arena
  h.submit("d", 5, 4, 4);   // short, behind c (FCFS)
  h.run();
  EXPECT_EQ(h.tokens["a"], Harness::expected(3, 40, 1));
  EXPECT_EQ(h.tokens["b"], Harness::expected(41, 5, 2));
  EXPECT_EQ(h.tokens["c"], Harness::expected(16, 4, 3));
  EXPECT_EQ(h.tokens["d"], Harness::expected(5, 4, 4));
  EXPECT_EQ(h.core->kv().bytes_in_use(), 0);

  const auto& shares = h.model->shares;
  ASSERT_FALSE(shares.empty());
  std::set<int32_t> share_steps;
  for (const Share& s : shares) {
    EXPECT_TRUE(s.num_tokens == 41 || s.num_tokens == 16) << "only prompts >= 16 take it";
    EXPECT_TRUE(share_steps.insert(s.step).second) << "one share per step";
    // a (row 0) decodes in every step of b's and c's prefill: decodes keep their pace.
    const auto& decoded = h.model->step_decodes[s.step];
    EXPECT_EQ(decoded.count(0), 1u) << "step " << s.step;
    // The budget left after the step's decode token, in token-layers; one unit at least.
    const int32_t allowance = (8 - static_cast<int32_t>(decoded.size())) * kLayers;
    EXPECT_TRUE(s.unit_tokens <= allowance || s.unit_end - s.unit_begin == 1)
        << s.unit_tokens << " token-layers in step " << s.step;
  }
  // b's prefill ends before c's starts (one arena), each in order.
  int32_t last_b = -1, first_c = 1 << 30;
  for (const Share& s : shares) {
    if (s.num_tokens == 41) last_b = std::max(last_b, s.step);
    if (s.num_tokens == 16) first_c = std::min(first_c, s.step);
  }
  EXPECT_LT(last_b, first_c);
  EXPECT_EQ(shares.front().unit_begin, 0);
}

TEST(LayerSegmentScheduler, PreemptedMidPrefillItStartsOver) {
  // 13 blocks of 4 tokens. Admission reserves a's 9 tokens plus one page of decode (4 blocks)
  // and b's 30-token prompt plus its 3 output tokens (9 blocks, reserved at once), so b is
  // admitted; a then grows past its reserve to 38 tokens (10 blocks) while b prefills slowly, and
  // a's growth preempts b, the latest arrival.
  Harness h(3, 4, 13, /*min_tokens=*/20, /*segment=*/4);
  h.submit("a", 8, 30, 1);
  ASSERT_TRUE(h.step().ok());
  h.submit("b", 30, 3, 2);
  h.run();
  EXPECT_GT(h.core->stats().num_preemptions, 0);
  EXPECT_EQ(h.tokens["a"], Harness::expected(8, 30, 1));
  EXPECT_EQ(h.tokens["b"], Harness::expected(30, 3, 2));
  EXPECT_EQ(h.core->kv().bytes_in_use(), 0);
  int32_t restarts = 0;
  for (const Share& s : h.model->shares) restarts += s.unit_begin == 0;
  EXPECT_EQ(restarts, 2) << "b's prefill starts once, and over once after the preemption";
}

TEST(LayerSegmentScheduler, AbortMidPrefillReturnsEveryBlock) {
  Harness h(2, 8, 64, /*min_tokens=*/16, /*segment=*/8);
  h.submit("b", 60, 5, 2);  // 8 segments x 3 layers: several steps
  ASSERT_TRUE(h.step().ok());
  ASSERT_TRUE(h.step().ok());
  EXPECT_EQ(h.model->shares.size(), 2u);
  EXPECT_GT(h.core->kv().bytes_in_use(), 0);
  h.core->abort("b");
  EXPECT_EQ(h.finished["b"].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(h.tokens["b"].empty());
  EXPECT_EQ(h.core->kv().bytes_in_use(), 0);
  EXPECT_FALSE(h.core->has_work());
  // The arena is free again: the next long prompt starts from unit 0 and finishes right.
  h.submit("c", 33, 4, 3);
  h.run();
  EXPECT_EQ(h.tokens["c"], Harness::expected(33, 4, 3));
  EXPECT_EQ(h.model->shares[2].unit_begin, 0);
  EXPECT_EQ(h.core->kv().bytes_in_use(), 0);
}

TEST(LayerSegmentScheduler, AFailedShareFailsOnlyItsRequest) {
  Harness h(3, 8, 256, /*min_tokens=*/16, /*segment=*/8);
  h.submit("a", 3, 20, 1);
  ASSERT_TRUE(h.step().ok());
  h.model->fail_share = 1;
  h.submit("b", 40, 5, 2);
  h.run(/*steps_ok=*/false);
  EXPECT_EQ(h.finished["b"].finish_reason, FinishReason::kError);
  EXPECT_NE(h.finished["b"].error.find("injected"), std::string::npos);
  EXPECT_EQ(h.tokens["a"], Harness::expected(3, 20, 1));
  EXPECT_EQ(h.finished["a"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.core->kv().bytes_in_use(), 0);
}

TEST(LayerSegmentScheduler, FlagsAndModes) {
  EngineConfig c;
  c.model_dir = "fake";
  c.prefill_mode = "sideways";
  EXPECT_FALSE(c.validate().ok());
  c.prefill_mode = "layer-segmented";
  c.prefill_segment_tokens = c.max_num_batched_tokens + 1;
  EXPECT_FALSE(c.validate().ok());
  c.prefill_segment_tokens = 0;
  c.layer_segmented_min_tokens = 0;
  EXPECT_FALSE(c.validate().ok());
  c.layer_segmented_min_tokens = 1;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_TRUE(c.layer_segmented_prefill());
  c.prefill_mode = "auto";
  EXPECT_FALSE(c.layer_segmented_prefill());
  c.kv_offload = true;
  EXPECT_TRUE(c.layer_segmented_prefill());
}

}  // namespace
}  // namespace ls
