// longserve eval niah: accuracy of a model under an attention policy on the needle-in-a-haystack
// grid and the RULER-style tasks (docs/eval.md). Prompts are generated exactly as
// scripts/model/retrieval_tasks.py generates them (or read from its JSONL with --prompts), decoded
// greedily with many requests in flight, and scored; the accuracy table goes to stdout, progress
// to stderr, and optionally a Figure-9-style heatmap (SVG), a Markdown table and a JSON record.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/engine_core.h"
#include "eval/chat_prompt.h"
#include "eval/grid_args.h"
#include "eval/niah_runner.h"
#include "eval/prompt_generator.h"
#include "eval/report.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands/commands.h"
#include "tools/engine_flags.h"

namespace ls {

namespace {

struct EvalOptions {
  EngineConfig engine;
  std::string lengths = "1024,2048,4096";
  std::string depths = "11";
  std::string tasks = "all";
  int32_t samples = 11;
  uint64_t seed = 0;
  int32_t max_tokens = 40;
  std::string prompts_path;
  std::string emit_prompts_path;
  bool emit_only = false;
  std::string heatmap_path;
  std::string json_path;
  std::string markdown_path;
  bool lengths_given = false;
  bool tasks_given = false;
  bool chat = false;
};

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return io_error("cannot write {}", path);
  f << text;
  return f ? Status{} : io_error("writing {} failed", path);
}

std::string config_json(const EvalOptions& o, const EngineCore& engine, const std::string& source,
                        const std::vector<double>& depths, double elapsed_s) {
  const AttentionConfig& a = o.engine.attention;
  nlohmann::ordered_json j;
  j["model"] = o.engine.model_dir.string();
  j["attention"] = engine.attention_policy_name();
  j["head_pattern"] = a.head_pattern_path;
  j["streaming_ratio"] = a.streaming_ratio;
  j["token_budget"] = a.token_budget;
  j["page_tokens"] = a.page_tokens;
  j["logical_page_tokens"] = a.logical_page_tokens;
  j["select_interval"] = a.select_interval;
  j["keep_first_page"] = a.keep_first_page;
  j["sink_tokens"] = a.sink_tokens;
  j["prefill_local_tokens"] = a.prefill_local_tokens;
  j["decode_local_tokens"] = a.decode_local_tokens;
  j["max_num_seqs"] = o.engine.max_num_seqs;
  j["max_num_batched_tokens"] = o.engine.max_num_batched_tokens;
  j["threads"] = o.engine.num_threads;
  j["prompts"] = source;
  j["seed"] = o.seed;
  j["samples"] = o.samples;
  j["depths"] = depths;
  j["max_tokens"] = o.max_tokens;
  j["chat"] = o.chat;
  j["elapsed_s"] = elapsed_s;
  return j.dump();
}

// --chat: every prompt becomes the model's chat template around its user message, followed by
// the answer prefix (eval/chat_prompt.h).
Status to_chat_form(const std::filesystem::path& model_dir, const Tokenizer& tok,
                    std::vector<eval::EvalPrompt>& prompts) {
  LS_ASSIGN_OR_RETURN(std::optional<std::string> source, load_chat_template(model_dir));
  if (!source) return failed_precondition("--chat: {} has no chat template", model_dir.string());
  LS_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::parse(*source));
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (const std::optional<int32_t> bos = tok.bos_token_id()) {
    extra["bos_token"] = tok.id_to_token(*bos);
  }
  if (const std::optional<int32_t> eos = tok.eos_token_id()) {
    extra["eos_token"] = tok.id_to_token(*eos);
  }
  for (eval::EvalPrompt& p : prompts) {
    LS_ASSIGN_OR_RETURN(p.prompt, eval::chat_prompt_text(chat, p, extra));
    p.num_prompt_tokens = static_cast<int32_t>(tok.encode(p.prompt, false).size());
  }
  return Status{};
}

int fail(const Status& st) {
  fmt::print(stderr, "error: {}\n", st.message());
  return 1;
}

