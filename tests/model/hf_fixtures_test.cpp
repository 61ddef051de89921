// End to end against Hugging Face transformers (tests/fixtures/models, docs/fixtures.md): the
// logits of every position for prompts of 1, 64 and 4097 tokens within 1e-3 of HF's float32 run,
// greedy continuations equal wherever HF's top-2 margin is clear, the tokenizer on the prompts,
// lserve reducing exactly to dense, and a mixed batch equal to each sequence alone.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "engine/engine_core.h"
#include "io/safetensors.h"
#include "kv/kv_geometry.h"
#include "model/model_stack.h"

namespace ls {
namespace {

using Json = nlohmann::json;

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

Json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return Json::parse(f);
}

// [rows, vocab] f32 from the reference file (F16 rows upcast exactly).
std::vector<float> reference_logits(const std::string& model, const std::string& tensor) {
  auto file = SafetensorsFile::open(fixture_dir(model) / "expected/logits.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  const TensorInfo* t = (*file)->find(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  const int64_t n = t->nbytes / dtype_size(*t->dtype);
  std::vector<uint8_t> raw(static_cast<size_t>(t->nbytes));
  std::memcpy(raw.data(), t->data, raw.size());
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(*t->dtype, raw.data(), out.data(), n);
  return out;
}

EngineConfig engine_config(const std::string& model, const std::string& policy = "dense") {
  EngineConfig c;
  c.model_dir = fixture_dir(model);
  c.num_threads = 2;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 8192;
  c.attention.policy = policy;
  // The 1e-3 bound is against HF's float32 run: keep K/V in f32 (the CPU default, bf16, adds
  // its rounding; tests/model/kv_quant_logits_test.cpp measures that).
  c.kv_cache_dtype = "f32";
  return c;
}

std::unique_ptr<EngineCore> make_engine(const EngineConfig& c) {
  auto core = EngineCore::create(c);
  EXPECT_TRUE(core.ok()) << core.status().to_string();
  return core.ok() ? std::move(*core) : nullptr;
}

// Worst over positions of max_v |ours - ref| / max_v |ref|.
double worst_relative_error(const std::vector<float>& ours, const std::vector<float>& ref,
                            int64_t vocab, int64_t* worst_pos = nullptr) {
  double worst = 0;
  for (size_t p = 0; p * vocab < ref.size(); ++p) {
    double diff = 0, scale = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const size_t i = p * static_cast<size_t>(vocab) + static_cast<size_t>(v);
      diff = std::max(diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
    }
    const double rel = diff / std::max(scale, 1e-30);
    if (rel > worst) {
      worst = rel;
      if (worst_pos) *worst_pos = static_cast<int64_t>(p);
    }
  }
  return worst;
}

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, LogitsOfEveryPositionMatchTransformers) {
  const std::string model = GetParam();
  auto engine = make_engine(engine_config(model));
  ASSERT_NE(engine, nullptr);
  const Json prompts = read_json(fixture_dir(model) / "expected/prompts.json");
  for (const Json& p : prompts["prompts"]) {
    std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    std::vector<float> logits;
    ASSERT_TRUE(engine->score(ids, logits).ok());
    const auto ref = reference_logits(model, p["tensor"].get<std::string>());
    ASSERT_EQ(logits.size(), ref.size());
    int64_t pos = -1;
    const double err = worst_relative_error(logits, ref, engine->vocab_size(), &pos);
    EXPECT_LE(err, 1e-3) << model << " prompt " << p["name"] << " worst position " << pos;
    std::printf("%s prompt %s: worst relative logit error %.2e (position %lld)\n", model.c_str(),
                p["name"].get<std::string>().c_str(), err, static_cast<long long>(pos));
    // The tokenizer gives HF's ids for the prompt text.
    ASSERT_NE(engine->tokenizer(), nullptr);
    EXPECT_EQ(engine->tokenizer()->encode(p["text"].get<std::string>(), true), ids)
        << model << " prompt " << p["name"];
  }
}

TEST_P(HfFixture, GreedyContinuationsMatchWhereTheMarginIsClear) {
  const std::string model = GetParam();
  auto engine = make_engine(engine_config(model));
  ASSERT_NE(engine, nullptr);
  const Json greedy = read_json(fixture_dir(model) / "expected/greedy.json");
  int req = 0;
  for (const Json& c : greedy["continuations"]) {
    const auto prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(engine->tokenizer()->encode(c["prompt_text"].get<std::string>(), true), prompt_ids);
    GenerateRequest r;
    r.request_id = "g" + std::to_string(req++);
    r.prompt_ids = prompt_ids;
    r.sampling.temperature = 0;
    r.stop.max_tokens = greedy["max_new_tokens"].get<int32_t>();
    r.stop.eos_token_ids = greedy["eos_token_ids"].get<std::vector<int32_t>>();
    r.stop.skip_special_tokens = false;
    std::vector<int32_t> got;
    std::string text;
    RequestOutput last;
    ASSERT_TRUE(engine->add_request(r, [&](const RequestOutput& o) {
                  got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
                  text += o.text;
                  if (o.finished) last = o;
                }).ok());
    while (engine->has_work()) ASSERT_TRUE(engine->step().ok());
    const auto want = c["generated_ids"].get<std::vector<int32_t>>();
    const auto gap = c["top1_top2_gap"].get<std::vector<double>>();
    const auto top1 = c["top1_logit"].get<std::vector<double>>();
    size_t clear = 0;
    while (clear < want.size() && gap[clear] >= 2e-3 * std::max(1.0, std::fabs(top1[clear]))) ++clear;
    ASSERT_GE(got.size(), std::min(clear + 1, want.size()));
    for (size_t i = 0; i < std::min(clear + 1, want.size()); ++i) {
      EXPECT_EQ(got[i], want[i]) << model << " step " << i;
    }
    if (clear == want.size()) {
      EXPECT_EQ(got, want) << model;
      EXPECT_STREQ(finish_reason_name(last.finish_reason), c["finish_reason"].get<std::string>().c_str());
      // The streamed text equals HF's decode (eos text is not shown when it stops).
      std::string want_text = c["generated_text"].get<std::string>();
      if (last.finish_reason == FinishReason::kStop) {
        std::vector<int32_t> body(want.begin(), want.end() - 1);
        want_text = engine->tokenizer()->decode(body, false);
      }
      EXPECT_EQ(text, want_text) << model;
    }
  }
}

TEST_P(HfFixture, LserveWithFullBudgetAndNoStreamingHeadsEqualsDense) {
  const std::string model = GetParam();
  auto dense = make_engine(engine_config(model, "dense"));
  EngineConfig lc = engine_config(model, "lserve");
  lc.attention.streaming_ratio = 0.0;
  lc.attention.token_budget = 8192;
  auto lserve = make_engine(lc);
  ASSERT_NE(dense, nullptr);
  ASSERT_NE(lserve, nullptr);
  EXPECT_EQ(lserve->attention_policy_name(), "lserve");
  const Json prompts = read_json(fixture_dir(model) / "expected/prompts.json");
  for (const Json& p : prompts["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    std::vector<float> a, b;
    ASSERT_TRUE(dense->score(ids, a).ok());
    ASSERT_TRUE(lserve->score(ids, b).ok());
    EXPECT_LE(worst_relative_error(b, a, dense->vocab_size()), 1e-5) << p["name"];
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfFixture,
                         ::testing::Values("llama3", "qwen2", "qwen3", "mistral"),
                         [](const auto& info) { return info.param; });

// A step that mixes sequences of different lengths, prefill chunks and decode tokens gives each
// sequence the logits it gets alone.
TEST(MixedBatch, EqualsEachSequenceAlone) {
  ModelStackOptions o;
  o.model_dir = fixture_dir("qwen3");
  o.num_threads = 2;
  o.max_num_seqs = 4;
  o.max_step_tokens = 256;
  o.max_logit_rows = 256;
  o.max_model_len = 8192;
  // Equal up to f32 summation order (1e-5): with bf16 pages a last-bit difference between the
  // batched and the lone K can round to different bf16 values.
  o.kv_cache_dtype = KvCacheDtype::kF32;
  auto stack = build_model_stack(o);
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  ModelRunner& runner = *(*stack)->runner;
  KvManager& kv = *(*stack)->kv;
  const int32_t vocab = runner.vocab_size();
  const Json prompts = read_json(fixture_dir("qwen3") / "expected/prompts.json");
  const auto long_ids = prompts["prompts"][2]["ids"].get<std::vector<int32_t>>();

  // Three sequences: A prefills 100 tokens in chunks of 40, 40, 20; B has 7 tokens then decodes
  // one token per step; C joins later with 30 tokens. Rows of every step are checked against
  // the reference logits of each sequence computed alone (one sequence per step).
  std::vector<int32_t> a(long_ids.begin(), long_ids.begin() + 100);
  std::vector<int32_t> b(long_ids.begin() + 500, long_ids.begin() + 512);
  std::vector<int32_t> c(long_ids.begin() + 1000, long_ids.begin() + 1030);
  auto alone = [&](const std::vector<int32_t>& ids) {
    auto slot = kv.add_sequence();
    EXPECT_TRUE(slot.ok());
    EXPECT_TRUE(kv.grow(*slot, static_cast<int32_t>(ids.size())).ok());
    StepInput in;
    in.tokens = ids;
    in.seqs.push_back({*slot, static_cast<int32_t>(ids.size()), static_cast<int32_t>(ids.size()), true});
    for (size_t i = 0; i < ids.size(); ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
    std::vector<float> logits;
    EXPECT_TRUE(runner.forward(in, logits).ok());
    kv.remove_sequence(*slot);
    return logits;
  };
  const auto ref_a = alone(a), ref_b = alone(b), ref_c = alone(c);

  int32_t sa = *kv.add_sequence(), sb = *kv.add_sequence(), sc = -1;
  int32_t na = 0, nb = 0, nc = 0;  // tokens computed
  struct Part {
    int32_t slot, begin, len;
    const std::vector<int32_t>* ids;
    const std::vector<float>* ref;
    bool prefilling;
  };
  auto run_step = [&](const std::vector<Part>& parts) {
    StepInput in;
    std::vector<std::pair<const Part*, int32_t>> rows;
    for (const Part& p : parts) {
      ASSERT_TRUE(kv.grow(p.slot, p.begin + p.len).ok());
      for (int32_t i = 0; i < p.len; ++i) {
        rows.push_back({&p, p.begin + i});
        in.logit_rows.push_back(static_cast<int32_t>(in.tokens.size()));
        in.tokens.push_back((*p.ids)[static_cast<size_t>(p.begin + i)]);
      }
      in.seqs.push_back({p.slot, p.len, p.begin + p.len, p.prefilling});
    }
    std::vector<float> logits;
    ASSERT_TRUE(runner.forward(in, logits).ok());
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& ref = *rows[r].first->ref;
      std::vector<float> got(logits.begin() + static_cast<ptrdiff_t>(r * vocab),
                             logits.begin() + static_cast<ptrdiff_t>((r + 1) * vocab));
      std::vector<float> want(ref.begin() + static_cast<ptrdiff_t>(rows[r].second) * vocab,
                              ref.begin() + static_cast<ptrdiff_t>(rows[r].second + 1) * vocab);
      EXPECT_LE(worst_relative_error(got, want, vocab), 1e-5) << "row " << r;
    }
  };
  run_step({{sa, 0, 40, &a, &ref_a, true}, {sb, 0, 7, &b, &ref_b, true}});
  na = 40, nb = 7;
  kv.finish_prefill(sb);
  run_step({{sb, nb, 1, &b, &ref_b, false}, {sa, na, 40, &a, &ref_a, true}});
  na += 40, ++nb;
  sc = *kv.add_sequence();
  run_step({{sb, nb, 1, &b, &ref_b, false}, {sa, na, 20, &a, &ref_a, true}, {sc, 0, 30, &c, &ref_c, true}});
  na += 20, ++nb, nc = 30;
  kv.finish_prefill(sa);
  kv.finish_prefill(sc);
  while (nb < static_cast<int32_t>(b.size())) {
    run_step({{sb, nb, 1, &b, &ref_b, false}});
    ++nb;
  }
  EXPECT_EQ(na + nb + nc, 100 + 12 + 30);
}

// With no --kv-cache-bytes, the automatic budget counts the streaming blocks the pools really
// reserve (rings of up to two prefills at a time), so one sequence of the full model length
// fits, chunk by chunk, even when only one sequence is allowed.
TEST(ModelStack, AutomaticKvBudgetHoldsAFullLengthSequenceWithStreamingHeads) {
  ModelStackOptions o;
  o.model_dir = fixture_dir("qwen3");
  o.num_threads = 1;
  o.max_num_seqs = 1;
  o.max_step_tokens = 2048;
  o.max_model_len = 16944;
  o.attention.policy = "lserve";
  o.attention.streaming_ratio = 0.5;
  auto stack = build_model_stack(o);
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  KvManager& kv = *(*stack)->kv;
  auto slot = kv.add_sequence();
  ASSERT_TRUE(slot.ok()) << slot.status().to_string();
  for (int32_t len = 2048; len < o.max_model_len; len += 2048) {
    ASSERT_TRUE(kv.grow(*slot, len).ok()) << len;
  }
  ASSERT_TRUE(kv.grow(*slot, o.max_model_len).ok());
  kv.finish_prefill(*slot);
}

}  // namespace
}  // namespace ls
