// `longserve bench serve` flags, spelled as `vllm bench serve` spells them.
#include <CLI/CLI.hpp>

#include <memory>

#include "tools/bench_serve/bench_serve.h"

namespace ls {

std::function<int()> add_bench_serve_command(CLI::App& bench_app) {
  auto o = std::make_shared<BenchServeOptions>();
  auto rate_text = std::make_shared<std::string>("inf");
  CLI::App* sub = bench_app.add_subcommand(
      "serve", "Load-test an OpenAI-compatible server the way `vllm bench serve` does");
  sub->add_option("--backend", o->backend, "openai (/v1/completions) or openai-chat")
      ->capture_default_str();
  sub->add_option("--base-url", o->base_url, "Server URL, e.g. http://127.0.0.1:8000");
  sub->add_option("--host", o->host, "Server host")->capture_default_str();
  sub->add_option("--port", o->port, "Server port")->capture_default_str();
  sub->add_option("--endpoint", o->endpoint, "API path (default by backend)");
  sub->add_option("--model", o->model,
                  "Model name for requests (default: the server's first model); a directory also "
                  "serves as --tokenizer");
  sub->add_option("--served-model-name", o->served_model_name,
                  "The model name sent in requests, when it differs from --model");
  sub->add_option("--tokenizer", o->tokenizer, "Directory with the model's tokenizer.json");
  sub->add_option("--dataset-name", o->dataset_name, "Dataset (random)")->capture_default_str();
  sub->add_option("--num-prompts", o->num_prompts, "Number of requests")->capture_default_str();
  sub->add_option("--random-input-len", o->random_input_len, "Input tokens per request")
      ->capture_default_str();
  sub->add_option("--random-output-len", o->random_output_len, "Output tokens per request")
      ->capture_default_str();
  sub->add_option("--random-range-ratio", o->random_range_ratio,
                  "Lengths uniform in [L(1-r), L(1+r)]")
      ->capture_default_str();
  sub->add_option("--random-prefix-len", o->random_prefix_len, "Shared prefix tokens")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_option("--multi-turn", o->multi_turn,
                  "Turns per conversation: each turn re-sends the history (earlier questions "
                  "and answers) plus a new --random-input-len question; --num-prompts counts "
                  "conversations. 0/1: independent requests")
      ->capture_default_str();
  sub->add_option("--request-rate", *rate_text, "Requests per second, or inf (all at once)")
      ->capture_default_str();
  sub->add_option("--burstiness", o->burstiness, "Gamma shape of the arrivals (1 = Poisson)")
      ->capture_default_str();
  sub->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most");
  sub->add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str();
  sub->add_option("--goodput", o->goodput, "SLOs in ms: ttft:MS tpot:MS e2el:MS");
  sub->add_option("--percentile-metrics", o->percentile_metrics,
                  "Metrics to report percentiles of (ttft,tpot,itl,e2el)")
      ->capture_default_str();
  sub->add_option("--metric-percentiles", o->metric_percentiles,
                  "Percentiles to report, e.g. 25,50,99")
      ->capture_default_str();
  sub->add_flag("--save-result", o->save_result, "Write the results JSON");
  sub->add_flag("--save-detailed", o->save_detailed,
                "Also write per-request arrays (implies --save-result)");
  sub->add_option("--result-dir", o->result_dir, "Folder for the results JSON");
  sub->add_option("--result-filename", o->result_filename, "File name for the results JSON");
  sub->add_option("--label", o->label, "Label used in the result file name");
  sub->add_option("--metadata", o->metadata, "KEY=VALUE pairs copied into the results");
  sub->add_flag("--disable-tqdm", o->disable_tqdm, "No progress bar");
  sub->add_flag("--skip-initial-test", o->skip_initial_test,
                "Do not send the initial single test request");
  sub->add_option("--request-timeout", o->request_timeout_s, "Seconds a request may take")
      ->capture_default_str();
  sub->callback([o, rate_text] {
    if (*rate_text == "inf" || *rate_text == "Inf" || *rate_text == "INF") {
      o->request_rate = std::numeric_limits<double>::infinity();
      return;
    }
    try {
      size_t used = 0;
      o->request_rate = std::stod(*rate_text, &used);
      if (used != rate_text->size()) throw std::invalid_argument(*rate_text);
    } catch (const std::exception&) {
      throw CLI::ValidationError("--request-rate", "expects a number or inf, got " + *rate_text);
    }
  });
  return [o] { return run_bench_serve_command(*o); };
}

}  // namespace ls
