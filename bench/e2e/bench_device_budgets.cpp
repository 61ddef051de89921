// Even vs elastic per-request device budgets (docs/device-cache-budgets.md) through EngineCore on
// the CPU backend: a burst mixing short and long requests (different working sets) served with
// --kv-offload on, lserve, at several buffer ratios. Per mode: the decode and prefill hit ratio of
// the device page cache, the pages copied from the host homes, the budget plans and the slots
// they moved, the wall time, and whether every request's tokens equal those of even budgets.
// Prints a markdown table. Example:
//   bench_device_budgets --model models/tiny-longctx --ratios 1,2,4
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/engine_core.h"

namespace ls {
namespace {

struct Options {
  std::string model = "models/tiny-longctx";
  std::vector<double> ratios = {1, 2, 4};
  int32_t requests = 12;
  int32_t short_prompt = 200;
  int32_t long_prompt = 3000;
  int32_t max_tokens = 48;
  int32_t max_num_seqs = 6;
  int32_t threads = 2;
  double cache_mb = 0;        // --device-kv-cache-bytes in MB (0: from the ratio)
  int32_t token_budget = 0;   // lserve's selected tokens per head (0: its default)
};

using Tokens = std::map<std::string, std::vector<int32_t>>;

struct Run {
  Tokens tokens;
  EngineStats stats;
  double seconds = 0;
};

Result<Run> serve(const Options& o, double ratio, const std::string& mode,
                  const std::vector<GenerateRequest>& reqs) {
  EngineConfig c;
  c.model_dir = o.model;
  c.num_threads = o.threads;
  c.max_num_seqs = o.max_num_seqs;
  c.max_model_len = o.long_prompt + o.max_tokens + 64;
  c.attention.policy = "lserve";
  c.kv_offload = true;
  c.offload_buffer_ratio = ratio;
  c.device_cache_budget = mode;
  c.device_kv_cache_bytes = static_cast<int64_t>(o.cache_mb * 1e6);
  if (o.token_budget > 0) c.attention.token_budget = o.token_budget;
  LS_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::create(c));
  Run run;
  for (const GenerateRequest& r : reqs) {
    const std::string id = r.request_id;
    Tokens* t = &run.tokens;
    LS_RETURN_IF_ERROR(core->add_request(r, [t, id](const RequestOutput& out) {
      auto& v = (*t)[id];
      v.insert(v.end(), out.token_ids.begin(), out.token_ids.end());
    }));
  }
  const double t0 = now_seconds();
  while (core->has_work()) LS_RETURN_IF_ERROR(core->step());
  run.seconds = now_seconds() - t0;
  run.stats = core->stats();
  return run;
}

int main_impl(int argc, char** argv) {
  Options o;
  CLI::App app("Even vs elastic per-request device budgets of the host KV tier (CPU backend)");
  app.add_option("--model", o.model)->capture_default_str();
  app.add_option("--ratios", o.ratios, "--offload-buffer-ratio values")->delimiter(',');
  app.add_option("--requests", o.requests)->capture_default_str();
  app.add_option("--short-prompt", o.short_prompt)->capture_default_str();
  app.add_option("--long-prompt", o.long_prompt)->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens)->capture_default_str();
  app.add_option("--max-num-seqs", o.max_num_seqs)->capture_default_str();
  app.add_option("--threads", o.threads)->capture_default_str();
  app.add_option("--cache-mb", o.cache_mb, "Device page cache in MB (0: from each ratio)")
      ->capture_default_str();
  app.add_option("--token-budget", o.token_budget, "lserve tokens selected per head (0: default)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // Alternating short and long prompts of repeated random phrases (a trained model's attention
  // returns to earlier occurrences, so its selections have locality).
  std::mt19937 rng(1);
  std::vector<GenerateRequest> reqs;
  for (int32_t i = 0; i < o.requests; ++i) {
    GenerateRequest r;
    r.request_id = fmt::format("r{}", i);
    const int32_t len = i % 2 == 0 ? o.short_prompt : o.long_prompt;
    std::vector<int32_t> phrase(32);
    for (auto& t : phrase) t = 100 + static_cast<int32_t>(rng() % 3000);
    for (int32_t t = 0; t < len; ++t) {
      r.prompt_ids.push_back(rng() % 4 == 0 ? 100 + static_cast<int32_t>(rng() % 3000)
                                            : phrase[static_cast<size_t>(t) % phrase.size()]);
    }
    r.sampling.temperature = 0;
    r.stop.max_tokens = o.max_tokens;
    r.stop.eos_token_ids = {};
    reqs.push_back(std::move(r));
  }

  fmt::print("| ratio | budgets | hit ratio | pages copied | plans | slots moved | s | "
             "tokens = even |\n|---|---|---|---|---|---|---|---|\n");
  for (const double ratio : o.ratios) {
    Tokens even_tokens;
    for (const std::string mode : {"even", "elastic"}) {
      auto run = serve(o, ratio, mode, reqs);
      if (!run.ok()) {
        fmt::print(stderr, "ratio {} {}: {}\n", ratio, mode, run.status().to_string());
        return 1;
      }
      const EngineStats& s = run->stats;
      if (mode == std::string("even")) even_tokens = run->tokens;
      const double hits = static_cast<double>(s.kv_offload_hits_total);
      const double all = hits + static_cast<double>(s.kv_offload_misses_total);
      fmt::print("| {} | {} | {:.4f} | {} | {} | {} | {:.1f} | {} |\n", ratio, mode,
                 all > 0 ? hits / all : 0.0, s.kv_offload_misses_total, s.kv_budget_changes_total,
                 s.kv_budget_moved_pages_total, run->seconds,
                 run->tokens == even_tokens ? "yes" : "NO");
    }
  }
  return 0;
}

}  // namespace
}  // namespace ls

int main(int argc, char** argv) { return ls::main_impl(argc, argv); }
