// longserve generate: stream a completion of --prompt to stdout; statistics go to stderr.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine_core.h"
#include "tools/commands/commands.h"
#include "tools/engine_flags.h"

namespace ls {

namespace {

struct GenerateOptions {
  EngineConfig engine;
  std::string prompt;
  SamplingParams sampling;
  StopParams stop;
  bool temperature_given = false;
  bool no_special = false;
  bool quiet = false;
};

int run_generate(GenerateOptions& o) {
  finalize_engine_flags(o.engine);
  auto core = EngineCore::create(o.engine);
  if (!core.ok()) {
    fmt::print(stderr, "error: {}\n", core.status().message());
    return 1;
  }
  EngineCore& engine = **core;
  if (engine.tokenizer() == nullptr) {
    fmt::print(stderr, "error: {} has no tokenizer.json; generate needs one\n",
               o.engine.model_dir.string());
    return 1;
  }
  GenerateRequest req;
  req.request_id = "generate-0";
  req.prompt_ids = engine.tokenizer()->encode(o.prompt, !o.no_special);
  req.sampling = o.sampling;
  if (!o.temperature_given) req.sampling.temperature = engine.default_sampling().temperature;
  req.stop = o.stop;
  req.stop.eos_token_ids = engine.default_stop().eos_token_ids;

  const double start = now_seconds();
  double first_token_s = -1;
  int64_t peak_kv_bytes = 0;
  RequestOutput last;
  Status st = engine.add_request(req, [&](const RequestOutput& out) {
    if (first_token_s < 0) first_token_s = now_seconds();
    std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    std::fflush(stdout);
    if (out.finished) last = out;
  });
  if (!st.ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  while (engine.has_work()) {
    st = engine.step();
    peak_kv_bytes = std::max(peak_kv_bytes, engine.kv().bytes_in_use());
    if (!st.ok()) {
      fmt::print(stderr, "\nerror: {}\n", st.message());
      return 1;
    }
  }
  const double end = now_seconds();
  std::fputc('\n', stdout);
  if (!o.quiet) {
    const double decode_s = end - first_token_s;
    const int32_t n = last.completion_tokens;
    fmt::print(stderr,
               "[{} attention] prompt {} tokens, generated {} ({}), time to first token {:.1f} ms, "
               "decode {:.1f} tok/s, KV in use {:.2f} MB (peak)\n",
               engine.attention_policy_name(), last.prompt_tokens, n,
               finish_reason_name(last.finish_reason), (first_token_s - start) * 1e3,
               n > 1 && decode_s > 0 ? (n - 1) / decode_s : 0.0,
               static_cast<double>(peak_kv_bytes) / 1e6);
  }
  return last.finish_reason == FinishReason::kError ? 1 : 0;
}

}  // namespace

CommandRunner add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  o->sampling.temperature = 0.0f;
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
  add_engine_flags(*sub, o->engine);
  sub->add_option("--prompt,-p", o->prompt, "Prompt text")->required();
  sub->add_option("--max-tokens,-n", o->stop.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  sub->add_option("--temperature", o->sampling.temperature, "Sampling temperature, 0 = greedy (default: the model's generation_config.json; "
                  "do_sample false there means greedy; 1.0 when it says nothing)")
      ->each([o](const std::string&) { o->temperature_given = true; });
  sub->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (-1: off)")
      ->capture_default_str();
  sub->add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p x the top probability")
      ->capture_default_str();
  sub->add_option("--repetition-penalty", o->sampling.repetition_penalty, "HF repetition penalty")
      ->capture_default_str();
  sub->add_option("--seed", o->sampling.seed, "Sampling seed of this request");
  sub->add_option("--stop", o->stop.stop, "Stop string (repeatable)");
  sub->add_flag("--ignore-eos", o->stop.ignore_eos, "Keep generating past end-of-sequence");
  sub->add_flag("--no-special-tokens", o->no_special, "Do not add BOS / special tokens to the prompt");
  sub->add_flag("--quiet,-q", o->quiet, "No statistics on stderr");
  return [o] { return run_generate(*o); };
}

}  // namespace ls
