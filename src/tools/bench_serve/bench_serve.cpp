#include "tools/bench_serve/bench_serve.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "core/clock.h"
#include "tokenizer/tokenizer.h"
#include "tools/bench_serve/bench_metrics.h"
#include "tools/bench_serve/dispatch.h"
#include "tools/bench_serve/multi_turn.h"
#include "tools/bench_serve/progress_bar.h"
#include "tools/bench_serve/random_dataset.h"
#include "tools/bench_serve/request_client.h"

namespace ls {

using Json = nlohmann::ordered_json;

namespace {

// A pool this large covers any realistic burst; with more prompts and no --max-concurrency the
// excess waits for a free sender.
constexpr int32_t kMaxSenders = 4096;

// Python's str(float): "inf", "10.0", "2.5".
std::string python_float(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

std::string local_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// Send times relative to the start, in seconds: gamma gaps (shape = burstiness,
// scale = 1 / (rate * burstiness)), cumulated, then rescaled so the last lands at N / rate.
std::vector<double> arrival_offsets(int32_t num_requests, double rate, double burstiness,
                                    uint64_t seed) {
  std::vector<double> offsets(static_cast<size_t>(num_requests), 0.0);
  if (std::isinf(rate)) return offsets;
  std::mt19937_64 rng(seed ^ 0x9E3779B97F4A7C15ull);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double total = 0.0;
  for (double& offset : offsets) offset = (total += gap(rng));
  if (total > 0) {
    const double scale = static_cast<double>(num_requests) / rate / total;
    for (double& offset : offsets) offset *= scale;
  }
  return offsets;
}

// The first model id the server lists.
Result<std::string> first_served_model(const std::string& base_url, const std::string& api_key) {
  httplib::Client client(base_url);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(30, 0);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  const httplib::Result res = client.Get("/v1/models", headers);
  if (!res)
    return io_error("GET {}/v1/models failed: {}", base_url, httplib::to_string(res.error()));
  if (res->status != 200) return io_error("GET {}/v1/models: HTTP {}", base_url, res->status);
  const Json body = Json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("data") && body["data"].is_array() &&
      !body["data"].empty() && body["data"][0].contains("id") &&
      body["data"][0]["id"].is_string()) {
    return body["data"][0]["id"].get<std::string>();
  }
  return data_loss("GET {}/v1/models returned no model", base_url);
}

Status validate(const BenchServeOptions& o) {
  if (o.backend != "openai" && o.backend != "openai-chat") {
    return invalid_argument("--backend must be openai or openai-chat, got '{}'", o.backend);
  }
  if (o.dataset_name != "random") {
    return unimplemented("--dataset-name {}: only the random dataset is implemented",
                         o.dataset_name);
  }
  if (!(o.request_rate > 0)) {
    return invalid_argument("--request-rate must be positive (or inf), got {}", o.request_rate);
  }
  if (!(o.burstiness > 0) || std::isinf(o.burstiness)) {
    return invalid_argument("--burstiness must be a positive number, got {}", o.burstiness);
  }
  if (o.max_concurrency < 0) {
    return invalid_argument("--max-concurrency must be positive, got {}", o.max_concurrency);
  }
  if (!(o.request_timeout_s > 0)) return invalid_argument("the request timeout must be positive");
  if (o.multi_turn < 0) {
    return invalid_argument("--multi-turn must be 0 (off) or a number of turns, got {}",
                            o.multi_turn);
  }
  return Status::ok_status();
}

// Sends every request at its offset from one dispatcher thread through a pool of senders; the
// pool size is the concurrency cap. Returns the outcomes in dataset order and the duration.
std::pair<std::vector<RequestOutcome>, double> run_traffic(const Endpoint& endpoint,
                                                           const std::vector<RequestSpec>& specs,
                                                           const std::vector<double>& offsets,
                                                           int32_t num_senders,
                                                           ProgressBar& progress) {
  std::vector<RequestOutcome> outcomes(specs.size());
  const double duration =
      dispatch_on_schedule(offsets, num_senders, [&](size_t index, double due_s) {
        outcomes[index] = send_streaming_request(endpoint, specs[index]);
        outcomes[index].dispatch_s = due_s;
        progress.advance();
      });
  return {std::move(outcomes), duration};
}

// The tokenizer a longserve server serves on GET /tokenizer_info ("tokenizer_json" plus the
// tokenizer_config.json fields).
Result<std::unique_ptr<Tokenizer>> tokenizer_from_server(const std::string& base_url,
                                                         const std::string& api_key) {
  httplib::Client client(base_url);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(60, 0);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  const httplib::Result res = client.Get("/tokenizer_info", headers);
  if (!res) {
    return io_error("no --tokenizer given and GET {}/tokenizer_info failed: {}", base_url,
                    httplib::to_string(res.error()));
  }
  if (res->status != 200) {
    return io_error("no --tokenizer given and GET {}/tokenizer_info: HTTP {}", base_url,
                    res->status);
  }
  Json info = Json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (!info.is_object() || !info.contains("tokenizer_json") || !info["tokenizer_json"].is_object()) {
    return data_loss(
        "{}/tokenizer_info has no tokenizer_json (not a longserve server?): pass --tokenizer DIR",
        base_url);
  }
  const std::string tokenizer_json = info["tokenizer_json"].dump();
  info.erase("tokenizer_json");
  return Tokenizer::from_json(tokenizer_json, info.dump());
}

}  // namespace

Result<Json> run_bench_serve(const BenchServeOptions& o, std::FILE* out) {
  LS_RETURN_IF_ERROR(validate(o));
  MetricsConfig metrics_config;
  LS_ASSIGN_OR_RETURN(metrics_config.percentile_metrics, parse_metric_names(o.percentile_metrics));
  LS_ASSIGN_OR_RETURN(metrics_config.percentiles, parse_percentiles(o.metric_percentiles));
  LS_ASSIGN_OR_RETURN(metrics_config.goodput_slo_ms, parse_goodput(o.goodput));

  Endpoint endpoint;
  endpoint.chat = o.backend == "openai-chat";
  endpoint.base_url = o.base_url.empty() ? fmt::format("http://{}:{}", o.host, o.port) : o.base_url;
  while (!endpoint.base_url.empty() && endpoint.base_url.back() == '/')
    endpoint.base_url.pop_back();
  endpoint.path = !o.endpoint.empty() ? o.endpoint
                  : endpoint.chat     ? "/v1/chat/completions"
                                      : "/v1/completions";
  if (const char* key = std::getenv("OPENAI_API_KEY")) endpoint.api_key = key;
  endpoint.timeout_s = o.request_timeout_s;

  std::string tokenizer_dir = o.tokenizer;
  if (tokenizer_dir.empty() && !o.model.empty() && std::filesystem::is_directory(o.model)) {
    tokenizer_dir = o.model;
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (tokenizer_dir.empty()) {
    // The server's own tokenizer (GET /tokenizer_info carries tokenizer.json).
    LS_ASSIGN_OR_RETURN(tokenizer, tokenizer_from_server(endpoint.base_url, endpoint.api_key));
    tokenizer_dir = endpoint.base_url + "/tokenizer_info";
  } else {
    LS_ASSIGN_OR_RETURN(tokenizer, Tokenizer::load(tokenizer_dir));
  }

  std::string model_id = o.model;
  if (model_id.empty()) {
    LS_ASSIGN_OR_RETURN(model_id, first_served_model(endpoint.base_url, endpoint.api_key));
  }
  const std::string model_name = o.served_model_name.empty() ? model_id : o.served_model_name;

  RandomDatasetOptions dataset;
  dataset.num_prompts = o.num_prompts;
  dataset.input_len = o.random_input_len;
  dataset.output_len = o.random_output_len;
  dataset.range_ratio = o.random_range_ratio;
  dataset.prefix_len = o.random_prefix_len;
  dataset.seed = o.seed;
  LS_ASSIGN_OR_RETURN(std::vector<BenchRequest> requests,
                      sample_random_requests(*tokenizer, dataset));
  std::vector<RequestSpec> specs;
  specs.reserve(requests.size());
  for (BenchRequest& request : requests) {
    // The random dataset always sets ignore_eos, so output lengths are exact.
    specs.push_back(RequestSpec{model_name, std::move(request.prompt), request.prompt_len,
                                request.expected_output_len, /*ignore_eos=*/true, o.temperature});
  }

  // Conversations (--multi-turn T >= 2): the requests above are their first turns; every later
  // turn asks a new question without the shared prefix (the history carries it).
  const int32_t num_turns = std::max(1, o.multi_turn);
  std::vector<Conversation> conversations;
  if (num_turns > 1) {
    RandomDatasetOptions questions = dataset;
    questions.num_prompts = o.num_prompts * (num_turns - 1);
    questions.prefix_len = 0;
    questions.seed = o.seed + 1;
    LS_ASSIGN_OR_RETURN(std::vector<BenchRequest> asked,
                        sample_random_requests(*tokenizer, questions));
    for (size_t c = 0; c < specs.size(); ++c) {
      Conversation conv;
      conv.first = specs[c];
      for (int32_t k = 1; k < num_turns; ++k) {
        BenchRequest& q = asked[c * static_cast<size_t>(num_turns - 1) + static_cast<size_t>(k - 1)];
        conv.questions.push_back(RequestSpec{model_name, std::move(q.prompt), q.prompt_len,
                                             q.expected_output_len, true, o.temperature});
      }
      conversations.push_back(std::move(conv));
    }
  }

  if (!o.skip_initial_test) {
    fmt::print(out, "Starting initial single prompt test run...\n");
    const RequestOutcome test = send_streaming_request(endpoint, specs.front());
    if (!test.success) {
      return failed_precondition(
          "Initial test run failed - Please make sure benchmark arguments are correctly "
          "specified. Error: {}",
          test.error);
    }
    fmt::print(out, "Initial test run completed. Starting main benchmark run...\n");
  }
  fmt::print(out, "Traffic request rate: {}\n", python_float(o.request_rate));
  fmt::print(out, "Burstiness factor: {} ({})\n", python_float(o.burstiness),
             o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  fmt::print(out, "Maximum request concurrency: {}\n",
             o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : std::string("None"));
  std::fflush(out);

  const std::vector<double> offsets =
      arrival_offsets(o.num_prompts, o.request_rate, o.burstiness, o.seed);
  const int32_t num_senders = std::min(
      {o.num_prompts, o.max_concurrency > 0 ? o.max_concurrency : o.num_prompts, kMaxSenders});
  ProgressBar progress(int64_t{o.num_prompts} * num_turns, !o.disable_tqdm);
  auto [outcomes, duration_s] =
      num_turns > 1
          ? run_conversations(endpoint, conversations, offsets, num_senders, progress)
          : run_traffic(endpoint, specs, offsets, num_senders, progress);
  progress.finish();

  const Json benchmark = compute_benchmark_result(outcomes, duration_s, metrics_config);
  fmt::print(out, "{}",
             format_summary(benchmark, metrics_config, o.max_concurrency, o.request_rate));
  Json multi_turn;
  if (num_turns > 1) {
    multi_turn = multi_turn_result(outcomes, num_turns);
    fmt::print(out, "{}", format_multi_turn(multi_turn));
  }
  std::fflush(out);

  const std::string label = o.label.empty() ? o.backend : o.label;
  const std::string date = local_timestamp();
  Json result;
  result["date"] = date;
  result["endpoint_type"] = o.backend;
  result["backend"] = o.backend;
  result["label"] = label;
  result["model_id"] = model_id;
  result["tokenizer_id"] = tokenizer_dir;
  result["num_prompts"] = o.num_prompts;
  if (num_turns > 1) result["multi_turn_turns"] = num_turns;
  for (const std::string& item : o.metadata) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return invalid_argument("--metadata expects KEY=VALUE, got '{}'", item);
    }
    result[item.substr(0, eq)] = item.substr(eq + 1);
  }
  result["request_rate"] = std::isinf(o.request_rate) ? Json("inf") : Json(o.request_rate);
  result["burstiness"] = o.burstiness;
  result["max_concurrency"] = o.max_concurrency > 0 ? Json(o.max_concurrency) : Json(nullptr);
  for (const auto& [key, value] : benchmark.items()) {
    const bool detailed = key == "input_lens" || key == "output_lens" || key == "ttfts" ||
                          key == "itls" || key == "generated_texts" || key == "errors" ||
                          key == "latencies" || key == "start_times" || key == "queue_times";
    // The client-queue statistics only mean something under a concurrency cap.
    if (key.find("client_queue") != std::string::npos && o.max_concurrency <= 0) continue;
    if (!detailed || o.save_detailed) result[key] = value;
  }
  if (num_turns > 1) result["multi_turn"] = multi_turn;

  if (o.save_result || o.save_detailed) {
    std::string base_model_id = model_id;
    if (const size_t slash = base_model_id.find_last_of('/'); slash != std::string::npos) {
      base_model_id = base_model_id.substr(slash + 1);
    }
    std::string file_name =
        !o.result_filename.empty()
            ? o.result_filename
            : fmt::format("{}-{}qps{}-{}-{}.json", label, python_float(o.request_rate),
                          o.max_concurrency > 0 ? fmt::format("-concurrency{}", o.max_concurrency)
                                                : std::string(),
                          base_model_id, date);
    std::filesystem::path path = file_name;
    if (!o.result_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o.result_dir, ec);
      path = std::filesystem::path(o.result_dir) / file_name;
    }
    std::ofstream file(path);
    if (!file) return io_error("cannot write {}", path.string());
    file << result.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    if (!file) return io_error("writing {} failed", path.string());
  }
  return result;
}

int run_bench_serve_command(const BenchServeOptions& options) {
  Result<Json> result = run_bench_serve(options, stdout);
  if (!result.ok()) {
    fmt::print(stderr, "error: {}\n", result.status().message());
    return 1;
  }
  return 0;
}

}  // namespace ls
