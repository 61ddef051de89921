// TPOT of grammar-constrained requests against unconstrained ones at the same batch size.
//
// Each round submits --batch requests at once to the engine (CPU by default, --device cuda on a
// GPU) and times every output token; a request's TPOT is (time of last token - time of first) /
// (tokens - 1), and the round's TPOT is the median over its requests. Both kinds run the same
// batch with the same prompts, ignore eos and generate exactly --max-tokens tokens (checked); the
// constrained ones follow a JSON schema (a list of records, so generation keeps cycling through
// strings, numbers, enums and structure). Rounds alternate in the order A B B A A B ... so that
// neither kind always runs first and drift of the machine hits both; the verdict compares the
// medians over rounds. The first constrained round starts with an empty mask cache (cold) and
// is reported apart; later rounds reuse it, as requests with the same schema on a server do.
//
//   build/bench_structured [--model DIR] [--device cpu|cuda] [--batch 16] [--max-tokens 128]
//                          [--rounds 4]

#include <algorithm>
#include <cmath>
#include <chrono>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine_core.h"
#include "structured/grammar_constraint.h"
#include "tokenizer/tokenizer.h"

using namespace ls;

namespace {

const char* kSchema = R"({"type": "array", "items": {"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 12},
  "age": {"type": "integer"},
  "city": {"enum": ["Paris", "Rome", "Lisbon", "Berlin"]},
  "score": {"type": "number"},
  "member": {"type": "boolean"}},
  "required": ["name", "age", "city", "score", "member"]}})";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct RoundResult {
  double tpot_ms = 0;
  double step_ms = 0;
  double constraint_ms_per_step = 0;  // mask + accept time of all sequences, per engine step
  int64_t tokens = 0;
};

// Time spent inside the constraint (masking and advancing), which is what constrained decoding
// adds to a step; measured apart from the step time because this machine's load moves step
// times by more than the overhead itself.
double g_constraint_s = 0;

class TimedConstraint : public TokenConstraint {
 public:
  explicit TimedConstraint(std::unique_ptr<TokenConstraint> inner) : inner_(std::move(inner)) {}
  void mask_logits(std::span<float> logits) override {
    const double t = now_s();
    inner_->mask_logits(logits);
    g_constraint_s += now_s() - t;
  }
  bool accept(int32_t token) override {
    const double t = now_s();
    const bool ok = inner_->accept(token);
    g_constraint_s += now_s() - t;
    return ok;
  }

 private:
  std::unique_ptr<TokenConstraint> inner_;
};

