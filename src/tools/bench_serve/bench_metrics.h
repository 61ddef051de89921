#pragma once
// vLLM's `bench serve` aggregates (calculate_metrics) and its outputs: the summary table and
// the result keys. Latencies are in milliseconds in the results, as in vLLM:
//   {mean,median,std}_{ttft,tpot,itl,e2el}_ms and p{P}_{metric}_ms,
// std is the population standard deviation and percentiles interpolate linearly (numpy's
// defaults). TPOT = (latency - TTFT) / (output_tokens - 1), only for outputs longer than one
// token. A request is "good" when every SLO given (ttft, tpot, e2el in ms) holds.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tools/bench_serve/request_client.h"

namespace ls {

// "ttft:100 tpot:50" style SLOs → {"ttft": 100.0, ...} (milliseconds).
Result<std::map<std::string, double>> parse_goodput(const std::vector<std::string>& items);
// "ttft,tpot,itl" → names, checked against ttft, tpot, itl, e2el.
Result<std::vector<std::string>> parse_metric_names(const std::string& list);
// "99" or "50,90,99" → percentiles in (0, 100].
Result<std::vector<double>> parse_percentiles(const std::string& list);

// numpy.percentile(values, p) with linear interpolation; 0 for no values.
double percentile(std::vector<double> values, double p);

struct MetricsConfig {
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> percentiles = {99.0};
  std::map<std::string, double> goodput_slo_ms;  // empty: no goodput
};

// The benchmark_result part of vLLM's results (totals, throughputs, latency statistics, and the
// per-request arrays input_lens, output_lens, ttfts, itls, generated_texts, errors), in vLLM's
// key order. `outcomes` are per request, in dataset order.
nlohmann::ordered_json compute_benchmark_result(const std::vector<RequestOutcome>& outcomes,
                                                double duration_s, const MetricsConfig& config);

// vLLM's summary table, from a result made by compute_benchmark_result.
std::string format_summary(const nlohmann::ordered_json& result, const MetricsConfig& config,
                           int32_t max_concurrency, double request_rate);

// "P99" / "P99.9" as vLLM names a percentile ("99", "99.9").
std::string percentile_word(double p);

}  // namespace ls
