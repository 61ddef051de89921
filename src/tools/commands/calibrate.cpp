// longserve calibrate: finds the model's streaming and retrieval heads from its own behaviour on
// synthetic retrieval prompts and writes DuoAttention's full_attention_heads.tsv, which
// --head-pattern reads (method: src/eval/calibration.h; docs/eval.md).
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "attention/head_pattern.h"
#include "core/clock.h"
#include "eval/calibration.h"
#include "eval/grid_args.h"
#include "eval/prompt_generator.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands/commands.h"
#include "tools/engine_flags.h"

namespace ls {

namespace {

struct CalibrateOptions {
  EngineConfig engine;
  std::string out_path = "full_attention_heads.tsv";
  std::string lengths = "1024";
  std::string tasks = "niah_single,niah_multikey";
  int32_t samples = 4;
  uint64_t seed = 1;
  std::string method = "greedy";
  double tolerance_nats = 0.05;
  std::string prompts_path;
  std::string json_path;
};

int fail(const Status& st) {
  fmt::print(stderr, "error: {}\n", st.message());
  return 1;
}

int run_calibrate(CalibrateOptions& o) {
  finalize_engine_flags(o.engine);
  eval::CalibrationOptions c;
  if (o.method == "leave-one-out") {
    c.method = eval::CalibrationMethod::kLeaveOneOut;
  } else if (o.method == "greedy") {
    c.method = eval::CalibrationMethod::kGreedy;
  } else {
    return fail(invalid_argument("--method must be leave-one-out or greedy (got '{}')", o.method));
  }
  c.sink_tokens = o.engine.attention.sink_tokens;
  c.local_tokens = o.engine.attention.decode_local_tokens;
  c.tolerance_nats = o.tolerance_nats;
  c.log = [](const std::string& line) { fmt::print(stderr, "[calibrate] {}\n", line); };

  const double start = now_seconds();
  std::vector<eval::EvalPrompt> prompts;
  if (!o.prompts_path.empty()) {
    auto read = eval::read_prompts_jsonl(o.prompts_path);
    if (!read.ok()) return fail(read.status());
    prompts = std::move(*read);
  } else {
    auto lengths = eval::parse_lengths(o.lengths);
    if (!lengths.ok()) return fail(lengths.status());
    auto tasks = eval::parse_tasks(o.tasks);
    if (!tasks.ok()) return fail(tasks.status());
    if (o.samples < 1) return fail(invalid_argument("--samples must be at least 1"));
    auto tok = Tokenizer::load(o.engine.model_dir);
    if (!tok.ok()) return fail(tok.status());
    auto gen = eval::PromptGenerator::create(std::move(*tok), o.seed);
    if (!gen.ok()) return fail(gen.status());
    auto made = gen->random_depth_prompts({*tasks, *lengths, {}, o.samples, o.seed});
    if (!made.ok()) return fail(made.status());
    prompts = std::move(*made);
  }
  fmt::print(stderr,
             "[calibrate] {} prompts, method {}, streaming heads keep {} sink + {} local tokens\n",
             prompts.size(), o.method, c.sink_tokens, c.local_tokens);
  auto result = eval::calibrate_heads(o.engine, prompts, c);
  if (!result.ok()) return fail(result.status());
  Status st = write_head_gates(o.out_path, result->gates);
  if (!st.ok()) return fail(st);

  const eval::CalibrationResult& r = *result;
  const int32_t heads = r.gates.num_kv_heads;
  fmt::print("gates (rows = layers, columns = kv heads; 1 = needs full attention):\n");
  for (int32_t l = 0; l < r.gates.num_layers; ++l) {
    fmt::print("layer {:>2}:", l);
    for (int32_t h = 0; h < heads; ++h)
      fmt::print(" {:6.3f}", r.gates.gates[static_cast<size_t>(l * heads + h)]);
    fmt::print("\n");
  }
  const double elapsed = now_seconds() - start;
  fmt::print(stderr, "[calibrate] wrote {} ({} passes, {} tokens scored in {:.1f} s)\n", o.out_path,
             r.num_passes, r.num_scored_tokens, elapsed);
  if (!o.json_path.empty()) {
    nlohmann::ordered_json j;
    j["model"] = o.engine.model_dir.string();
    j["method"] = o.method;
    j["sink_tokens"] = c.sink_tokens;
    j["local_tokens"] = c.local_tokens;
    j["num_prompts"] = prompts.size();
    j["prompts"] = o.prompts_path.empty() ? nlohmann::ordered_json{{"lengths", o.lengths},
                                                                   {"tasks", o.tasks},
                                                                   {"samples", o.samples},
                                                                   {"seed", o.seed}}
                                          : nlohmann::ordered_json(o.prompts_path);
    j["num_layers"] = r.gates.num_layers;
    j["num_kv_heads"] = heads;
    j["dense_answer_logprob"] = r.dense_logprob;
    j["tolerance_nats"] = c.tolerance_nats;
    j["streaming_drop"] = r.streaming_drop;
    j["selected"] = r.selected;
    j["round_drops"] = r.round_drops;
    j["scores"] = r.scores;
    j["gates"] = r.gates.gates;
    j["num_passes"] = r.num_passes;
    j["elapsed_s"] = elapsed;
    std::ofstream f(o.json_path, std::ios::binary);
    f << j.dump(1) << "\n";
    if (!f) return fail(io_error("writing {} failed", o.json_path));
  }
  return 0;
}

}  // namespace

CommandRunner add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* sub = app.add_subcommand(
      "calibrate", "Find streaming and retrieval heads; write full_attention_heads.tsv");
  add_engine_flags(*sub, o->engine);
  sub->add_option("--out,-o", o->out_path, "Pattern file to write (DuoAttention's TSV format)")
      ->capture_default_str();
  sub->add_option("--lengths", o->lengths, "Context lengths of the calibration prompts")
      ->capture_default_str();
  sub->add_option("--tasks", o->tasks, "Tasks of the calibration prompts")->capture_default_str();
  sub->add_option("--samples", o->samples, "Prompts per (task, length), needles at random depths")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Prompt seed")->capture_default_str();
  sub->add_option("--method", o->method,
                  "greedy (forward selection of full heads until the answer is retained) or "
                  "leave-one-out (N+1 passes; blind to redundant heads)")
      ->capture_default_str();
  sub->add_option("--tolerance", o->tolerance_nats,
                  "greedy: stop when the answer log-probability is within this many nats of dense")
      ->capture_default_str();
  sub->add_option("--prompts", o->prompts_path, "Calibrate on the prompts of this JSONL instead");
  sub->add_option("--json", o->json_path, "Per-head drops and gates as JSON");
  return [o] { return run_calibrate(*o); };
}

}  // namespace ls