RoundResult run_round(EngineCore& engine, int batch, int max_tokens, int round,
                      const TokenConstraintFactory& constraint) {
  std::vector<std::vector<double>> times(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) {
    GenerateRequest req;
    req.request_id = fmt::format("r{}-{}", round, i);
    req.prompt_ids = engine.tokenizer()->encode(
        fmt::format("Record {} of the registry lists these people and their cities:", i), true);
    req.sampling.temperature = 1.0f;
    req.sampling.seed = static_cast<uint64_t>(round * 1000 + i);
    req.stop.max_tokens = max_tokens;
    req.stop.ignore_eos = true;
    req.stop.eos_token_ids = engine.default_stop().eos_token_ids;
    req.constraint = constraint;
    auto* slot = &times[static_cast<size_t>(i)];
    Status st = engine.add_request(req, [slot](const RequestOutput& out) {
      if (!out.token_ids.empty()) slot->push_back(now_s());
    });
    if (!st.ok()) throw std::runtime_error(st.message());
  }
  int steps = 0;
  g_constraint_s = 0;
  const double start = now_s();
  while (engine.has_work()) {
    Status st = engine.step();
    if (!st.ok()) throw std::runtime_error(st.message());
    ++steps;
  }
  RoundResult r;
  r.step_ms = (now_s() - start) * 1e3 / std::max(steps, 1);
  r.constraint_ms_per_step = g_constraint_s * 1e3 / std::max(steps, 1);
  std::vector<double> tpots;
  for (const auto& t : times) {
    r.tokens += static_cast<int64_t>(t.size());
    if (static_cast<int>(t.size()) != max_tokens) {
      throw std::runtime_error(fmt::format("a request of round {} made {} tokens, not {}", round,
                                           t.size(), max_tokens));
    }
    if (t.size() > 1) tpots.push_back((t.back() - t.front()) / static_cast<double>(t.size() - 1));
  }
  std::sort(tpots.begin(), tpots.end());
  r.tpot_ms = tpots.empty() ? 0.0 : tpots[tpots.size() / 2] * 1e3;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"TPOT of JSON-schema-constrained vs unconstrained requests"};
  EngineConfig config;
  config.model_dir = "models/tiny-longctx";
  int batch = 16;
  int max_tokens = 128;
  int rounds = 4;
  app.add_option("--model", config.model_dir)->capture_default_str();
  app.add_option("--device", config.device, "cpu or cuda")->capture_default_str();
  app.add_option("--threads", config.num_threads)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--max-tokens", max_tokens)->capture_default_str();
  app.add_option("--rounds", rounds, "Rounds of each kind")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  config.max_num_seqs = batch;
  config.max_model_len = 1024;

  auto core = EngineCore::create(config);
  if (!core.ok()) {
    fmt::print(stderr, "error: {}\n", core.status().message());
    return 1;
  }
  EngineCore& engine = **core;
  const double t0 = now_s();
  auto vocab = std::make_shared<const grammar::TokenVocab>(
      grammar::TokenVocab::from_tokenizer(*engine.tokenizer()));
  const double vocab_ms = (now_s() - t0) * 1e3;
  grammar::GrammarCache cache(vocab);
  grammar::ConstraintSpec spec{grammar::ConstraintKind::kJsonSchema, kSchema, {}};
  const double t1 = now_s();
  auto compiled = cache.get(spec);
  if (!compiled.ok()) {
    fmt::print(stderr, "error: {}\n", compiled.status().message());
    return 1;
  }
  const double compile_ms = (now_s() - t1) * 1e3;
  std::shared_ptr<grammar::CompiledGrammar> g = *compiled;
  const std::vector<int32_t> end_ids = engine.default_stop().eos_token_ids;
  TokenConstraintFactory constrained = [g, end_ids]() -> std::unique_ptr<TokenConstraint> {
    return std::make_unique<TimedConstraint>(
        std::make_unique<grammar::GrammarConstraint>(g, end_ids));
  };

  run_round(engine, batch, 8, -1, nullptr);  // warm-up: threads, allocations
  fmt::print("model {} on {}, vocabulary {} tokens, batch {}, {} tokens per request\n",
             config.model_dir.string(), config.device, engine.tokenizer()->vocab_size(), batch,
             max_tokens);
  fmt::print("per-tokenizer vocabulary sort {:.1f} ms, schema compile {:.2f} ms\n\n", vocab_ms,
             compile_ms);
  fmt::print("| round | kind | TPOT ms | step ms | constraint ms / step | tokens | masks cached |\n"
             "|---:|---|---:|---:|---:|---:|---:|\n");
  std::vector<double> plain, warm, plain_step, warm_overhead;
  double cold = 0;
  double plain0 = 0;
  double cold_overhead = 0;
  for (int r = 0; r < rounds; ++r) {
    auto run_plain = [&] {
      const RoundResult u = run_round(engine, batch, max_tokens, 2 * r, nullptr);
      fmt::print("| {} | unconstrained | {:.3f} | {:.3f} | | {} | |\n", r, u.tpot_ms, u.step_ms,
                 u.tokens);
      if (r > 0) {  // round 0 is the cold constrained round's partner, compared apart
        plain.push_back(u.tpot_ms);
        plain_step.push_back(u.step_ms);
      } else {
        plain0 = u.tpot_ms;
      }
    };
    auto run_constrained = [&] {
      const RoundResult c = run_round(engine, batch, max_tokens, 2 * r + 1, constrained);
      fmt::print("| {} | json schema{} | {:.3f} | {:.3f} | {:.3f} | {} | {} |\n", r,
                 r == 0 ? " (cold cache)" : "", c.tpot_ms, c.step_ms, c.constraint_ms_per_step,
                 c.tokens, g->cached_masks());
      if (r == 0) {
        cold = c.tpot_ms;
        cold_overhead = c.constraint_ms_per_step;
      } else {
        warm.push_back(c.tpot_ms);
        warm_overhead.push_back(c.constraint_ms_per_step);
      }
    };
    // A B, B A, A B, ...: the cold constrained round comes second in round 0.
    if (r % 2 == 0) {
      run_plain();
      run_constrained();
    } else {
      run_constrained();
      run_plain();
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Warm medians over rounds 1..n-1 of both kinds; the cold round against its own partner.
  const double p = median(plain);
  fmt::print("\nmedian TPOT: unconstrained {:.3f} ms, constrained warm {:.3f} ms ({:+.1f}%), "
             "constrained cold {:.3f} ms ({:+.1f}% against round 0's unconstrained {:.3f} ms)\n",
             p, median(warm), (median(warm) / p - 1) * 100, cold, (cold / plain0 - 1) * 100,
             plain0);
  const double step = median(plain_step);
  fmt::print("constraint time per step: warm {:.3f} ms ({:.1f}% of the unconstrained step, "
             "{:.1f} ms), cold {:.3f} ms ({:.1f}%)\n",
             median(warm_overhead), median(warm_overhead) / step * 100, step, cold_overhead,
             cold_overhead / step * 100);
  const double ratio = median(warm) / p;
  fmt::print("verdict: constrained warm TPOT is {:.1f}% {} the unconstrained one at batch {} "
             "(goal: within 10%)\n",
             std::abs(ratio - 1) * 100, ratio >= 1 ? "above" : "below", batch);
  return 0;
}
