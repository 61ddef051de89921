// Layer-segmented prefill must give the logits chunked prefill gives, bit for bit: every policy,
// the host KV tier on and off, prompts that are and are not multiples of the segment, shares of
// random sizes (a step may end mid-layer), a decoding sequence running between the shares, an
// abort mid-prefill and the next prompt reusing the row. The reference is the chunked runner fed
// each prompt alone in chunks at the segment boundaries (a chunk's rows in a GEMM of the same row
// count as the segment's: a GEMM's rounding may depend on its row count, see the doc), then the
// same decode steps; both runners see the same decode batches. With the tier on, a prompt's
// prefill copies each of its retrieval head-pages to the device exactly once (chunked prefill
// re-reads earlier pages for every chunk), and the pools are empty at the end.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kv/kv_tier_config.h"
#include "model/model_stack.h"

namespace ls {
namespace {

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

constexpr int32_t kMaxModelLen = 640;
constexpr int32_t kMaxSeqs = 2;
constexpr int32_t kStepTokens = 160;

ModelStackOptions options(const std::string& model, const std::string& policy) {
  ModelStackOptions o;
  o.model_dir = fixture_dir(model);
  o.num_threads = 2;
  o.max_num_seqs = kMaxSeqs;
  o.max_step_tokens = kStepTokens;
  o.max_logit_rows = kMaxSeqs;
  o.max_model_len = kMaxModelLen;
  o.attention.policy = policy;
  o.attention.token_budget = policy == "quest" ? 64 : 128;
  o.attention.select_interval = 2;
  o.attention.sink_tokens = 16;
  o.attention.decode_local_tokens = 64;
  o.attention.prefill_local_tokens = 128;
  o.attention.streaming_ratio = 0.5;
  return o;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Prompt {
  int32_t len = 0;
  int32_t decodes = 0;       // teacher-forced decode steps after the prefill
  bool abort_midway = false;  // removed after a few shares of its layer-segmented prefill
};

class LayerSegmented
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, bool, int32_t>> {};

TEST_P(LayerSegmented, LogitsIdenticalToChunkedPrefill) {
  const auto& [model, policy, offload, segment] = GetParam();
  ModelStackOptions ref_opts = options(model, policy);
  auto ref_or = build_model_stack(ref_opts);
  ASSERT_TRUE(ref_or.ok()) << ref_or.status().to_string();
  ModelStack& a = **ref_or;
  const KvGeometry& g = a.kv->geometry();

  ModelStackOptions lsp_opts = ref_opts;
  lsp_opts.layer_segmented_prefill = true;
  lsp_opts.kv_offload = offload;
  if (offload) {  // the smallest cache start-up accepts: one layer of a max-length request
    lsp_opts.device_kv_cache_bytes =
        int64_t{tier_slots_for_layer(g, kMaxModelLen)} * kMaxSeqs * 2 * g.page_bytes();
  }
  auto lsp_or = build_model_stack(lsp_opts);
  ASSERT_TRUE(lsp_or.ok()) << lsp_or.status().to_string();
  ModelStack& b = **lsp_or;
  const bool tiered = b.pool->tiered();
  EXPECT_EQ(tiered, offload && g.roles.num_retrieval() > 0);
  ASSERT_EQ(b.runner->max_layer_segment_tokens(), kMaxModelLen);
  const int32_t num_layers = b.runner->num_layers();
  ASSERT_GT(num_layers, 0);
  EXPECT_EQ(a.runner->num_layers(), 0);  // the mode is off in the reference runner
  const int32_t vocab = a.runner->vocab_size();

  std::mt19937 rng(77u + static_cast<uint32_t>(segment));
  auto random_ids = [&](int32_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
  };
  std::vector<float> la, lb;
  auto both_grow = [&](int32_t slot, int32_t len) {
    ASSERT_TRUE(a.kv->grow(slot, len).ok());
    ASSERT_TRUE(b.kv->grow(slot, len).ok());
  };

  // The background sequence: prefilled in chunks in both stacks, then decoding between shares.
  const std::vector<int32_t> bg = random_ids(kMaxModelLen - 8);
  int32_t bg_slot = -1, bg_done = 0;
  {
    auto sa = a.kv->add_sequence();
    auto sb = b.kv->add_sequence();
    ASSERT_TRUE(sa.ok() && sb.ok());
    ASSERT_EQ(*sa, *sb);
    bg_slot = *sa;
    const int32_t prompt = 150;
    for (int32_t begin = 0; begin < prompt; begin += kStepTokens) {
      const int32_t len = std::min(kStepTokens, prompt - begin);
      both_grow(bg_slot, begin + len);
      StepInput in;
      in.tokens.assign(bg.begin() + begin, bg.begin() + begin + len);
      in.seqs.push_back({bg_slot, len, begin + len, true});
      in.logit_rows.push_back(len - 1);
      ASSERT_TRUE(a.runner->forward(in, la).ok());
      ASSERT_TRUE(b.runner->forward(in, lb).ok());
      ASSERT_TRUE(same(la, lb));
    }
    bg_done = prompt;
    a.kv->finish_prefill(bg_slot);
    b.kv->finish_prefill(bg_slot);
  }
  int32_t bg_steps = 0;
  // A copy: clang 14 cannot capture a structured binding in a lambda.
  const auto policy_name = policy;
  auto bg_decode = [&]() {
    if (bg_done >= static_cast<int32_t>(bg.size())) return;
    both_grow(bg_slot, bg_done + 1);
    StepInput in;
    in.tokens.push_back(bg[static_cast<size_t>(bg_done)]);
    in.seqs.push_back({bg_slot, 1, bg_done + 1, false});
    in.logit_rows.push_back(0);
    ASSERT_TRUE(a.runner->forward(in, la).ok());
    ASSERT_TRUE(b.runner->forward(in, lb).ok());
    ASSERT_TRUE(same(la, lb)) << policy_name << ": the decoding neighbour's logits moved at step "
                              << bg_steps;
    ++bg_done;
    ++bg_steps;
  };

  // One segment, several (a multiple and not), one aborted, and a row reused after the abort.
  const std::vector<Prompt> prompts = {{segment * 3, 6, false},
                                       {segment * 2 + 37, 0, true},
                                       {segment * 2 + 37, 12, false},
                                       {segment - 5, 4, false},
                                       {std::min(kMaxModelLen - 60, segment * 4 + 1), 30, false}};
  int32_t checked = 0;
  for (const Prompt& p : prompts) {
    const std::vector<int32_t> ids = random_ids(p.len + p.decodes);
    auto sa = a.kv->add_sequence();
    auto sb = b.kv->add_sequence();
    ASSERT_TRUE(sa.ok() && sb.ok());
    ASSERT_EQ(*sa, *sb);
    const int32_t slot = *sa;

    // Layer-segmented: the whole prompt's blocks first (in steps of the ring's chunk bound, as
    // the scheduler reserves them), then shares of 1..5 units with a decode step between.
    for (int32_t len = 0; len < p.len;) {
      len = std::min(p.len, len + kStepTokens);
      ASSERT_TRUE(b.kv->grow(slot, len).ok());
    }
    LayerSegmentInput in;
    in.slot = slot;
    in.num_tokens = p.len;
    in.segment_tokens = segment;
    const int32_t units = in.num_segments() * num_layers;
    std::vector<float> prompt_logits;
    int64_t prefill_misses = 0;  // the prompt's own (the neighbour decodes between shares)
    int32_t shares = 0;
    bool aborted = false;
    for (int32_t u = 0; u < units;) {
      in.unit_begin = u;
      in.unit_end = std::min(units, u + 1 + static_cast<int32_t>(rng() % 5));
      in.tokens.clear();
      if (u < in.num_segments()) in.tokens.assign(ids.begin(), ids.begin() + p.len);
      const int64_t before = tiered ? b.pool->tier().counters(*b.backend).misses : 0;
      const Status st = b.runner->forward_layer_segments(in, prompt_logits);
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (tiered) prefill_misses += b.pool->tier().counters(*b.backend).misses - before;
      ASSERT_EQ(prompt_logits.empty(), in.unit_end < units);
      u = in.unit_end;
      ++shares;
      bg_decode();
      if (p.abort_midway && shares == 3 && u < units) {
        aborted = true;
        break;
      }
    }
    if (aborted) {
      a.kv->remove_sequence(slot);
      b.kv->remove_sequence(slot);
      // Continuing a prefill the engine gave up is refused, not run on stale state.
      EXPECT_FALSE(b.runner->forward_layer_segments(in, prompt_logits).ok());
      continue;
    }
    if (tiered) {
      const int64_t pages = (p.len + g.page_tokens - 1) / g.page_tokens;
      EXPECT_EQ(prefill_misses, pages * g.roles.num_retrieval())
          << "each retrieval head-page of the prompt is copied to the device once";
    }
    // Chunked reference, alone, at the same boundaries.
    for (int32_t begin = 0; begin < p.len; begin += segment) {
      const int32_t len = std::min(segment, p.len - begin);
      ASSERT_TRUE(a.kv->grow(slot, begin + len).ok());
      StepInput c;
      c.tokens.assign(ids.begin() + begin, ids.begin() + begin + len);
      c.seqs.push_back({slot, len, begin + len, true});
      c.logit_rows.push_back(len - 1);
      ASSERT_TRUE(a.runner->forward(c, la).ok());
    }
    ASSERT_EQ(la.size(), static_cast<size_t>(vocab));
    ASSERT_TRUE(same(la, prompt_logits)) << policy << (offload ? " tier on" : " tier off") << ": prompt of "
                              << p.len << " tokens, last-token logits differ";
    ++checked;
    a.kv->finish_prefill(slot);
    b.kv->finish_prefill(slot);
    // Teacher-forced decodes batched with the neighbour: they read every layer's K/V the
    // layer-segmented prefill wrote.
    for (int32_t d = 0; d < p.decodes; ++d) {
      const int32_t pos = p.len + d;
      StepInput s;
      s.tokens.push_back(ids[static_cast<size_t>(pos)]);
      s.seqs.push_back({slot, 1, pos + 1, false});
      s.logit_rows.push_back(0);
      const bool with_bg = bg_done < static_cast<int32_t>(bg.size());
      if (with_bg) {
        s.tokens.push_back(bg[static_cast<size_t>(bg_done)]);
        s.seqs.push_back({bg_slot, 1, bg_done + 1, false});
        s.logit_rows.push_back(1);
        both_grow(bg_slot, bg_done + 1);
        ++bg_done;
      }
      both_grow(slot, pos + 1);
      ASSERT_TRUE(a.runner->forward(s, la).ok());
      ASSERT_TRUE(b.runner->forward(s, lb).ok());
      ASSERT_TRUE(same(la, lb)) << policy << ": decode " << d << " after a " << p.len
                                << "-token prompt";
      ++checked;
    }
    a.kv->remove_sequence(slot);
    b.kv->remove_sequence(slot);
  }
  EXPECT_GT(bg_steps, 5);  // shares with a neighbour decode between them
  EXPECT_GT(checked, 40);
  a.kv->remove_sequence(bg_slot);
  b.kv->remove_sequence(bg_slot);
  EXPECT_EQ(b.kv->num_free_retrieval_blocks(), b.kv->num_retrieval_blocks());
  EXPECT_EQ(b.kv->num_free_streaming_blocks(), b.kv->num_streaming_blocks());
  if (tiered) {
    b.runner->release_finished_rows();
    for (int32_t v : b.pool->tier().slot_pages(*b.backend)) ASSERT_EQ(v, -1);
    for (int32_t v : b.pool->tier().page_slots(*b.backend)) ASSERT_EQ(v, -1);
  }
}

std::string name(const ::testing::TestParamInfo<LayerSegmented::ParamType>& info) {
  const auto& [model, policy, offload, segment] = info.param;
  return model + "_" + policy + (offload ? "_tier" : "_resident") + "_seg" +
         std::to_string(segment);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, LayerSegmented,
    ::testing::Combine(::testing::Values("llama3"),
                       ::testing::Values("dense", "streaming", "quest", "lserve"),
                       ::testing::Values(false, true), ::testing::Values(64, 160)),
    name);

INSTANTIATE_TEST_SUITE_P(Qwen3, LayerSegmented,
                         ::testing::Combine(::testing::Values("qwen3"),
                                            ::testing::Values("lserve"), ::testing::Values(true),
                                            ::testing::Values(100)),
                         name);

// Misuse is an error, not a crash: the mode off, a segment past the step, a share that does not
// continue the arena's prefill, a prompt longer than the reserved blocks.
TEST(LayerSegmentedErrors, RefusedCleanly) {
  ModelStackOptions o = options("llama3", "dense");
  auto off = build_model_stack(o);
  ASSERT_TRUE(off.ok());
  std::vector<float> logits;
  LayerSegmentInput in;
  in.slot = 0;
  in.num_tokens = 10;
  in.segment_tokens = 10;
  in.unit_begin = 0;
  in.unit_end = 1;
  in.tokens.assign(10, 1);
  EXPECT_FALSE((*off)->runner->forward_layer_segments(in, logits).ok());

  o.layer_segmented_prefill = true;
  auto on = build_model_stack(o);
  ASSERT_TRUE(on.ok());
  ModelStack& s = **on;
  auto slot = s.kv->add_sequence();
  ASSERT_TRUE(slot.ok());
  in.slot = *slot;
  EXPECT_FALSE(s.runner->forward_layer_segments(in, logits).ok());  // no blocks reserved yet
  ASSERT_TRUE(s.kv->grow(*slot, 10).ok());
  in.segment_tokens = kStepTokens + 1;
  EXPECT_FALSE(s.runner->forward_layer_segments(in, logits).ok());
  in.segment_tokens = 4;  // 3 segments
  in.unit_begin = 1;
  in.unit_end = 2;
  EXPECT_FALSE(s.runner->forward_layer_segments(in, logits).ok());  // nothing to continue
  in.unit_begin = 0;
  in.tokens[3] = -1;
  EXPECT_FALSE(s.runner->forward_layer_segments(in, logits).ok());
  in.tokens[3] = 1;
  in.unit_end = 1;
  EXPECT_TRUE(s.runner->forward_layer_segments(in, logits).ok());
  EXPECT_TRUE(logits.empty());
  in.unit_begin = 2;  // skips unit 1
  in.unit_end = 3;
  EXPECT_FALSE(s.runner->forward_layer_segments(in, logits).ok());
  in.unit_begin = 0;  // starting over works
  in.unit_end = in.num_segments() * s.runner->num_layers();
  EXPECT_TRUE(s.runner->forward_layer_segments(in, logits).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(s.runner->vocab_size()));
}

}  // namespace
}  // namespace ls

#include "engine/engine_core.h"

namespace ls {
namespace {

struct EngineRun {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::vector<float>> logprobs;  // the chosen tokens', bit for bit
  std::map<std::string, FinishReason> finish;
  EngineStats stats;
  int32_t steps = 0;
};

struct Request {
  std::string id;
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
};

EngineConfig engine_config(bool offload, const std::string& mode, int32_t batched_tokens,
                           int32_t max_seqs) {
  EngineConfig c;
  c.model_dir = fixture_dir("llama3");
  c.num_threads = 2;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = batched_tokens;
  c.max_model_len = 640;
  c.attention.policy = "lserve";
  c.attention.token_budget = 128;
  c.attention.select_interval = 2;
  c.attention.sink_tokens = 16;
  c.attention.decode_local_tokens = 64;
  c.attention.prefill_local_tokens = 128;
  c.kv_offload = offload;
  c.offload_buffer_ratio = 0;  // the smallest cache: one layer of a max-length request
  c.prefill_mode = mode;
  c.layer_segmented_min_tokens = 200;
  c.prefill_segment_tokens = 64;
  return c;
}

// Runs `requests` (submitted at once) to the end. `abort_len` > 0: the request with a prompt of
// that many tokens is aborted after its second step in layer-segmented prefill (its whole prompt
// reserved and still prefilling); `aborted_mid_prefill` tells whether that happened.
EngineRun run_engine(const EngineConfig& c, const std::vector<Request>& requests,
                     int32_t abort_len = 0, bool* aborted_mid_prefill = nullptr) {
  EngineRun run;
  auto core_or = EngineCore::create(c);
  EXPECT_TRUE(core_or.ok()) << core_or.status().to_string();
  if (!core_or.ok()) return run;
  EngineCore& core = **core_or;
  for (const Request& r : requests) {
    GenerateRequest g;
    g.request_id = r.id;
    g.prompt_ids = r.prompt;
    g.sampling.temperature = 0;
    g.sampling.logprobs = 0;
    g.stop.max_tokens = r.max_tokens;
    g.stop.eos_token_ids = {};
    const std::string id = r.id;
    EXPECT_TRUE(core.add_request(g, [&run, id](const RequestOutput& o) {
                      auto& t = run.tokens[id];
                      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
                      for (const TokenLogprob& l : o.logprobs) run.logprobs[id].push_back(l.logprob);
                      if (o.finished) run.finish[id] = o.finish_reason;
                    }).ok());
  }
  int32_t prefill_steps = 0;
  while (core.has_work() && run.steps < 5000) {
    EXPECT_TRUE(core.step().ok());
    ++run.steps;
    if (abort_len == 0) continue;
    for (int32_t slot = 0; slot < core.kv().max_seqs(); ++slot) {
      const SequenceKv& kv = core.kv().sequence(slot);
      if (kv.active && kv.prefilling && kv.num_tokens == abort_len && ++prefill_steps == 2) {
        for (const Request& r : requests) {
          if (static_cast<int32_t>(r.prompt.size()) == abort_len) core.abort(r.id);
        }
        if (aborted_mid_prefill != nullptr) *aborted_mid_prefill = true;
      }
    }
  }
  run.stats = core.stats();
  return run;
}

// Through the engine: long prompts (all above the threshold, so every step's token batch is
// decodes only) take layer-segmented prefill while the others decode, one is aborted mid-prefill;
// each request's greedy tokens and their logprobs equal, bit for bit, the request run alone with
// chunked prefill at the same boundaries. Afterwards no KV is in use.
class LayerSegmentedEngine : public ::testing::TestWithParam<bool> {};

TEST_P(LayerSegmentedEngine, EachRequestAsIfAloneWithChunkedPrefill) {
  const bool offload = GetParam();
  std::mt19937 rng(9);
  std::vector<Request> requests;
  const std::vector<int32_t> lengths = {260, 455, 333, 201, 390};
  for (size_t i = 0; i < lengths.size(); ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    for (int32_t t = 0; t < lengths[i]; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % 300));
    r.max_tokens = 24;
    requests.push_back(std::move(r));
  }
  // r1 is admitted (layer-segmented) once r0's prefill ends; it is aborted during its prefill.
  bool aborted_mid_prefill = false;
  const EngineRun lsp = run_engine(engine_config(offload, "layer-segmented", 128, 3), requests,
                                   lengths[1], &aborted_mid_prefill);
  EXPECT_TRUE(aborted_mid_prefill);
  EXPECT_EQ(lsp.stats.kv_bytes_in_use, 0);
  EXPECT_EQ(lsp.stats.num_running + lsp.stats.num_waiting, 0);
  EXPECT_EQ(lsp.finish.at("r1"), FinishReason::kAbort);
  EXPECT_TRUE(lsp.tokens.count("r1") == 0 || lsp.tokens.at("r1").empty());
  for (const Request& r : requests) {
    if (r.id == "r1") continue;
    // Alone, chunked, in chunks of the segment size: the reference.
    const EngineRun alone = run_engine(engine_config(offload, "chunked", 64, 1), {r});
    ASSERT_EQ(alone.tokens.at(r.id).size(), 24u);
    EXPECT_EQ(lsp.tokens.at(r.id), alone.tokens.at(r.id)) << r.id;
    const auto& a = alone.logprobs.at(r.id);
    const auto& b = lsp.logprobs.at(r.id);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << r.id;
  }
}

INSTANTIATE_TEST_SUITE_P(TierOnOff, LayerSegmentedEngine, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "tier" : "resident"; });

}  // namespace
}  // namespace ls