int run_eval_niah(EvalOptions& o) {
  finalize_engine_flags(o.engine);
  auto lengths = eval::parse_lengths(o.lengths);
  if (!lengths.ok()) return fail(lengths.status());
  auto depths = eval::parse_depths(o.depths);
  if (!depths.ok()) return fail(depths.status());
  auto tasks = eval::parse_tasks(o.tasks);
  if (!tasks.ok()) return fail(tasks.status());
  if (o.samples < 1) return fail(invalid_argument("--samples must be at least 1"));
  if (o.max_tokens < 1) return fail(invalid_argument("--max-tokens must be at least 1"));

  const double start = now_seconds();
  auto tokenizer = Tokenizer::load(o.engine.model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::shared_ptr<const Tokenizer> tok = std::move(*tokenizer);

  std::vector<eval::EvalPrompt> prompts;
  std::string source;
  if (!o.prompts_path.empty()) {
    auto read = eval::read_prompts_jsonl(o.prompts_path);
    if (!read.ok()) return fail(read.status());
    // --tasks / --lengths, when given, select from the file.
    for (eval::EvalPrompt& p : *read) {
      const bool task_ok =
          !o.tasks_given || std::any_of(tasks->begin(), tasks->end(),
                                        [&](eval::Task t) { return eval::task_name(t) == p.task; });
      const bool length_ok = !o.lengths_given || std::find(lengths->begin(), lengths->end(),
                                                           p.context_tokens) != lengths->end();
      if (task_ok && length_ok) prompts.push_back(std::move(p));
    }
    source = o.prompts_path;
  } else {
    auto gen = eval::PromptGenerator::create(tok, o.seed);
    if (!gen.ok()) return fail(gen.status());
    eval::GridSpec spec{*tasks, *lengths, *depths, o.samples, o.seed};
    auto grid = gen->grid(spec);
    if (!grid.ok()) return fail(grid.status());
    prompts = std::move(*grid);
    source = "generated";
  }
  if (prompts.empty()) return fail(invalid_argument("no prompts to evaluate"));
  if (!o.emit_prompts_path.empty()) {
    Status st = eval::write_prompts_jsonl(o.emit_prompts_path, prompts);
    if (!st.ok()) return fail(st);
    fmt::print(stderr, "wrote {} prompts to {}\n", prompts.size(), o.emit_prompts_path);
  }
  if (o.emit_only) return 0;
  if (o.chat) {
    Status st = to_chat_form(o.engine.model_dir, *tok, prompts);
    if (!st.ok()) return fail(st);
  }

  auto core = EngineCore::create(o.engine);
  if (!core.ok()) return fail(core.status());
  EngineCore& engine = **core;
  if (engine.tokenizer() == nullptr) {
    return fail(failed_precondition("{} has no tokenizer.json", o.engine.model_dir.string()));
  }

  fmt::print(stderr, "[eval] {} prompts, {} attention, {} threads\n", prompts.size(),
             engine.attention_policy_name(),
             o.engine.num_threads > 0 ? std::to_string(o.engine.num_threads) : "all");
  eval::RunOptions run;
  run.max_tokens = o.max_tokens;
  run.add_special_tokens = !o.chat;  // a rendered template carries its own BOS
  run.on_length_done = [](int32_t length, int32_t n, double seconds) {
    fmt::print(stderr, "[eval] {} tokens: {} prompts in {:.1f} s\n", length, n, seconds);
  };
  auto results = eval::run_prompts(engine, prompts, run);
  if (!results.ok()) return fail(results.status());
  const double elapsed = now_seconds() - start;

  const eval::AccuracyTable table = eval::summarize(*results);
  fmt::print("model {}, {} attention\n{}\n{}\n{}", o.engine.model_dir.string(),
             engine.attention_policy_name(),
             eval::format_table(table, eval::TableMetric::kContained),
             eval::format_table(table, eval::TableMetric::kExact),
             eval::format_table(table, eval::TableMetric::kRecall));
  const std::string config = config_json(o, engine, source, *depths, elapsed);
  if (!o.json_path.empty()) {
    Status st = write_file(o.json_path, eval::results_json(*results, config));
    if (!st.ok()) return fail(st);
  }
  if (!o.markdown_path.empty()) {
    Status st = write_file(o.markdown_path, eval::format_markdown_table(table));
    if (!st.ok()) return fail(st);
  }
  if (!o.heatmap_path.empty()) {
    const eval::DepthGrid grid = eval::niah_depth_grid(*results);
    if (grid.empty()) {
      fmt::print(stderr, "warning: no niah_single prompts on the depth grid; no heatmap written\n");
    } else {
      const std::string title = fmt::format("niah_single, {} attention ({})",
                                            engine.attention_policy_name(), engine.model_name());
      Status st = write_file(o.heatmap_path, eval::heatmap_svg(grid, title));
      if (!st.ok()) return fail(st);
    }
  }
  fmt::print(stderr, "[eval] done in {:.1f} s\n", elapsed);
  return 0;
}

}  // namespace

CommandRunner add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* sub = app.add_subcommand("eval", "Accuracy evaluations");
  sub->require_subcommand(1);
  CLI::App* niah = sub->add_subcommand(
      "niah", "Needle-in-a-haystack grid and RULER-style retrieval tasks (greedy; answer contained, as "
      "RULER scores, and exact match)");
  add_engine_flags(*niah, o->engine);
  niah->add_option("--lengths", o->lengths, "Context lengths in tokens, comma-separated (K = 1024)")
      ->capture_default_str()
      ->each([o](const std::string&) { o->lengths_given = true; });
  niah->add_option("--depths", o->depths,
                   "niah_single needle depths: a number of grid points or a list in [0, 1]")
      ->capture_default_str();
  niah->add_option("--tasks", o->tasks,
                   "niah_single, niah_multikey, niah_multivalue, vt (comma-separated) or all")
      ->capture_default_str()
      ->each([o](const std::string&) { o->tasks_given = true; });
  niah->add_option("--samples", o->samples,
                   "Prompts per (task, length); niah_single spreads them over the depths")
      ->capture_default_str();
  niah->add_option("--seed", o->seed, "Prompt seed (as train_tiny.py --seed)")
      ->capture_default_str();
  niah->add_option("--max-tokens", o->max_tokens, "New tokens per prompt at most")
      ->capture_default_str();
  niah->add_option("--prompts", o->prompts_path,
                   "Evaluate the prompts of this JSONL (train_tiny.py --emit-eval-jsonl) instead");
  niah->add_option("--emit-prompts", o->emit_prompts_path, "Write the prompts as JSONL");
  niah->add_flag("--emit-only", o->emit_only, "Only write --emit-prompts; evaluate nothing");
  niah->add_flag("--chat", o->chat,
                 "Wrap each prompt in the model's chat template (instruct models): the task as the "
                 "user message, then the generation prompt and the answer prefix, as RULER does");
  niah->add_option("--heatmap", o->heatmap_path, "niah_single depth x length heatmap (SVG)");
  niah->add_option("--json", o->json_path, "Every result, the summary and the configuration");
  niah->add_option("--markdown", o->markdown_path,
                   "The accuracy table in Markdown (answer contained / exact match per cell)");
  return [o] { return run_eval_niah(*o); };
}

}  // namespace ls
