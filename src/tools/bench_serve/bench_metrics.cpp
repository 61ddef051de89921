#include "tools/bench_serve/bench_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>
#include <vector>

namespace ls {

using Json = nlohmann::ordered_json;

namespace {

const std::vector<std::string> kLatencyMetrics = {"ttft", "tpot", "itl", "e2el"};

Result<double> parse_number(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(value)) throw std::invalid_argument(text);
    return value;
  } catch (const std::exception&) {
    return invalid_argument("{}: '{}' is not a number", what, text);
  }
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, sep)) {
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double population_std(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = mean(v);
  double sum = 0.0;
  for (double x : v) sum += (x - m) * (x - m);
  return std::sqrt(sum / static_cast<double>(v.size()));
}

}  // namespace

Result<std::map<std::string, double>> parse_goodput(const std::vector<std::string>& items) {
  std::map<std::string, double> slos;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return invalid_argument(
          "Invalid format found for service level objectives. Specify service level objectives "
          "for goodput as \"KEY:VALUE\" pairs, where the key is a metric name, and the value is "
          "a number in milliseconds; got '{}'",
          item);
    }
    const std::string name = item.substr(0, colon);
    if (name != "ttft" && name != "tpot" && name != "e2el") {
      return invalid_argument(
          "Invalid metric name found, {}. The service level objective name should be one of "
          "ttft, tpot, e2el.",
          item);
    }
    LS_ASSIGN_OR_RETURN(const double value, parse_number(item.substr(colon + 1), "--goodput"));
    if (value < 0) {
      return invalid_argument(
          "Invalid value found, {}. The service level objective value should be non-negative.",
          item);
    }
    slos[name] = value;
  }
  return slos;
}

Result<std::vector<std::string>> parse_metric_names(const std::string& list) {
  std::vector<std::string> names = split(list, ',');
  for (const std::string& name : names) {
    if (std::find(kLatencyMetrics.begin(), kLatencyMetrics.end(), name) == kLatencyMetrics.end()) {
      return invalid_argument("--percentile-metrics: '{}' is not one of ttft, tpot, itl, e2el",
                              name);
    }
  }
  return names;
}

Result<std::vector<double>> parse_percentiles(const std::string& list) {
  std::vector<double> percentiles;
  for (const std::string& item : split(list, ',')) {
    LS_ASSIGN_OR_RETURN(const double p, parse_number(item, "--metric-percentiles"));
    if (p <= 0.0 || p > 100.0) {
      return invalid_argument("--metric-percentiles: {} is not in (0, 100]", p);
    }
    percentiles.push_back(p);
  }
  return percentiles;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return values[lower] + (values[upper] - values[lower]) * fraction;
}

