// longserve score: logits of a prompt as JSON — next_token_logprobs (the logprob the model gives
// each following token, one per position but the last) and last_logits (the full logits of the
// last position) — with the attention policy and the KV bytes used.
#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "engine/engine_core.h"
#include "tools/commands/commands.h"
#include "tools/engine_flags.h"
#include "tools/json_print.h"

namespace ls {

namespace {

struct ScoreOptions {
  EngineConfig engine;
  std::vector<int32_t> ids;
  std::string prompt;
  bool no_special = false;
};

// log_softmax(row)[target] in double.
double logprob_of(const float* row, int32_t vocab, int32_t target) {
  double max = -INFINITY;
  for (int32_t i = 0; i < vocab; ++i) max = std::max(max, static_cast<double>(row[i]));
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return static_cast<double>(row[target]) - max - std::log(sum);
}

int run_score(ScoreOptions& o) {
  finalize_engine_flags(o.engine);
  auto core = EngineCore::create(o.engine);
  if (!core.ok()) {
    fmt::print(stderr, "error: {}\n", core.status().message());
    return 1;
  }
  EngineCore& engine = **core;
  std::vector<int32_t> ids = o.ids;
  if (ids.empty()) {
    if (engine.tokenizer() == nullptr) {
      fmt::print(stderr, "error: --prompt needs a tokenizer.json; pass --ids instead\n");
      return 1;
    }
    ids = engine.tokenizer()->encode(o.prompt, !o.no_special);
  }
  std::vector<float> logits;
  int64_t kv_bytes = 0;
  Status st = engine.score(ids, logits, &kv_bytes);
  if (!st.ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  const int32_t vocab = engine.vocab_size();
  const auto n = static_cast<int32_t>(ids.size());
  std::string out = fmt::format("{{\"model\": {}, \"attention\": {}, \"num_tokens\": {}, \"token_ids\": [{}], ",
                                json_string(engine.model_name()),
                                json_string(engine.attention_policy_name()), n,
                                fmt::join(ids, ", "));
  out += "\"next_token_logprobs\": [";
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (i) out += ", ";
    out += fmt::format("{:.9g}", logprob_of(logits.data() + static_cast<size_t>(i) * vocab, vocab, ids[static_cast<size_t>(i + 1)]));
  }
  out += "], \"last_logits\": [";
  const float* last = logits.data() + static_cast<size_t>(n - 1) * vocab;
  for (int32_t v = 0; v < vocab; ++v) {
    if (v) out += ", ";
    out += fmt::format("{:.9g}", last[v]);
  }
  out += fmt::format("], \"kv_bytes\": {}}}\n", kv_bytes);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

CommandRunner add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* sub = app.add_subcommand("score", "Print next-token logprobs and the last logits as JSON");
  add_engine_flags(*sub, o->engine);
  auto* ids = sub->add_option("--ids", o->ids, "Token ids (comma-separated)")->delimiter(',');
  auto* prompt = sub->add_option("--prompt,-p", o->prompt, "Prompt text (tokenized with the model's tokenizer)");
  ids->excludes(prompt);
  sub->add_flag("--no-special-tokens", o->no_special, "Tokenize --prompt without BOS/special tokens");
  sub->callback([sub] {
    if (sub->count("--ids") + sub->count("--prompt") == 0) {
      throw CLI::ValidationError("give --ids or --prompt");
    }
  });
  return [o] { return run_score(*o); };
}

}  // namespace ls
