#pragma once
// `longserve bench serve`: a load generator that follows `vllm bench serve` (defaults, arrival
// process, metrics, summary table and result JSON keys), so numbers compare with vLLM's.
//
// Requests come from the random dataset (exact input/output lengths, ignore_eos forced), sent as
// text prompts encoded with the model's tokenizer (--tokenizer DIR, or --model when it is a
// directory). Each is a streaming POST to /v1/completions (backend "openai") or
// /v1/chat/completions ("openai-chat") with stream_options.include_usage. Arrivals: all at once
// for --request-rate inf, otherwise gamma gaps (shape = burstiness, scale = 1 / (rate *
// burstiness); burstiness 1 is Poisson), rescaled so the last request leaves at N / rate.
// --max-concurrency caps requests in flight.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace CLI {
class App;
}

namespace ls {

struct BenchServeOptions {
  // Connection.
  std::string backend = "openai";  // "openai" (completions) or "openai-chat"
  std::string base_url;            // "http://host:port"; overrides host and port
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint;           // default: /v1/completions or /v1/chat/completions by backend
  std::string model;              // the "model" field; empty: the first entry of GET /v1/models
  std::string served_model_name;  // overrides the "model" field (vLLM's --served-model-name)
  std::string tokenizer;          // tokenizer directory; empty: --model when it is a directory
  // Dataset.
  std::string dataset_name = "random";
  int32_t num_prompts = 1000;
  int32_t random_input_len = 1024;
  int32_t random_output_len = 128;
  double random_range_ratio = 0.0;
  int32_t random_prefix_len = 0;
  uint64_t seed = 0;
  // Turns per conversation (multi_turn.h); 0 or 1: independent requests. With T >= 2,
  // --num-prompts counts conversations and --max-concurrency conversations in flight.
  int32_t multi_turn = 0;
  // Traffic.
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int32_t max_concurrency = 0;  // 0: unlimited
  double temperature = 0.0;
  // Metrics and results.
  std::vector<std::string> goodput;  // "ttft:MS", "tpot:MS", "e2el:MS"
  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  bool save_result = false;
  bool save_detailed = false;
  std::string result_dir;
  std::string result_filename;
  std::string label;                  // default: the backend
  std::vector<std::string> metadata;  // "key=value" pairs copied into the results
  bool disable_tqdm = false;
  bool skip_initial_test = false;
  double request_timeout_s = 6 * 3600.0;
};

// Runs the benchmark: progress on stderr, vLLM's summary table on `out`, the result JSON file
// when save_result. Returns the results (run information + benchmark result; the per-request
// arrays only with save_detailed).
Result<nlohmann::ordered_json> run_bench_serve(const BenchServeOptions& options,
                                               std::FILE* out = stdout);

// run_bench_serve for a command line: prints the error and returns the exit code (0 or 1).
int run_bench_serve_command(const BenchServeOptions& options);

// Adds the `serve` subcommand, with vLLM's flag names, to `bench_app` (the `bench` command) and
// returns the function that runs it once CLI11 has parsed the arguments (an exit code), like
// the other longserve commands' CommandRunner.
std::function<int()> add_bench_serve_command(CLI::App& bench_app);

}  // namespace ls