std::string percentile_word(double p) {
  if (std::floor(p) == p) return fmt::format("{}", static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

Json compute_benchmark_result(const std::vector<RequestOutcome>& outcomes, double duration_s,
                              const MetricsConfig& config) {
  int64_t completed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  std::vector<int64_t> output_lens;                          // [num_requests]; 0 for failures
  std::vector<double> ttfts, tpots, all_tpots, itls, e2els;  // seconds, successful requests
  for (const RequestOutcome& out : outcomes) {
    if (!out.success) {
      output_lens.push_back(0);
      continue;
    }
    // Without a usage message, one stream message per token is what the server promises.
    const int64_t output_len =
        out.output_tokens > 0 ? out.output_tokens : static_cast<int64_t>(out.itl_s.size()) + 1;
    output_lens.push_back(output_len);
    total_input += out.prompt_len;
    total_output += output_len;
    double tpot = 0.0;
    if (output_len > 1) {
      tpot = (out.latency_s - out.ttft_s) / static_cast<double>(output_len - 1);
      tpots.push_back(tpot);
    }
    all_tpots.push_back(tpot);
    itls.insert(itls.end(), out.itl_s.begin(), out.itl_s.end());
    ttfts.push_back(out.ttft_s);
    e2els.push_back(out.latency_s);
    ++completed;
  }

  int64_t good = 0;
  if (!config.goodput_slo_ms.empty()) {
    for (size_t i = 0; i < ttfts.size(); ++i) {
      bool is_good = true;
      for (const auto& [name, slo_ms] : config.goodput_slo_ms) {
        const double value_s = name == "ttft" ? ttfts[i] : name == "tpot" ? all_tpots[i] : e2els[i];
        is_good = is_good && value_s <= slo_ms / 1000.0;
      }
      good += is_good;
    }
  }

  // Peak output tokens per second and peak concurrency, over 1-second buckets from the first
  // successful request's start.
  double max_tokens_per_s = 0.0;
  int64_t max_concurrent = 0;
  double min_start = std::numeric_limits<double>::infinity();
  double max_end = -std::numeric_limits<double>::infinity();
  for (const RequestOutcome& out : outcomes) {
    if (!out.success) continue;
    min_start = std::min(min_start, out.start_s);
    max_end = std::max(max_end, out.start_s + out.latency_s);
  }
  if (completed > 0) {
    const auto num_buckets = static_cast<size_t>(std::ceil(max_end - min_start)) + 1;
    std::vector<double> tokens_per_s(num_buckets, 0.0);
    std::vector<int64_t> concurrent(num_buckets, 0);
    for (const RequestOutcome& out : outcomes) {
      if (!out.success) continue;
      double t = out.start_s + out.ttft_s;
      auto add_token = [&](double time) {
        const double offset = time - min_start;
        if (offset >= 0 && offset < static_cast<double>(num_buckets)) {
          tokens_per_s[static_cast<size_t>(offset)] += 1.0;
        }
      };
      add_token(t);
      for (double gap : out.itl_s) add_token(t += gap);
      const auto first = static_cast<size_t>(out.start_s - min_start);
      const auto last =
          std::min(static_cast<size_t>(out.start_s + out.latency_s - min_start), num_buckets - 1);
      for (size_t s = first; s <= last; ++s) ++concurrent[s];
    }
    max_tokens_per_s = *std::max_element(tokens_per_s.begin(), tokens_per_s.end());
    max_concurrent = *std::max_element(concurrent.begin(), concurrent.end());
  }

  const double duration = duration_s > 0 ? duration_s : 1e-9;
  Json result;
  result["duration"] = duration_s;
  result["completed"] = completed;
  result["failed"] = static_cast<int64_t>(outcomes.size()) - completed;
  result["total_input_tokens"] = total_input;
  result["total_output_tokens"] = total_output;
  result["request_throughput"] = static_cast<double>(completed) / duration;
  result["request_goodput"] =
      config.goodput_slo_ms.empty() ? Json(nullptr) : Json(static_cast<double>(good) / duration);
  result["output_throughput"] = static_cast<double>(total_output) / duration;
  result["total_token_throughput"] = static_cast<double>(total_input + total_output) / duration;
  // No audio datasets here: the real-time factor (audio seconds / duration) is 0, as vLLM
  // reports it for text.
  result["rtfx"] = 0.0;
  Json input_lens = Json::array(), ttft_list = Json::array(), itl_list = Json::array(),
       texts = Json::array(), errors = Json::array(), latencies = Json::array(),
       start_times = Json::array(), queue_times = Json::array();
  double first_dispatch = std::numeric_limits<double>::infinity();
  for (const RequestOutcome& out : outcomes) first_dispatch = std::min(first_dispatch, out.dispatch_s);
  std::vector<double> client_queue, e2el_with_queue;  // seconds, successful requests
  for (const RequestOutcome& out : outcomes) {
    input_lens.push_back(out.prompt_len);
    ttft_list.push_back(out.ttft_s);
    itl_list.push_back(out.itl_s);
    texts.push_back(out.generated_text);
    errors.push_back(out.error);
    latencies.push_back(out.latency_s);
    // Send times from the first request's due time; the time each waited for a sender.
    start_times.push_back(out.start_s - first_dispatch);
    const double queued = std::max(0.0, out.start_s - out.dispatch_s);
    queue_times.push_back(queued);
    if (out.success) {
      client_queue.push_back(queued);
      e2el_with_queue.push_back(queued + out.latency_s);
    }
  }
  result["latencies"] = std::move(latencies);
  result["start_times"] = std::move(start_times);
  result["queue_times"] = std::move(queue_times);
  for (const auto& [name, values] :
       {std::pair<const char*, const std::vector<double>*>{"client_queue_time", &client_queue},
        {"e2el_including_client_queue", &e2el_with_queue}}) {
    result[fmt::format("mean_{}_ms", name)] = mean(*values) * 1000.0;
    result[fmt::format("median_{}_ms", name)] = percentile(*values, 50.0) * 1000.0;
    result[fmt::format("std_{}_ms", name)] = population_std(*values) * 1000.0;
    for (double p : config.percentiles) {
      result[fmt::format("p{}_{}_ms", percentile_word(p), name)] =
          percentile(*values, p) * 1000.0;
    }
  }
  result["input_lens"] = std::move(input_lens);
  result["output_lens"] = output_lens;
  result["ttfts"] = std::move(ttft_list);
  result["itls"] = std::move(itl_list);
  result["generated_texts"] = std::move(texts);
  result["errors"] = std::move(errors);
  result["max_output_tokens_per_s"] = max_tokens_per_s;
  result["max_concurrent_requests"] = max_concurrent;

  for (const std::string& metric : config.percentile_metrics) {
    const std::vector<double>& values = metric == "ttft"   ? ttfts
                                        : metric == "tpot" ? tpots
                                        : metric == "itl"  ? itls
                                                           : e2els;
    result[fmt::format("mean_{}_ms", metric)] = mean(values) * 1000.0;
    result[fmt::format("median_{}_ms", metric)] = percentile(values, 50.0) * 1000.0;
    result[fmt::format("std_{}_ms", metric)] = population_std(values) * 1000.0;
    for (double p : config.percentiles) {
      result[fmt::format("p{}_{}_ms", percentile_word(p), metric)] = percentile(values, p) * 1000.0;
    }
  }
  return result;
}

namespace {

// A result field, or null when absent (format_summary must not fail on a partial result).
Json field(const Json& result, const std::string& key) {
  const auto it = result.find(key);
  return it == result.end() ? Json() : *it;
}

}  // namespace

std::string format_summary(const Json& result, const MetricsConfig& config, int32_t max_concurrency,
                           double request_rate) {
  std::string out;
  auto line = [&](const std::string& label, const std::string& value) {
    out += fmt::format("{:<40} {:<10}\n", label, value);
  };
  auto num = [](const Json& value) {
    return fmt::format("{:.2f}", value.is_number() ? value.get<double>() : 0.0);
  };
  out += fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  line("Successful requests:", field(result, "completed").dump());
  line("Failed requests:", field(result, "failed").dump());
  if (max_concurrency > 0) line("Maximum request concurrency:", std::to_string(max_concurrency));
  if (std::isfinite(request_rate))
    line("Request rate configured (RPS):", fmt::format("{:.2f}", request_rate));
  line("Benchmark duration (s):", num(field(result, "duration")));
  line("Total input tokens:", field(result, "total_input_tokens").dump());
  line("Total generated tokens:", field(result, "total_output_tokens").dump());
  line("Request throughput (req/s):", num(field(result, "request_throughput")));
  if (!config.goodput_slo_ms.empty())
    line("Request goodput (req/s):", num(field(result, "request_goodput")));
  line("Output token throughput (tok/s):", num(field(result, "output_throughput")));
  line("Peak output token throughput (tok/s):", num(field(result, "max_output_tokens_per_s")));
  line("Peak concurrent requests:", num(field(result, "max_concurrent_requests")));
  line("Total Token throughput (tok/s):", num(field(result, "total_token_throughput")));
  struct Section {
    const char* key;
    const char* name;
    const char* header;
  };
  const Section sections[] = {{"ttft", "TTFT", "Time to First Token"},
                              {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
                              {"itl", "ITL", "Inter-token Latency"},
                              {"e2el", "E2EL", "End-to-end Latency"}};
  for (const Section& s : sections) {
    const auto& selected = config.percentile_metrics;
    if (std::find(selected.begin(), selected.end(), s.key) == selected.end()) continue;
    out += fmt::format("{:-^50}\n", s.header);
    line(fmt::format("Mean {} (ms):", s.name),
         num(field(result, fmt::format("mean_{}_ms", s.key))));
    line(fmt::format("Median {} (ms):", s.name),
         num(field(result, fmt::format("median_{}_ms", s.key))));
    for (double p : config.percentiles) {
      const std::string word = percentile_word(p);
      line(fmt::format("P{} {} (ms):", word, s.name),
           num(field(result, fmt::format("p{}_{}_ms", word, s.key))));
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

}  // namespace ls
