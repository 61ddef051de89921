#include "server/server_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/openai_names.h"

namespace ls {

namespace {

// Bucket bounds exactly as vLLM's v1 PrometheusStatLogger declares them.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

const std::vector<std::string> kLabelNames = {"model_name", "engine"};

}  // namespace

ServerMetrics::ServerMetrics(std::string model_name, int32_t max_model_len)
    : labels_{std::move(model_name), "0"} {
  num_requests_running_ = &registry_
                               .gauge("vllm:num_requests_running",
                                      "Number of requests in model execution batches.", kLabelNames)
                               .with(labels_);
  num_requests_waiting_ = &registry_
                               .gauge("vllm:num_requests_waiting",
                                      "Number of requests waiting to be processed.", kLabelNames)
                               .with(labels_);
  kv_cache_usage_perc_ = &registry_
                              .gauge("vllm:kv_cache_usage_perc",
                                     "KV-cache usage. 1 means 100 percent usage.", kLabelNames)
                              .with(labels_);
  num_preemptions_total_ =
      &registry_
           .counter("vllm:num_preemptions_total",
                    "Cumulative number of preemption from the engine.", kLabelNames)
           .with(labels_);
  kv_offload_host_bytes_ =
      &registry_
           .gauge("longserve:kv_offload_host_bytes",
                  "Host KV pool of the retrieval heads' pages (--kv-offload on).", kLabelNames)
           .with(labels_);
  kv_offload_device_cache_bytes_ =
      &registry_
           .gauge("longserve:kv_offload_device_cache_bytes",
                  "Device page cache of the host KV tier (--kv-offload on).", kLabelNames)
           .with(labels_);
  host_pinned_bytes_ = &registry_
                            .gauge("longserve:host_pinned_bytes",
                                   "Page-locked host memory the backend holds.", kLabelNames)
                            .with(labels_);
  kv_offload_hits_total_ =
      &registry_
           .counter("longserve:kv_offload_hits_total",
                    "Pages attention read that were already in the device page cache.", kLabelNames)
           .with(labels_);
  kv_offload_misses_total_ =
      &registry_
           .counter("longserve:kv_offload_misses_total",
                    "Pages copied from the host KV pool into the device page cache.", kLabelNames)
           .with(labels_);
  kv_offload_h2d_bytes_total_ =
      &registry_
           .counter("longserve:kv_offload_h2d_bytes_total",
                    "Bytes those copies moved from host to device.", kLabelNames)
           .with(labels_);
  tp_retrieval_imbalance_ =
      &registry_
           .gauge("longserve:tp_retrieval_imbalance",
                  "Tensor parallelism: the most retrieval kv heads (summed over layers) a rank "
                  "holds over the mean (1 is even; 0 without tensor parallelism).",
                  kLabelNames)
           .with(labels_);
  const std::vector<std::string> rank_labels = {"model_name", "engine", "rank"};
  tp_rank_retrieval_kv_heads_ = &registry_.gauge(
      "longserve:tp_rank_retrieval_kv_heads",
      "Tensor parallelism: the rank's retrieval kv heads, summed over layers.", rank_labels);
  tp_rank_streaming_kv_heads_ = &registry_.gauge(
      "longserve:tp_rank_streaming_kv_heads",
      "Tensor parallelism: the rank's streaming kv heads, summed over layers.", rank_labels);
  tp_rank_kv_offload_host_bytes_ = &registry_.gauge(
      "longserve:tp_rank_kv_offload_host_bytes",
      "Tensor parallelism: the rank's host KV pool (--kv-offload on).", rank_labels);
  tp_rank_kv_offload_device_cache_bytes_ = &registry_.gauge(
      "longserve:tp_rank_kv_offload_device_cache_bytes",
      "Tensor parallelism: the rank's device page cache (--kv-offload on).", rank_labels);
  tp_rank_kv_offload_hits_total_ = &registry_.counter(
      "longserve:tp_rank_kv_offload_hits_total",
      "Tensor parallelism: pages the rank's attention found in its device page cache.",
      rank_labels);
  tp_rank_kv_offload_misses_total_ = &registry_.counter(
      "longserve:tp_rank_kv_offload_misses_total",
      "Tensor parallelism: pages the rank copied from its host KV pool.", rank_labels);
  tp_rank_kv_offload_h2d_bytes_total_ = &registry_.counter(
      "longserve:tp_rank_kv_offload_h2d_bytes_total",
      "Tensor parallelism: bytes the rank's copies moved from host to device.", rank_labels);
  kv_cache_bytes_per_token_ =
      &registry_
           .gauge("longserve:kv_cache_bytes_per_token",
                  "KV cache bytes one token of context takes (retrieval heads, all layers, K + V, "
                  "scales and key summaries included).",
                  kLabelNames)
           .with(labels_);
  kv_cache_dtype_info_ = &registry_.gauge(
      "longserve:kv_cache_dtype_info",
      "1 for the format of the KV cache pages (--kv-cache-dtype: f32, bf16, f16, fp8, int8, int4).",
      {"model_name", "engine", "kv_cache_dtype"});
  prompt_tokens_total_ =
      &registry_
           .counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", kLabelNames)
           .with(labels_);
  generation_tokens_total_ = &registry_
                                  .counter("vllm:generation_tokens_total",
                                           "Number of generation tokens processed.", kLabelNames)
                                  .with(labels_);
  request_success_total_ =
      &registry_.counter("vllm:request_success_total", "Count of successfully processed requests.",
                         {"model_name", "engine", "finished_reason"});
  // vLLM creates every finished reason up front so that rate() sees them from zero
  // ("repetition" never happens here: there is no repetition detection).
  for (const char* reason : {"stop", "length", "abort", "error", "repetition"}) {
    request_success_total_->with({labels_[0], labels_[1], reason});
  }
  auto latency = [&](const char* name, const char* help) {
    return &registry_.histogram(name, help, kLabelNames, kRequestLatencyBuckets).with(labels_);
  };
  request_queue_time_ = latency("vllm:request_queue_time_seconds",
                                "Histogram of time spent in WAITING phase for request.");
  request_inference_time_ = latency("vllm:request_inference_time_seconds",
                                    "Histogram of time spent in RUNNING phase for request.");
  request_prefill_time_ = latency("vllm:request_prefill_time_seconds",
                                  "Histogram of time spent in PREFILL phase for request.");
  request_decode_time_ = latency("vllm:request_decode_time_seconds",
                                 "Histogram of time spent in DECODE phase for request.");
  request_prefill_kv_computed_tokens_ =
      &registry_
           .histogram("vllm:request_prefill_kv_computed_tokens",
                      "Histogram of new KV tokens computed during prefill (excluding cached "
                      "tokens).",
                      kLabelNames, buckets_1_2_5(max_model_len))
           .with(labels_);
  request_params_n_ = &registry_
                           .histogram("vllm:request_params_n",
                                      "Histogram of the n request parameter.", kLabelNames,
                                      {1, 2, 5, 10, 20})
                           .with(labels_);
  request_params_max_tokens_ =
      &registry_
           .histogram("vllm:request_params_max_tokens",
                      "Histogram of the max_tokens request parameter.", kLabelNames,
                      buckets_1_2_5(max_model_len))
           .with(labels_);
  request_max_num_generation_tokens_ =
      &registry_
           .histogram("vllm:request_max_num_generation_tokens",
                      "Histogram of maximum number of requested generation tokens.", kLabelNames,
                      buckets_1_2_5(max_model_len))
           .with(labels_);
  std::vector<double> iteration_bounds(kIterationTokenBuckets.begin(),
                                       kIterationTokenBuckets.end());
  iteration_tokens_ = &registry_
                           .histogram("vllm:iteration_tokens_total",
                                      "Histogram of number of tokens per engine_step.",
                                      kLabelNames, std::move(iteration_bounds))
                           .with(labels_);
  auto& waiting_by_reason = registry_.gauge(
      "vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.",
      {"model_name", "engine", "reason"});
  waiting_capacity_ = &waiting_by_reason.with({labels_[0], labels_[1], "capacity"});
  waiting_deferred_ = &waiting_by_reason.with({labels_[0], labels_[1], "deferred"});
  request_prompt_tokens_ =
      &registry_
           .histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                      kLabelNames, buckets_1_2_5(max_model_len))
           .with(labels_);
  request_generation_tokens_ =
      &registry_
           .histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                      kLabelNames, buckets_1_2_5(max_model_len))
           .with(labels_);
  time_to_first_token_ =
      &registry_
           .histogram("vllm:time_to_first_token_seconds",
                      "Histogram of time to first token in seconds.", kLabelNames, kTtftBuckets)
           .with(labels_);
  inter_token_latency_ = &registry_
                              .histogram("vllm:inter_token_latency_seconds",
                                         "Histogram of inter-token latency in seconds.",
                                         kLabelNames, kTokenLatencyBuckets)
                              .with(labels_);
  request_time_per_output_token_ =
      &registry_
           .histogram("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.", kLabelNames,
                      kTokenLatencyBuckets)
           .with(labels_);
  request_num_preemptions_ =
      &registry_
           .histogram("vllm:request_num_preemptions", "Number of preemptions per request.",
                      kLabelNames, {0, 1, 2, 5, 10, 20, 50, 100})
           .with(labels_);
  prefix_cache_queries_total_ =
      &registry_
           .counter("vllm:prefix_cache_queries_total",
                    "Prefix cache queries, in terms of number of queried tokens.", kLabelNames)
           .with(labels_);
  prefix_cache_hits_total_ =
      &registry_
           .counter("vllm:prefix_cache_hits_total",
                    "Prefix cache hits, in terms of number of cached tokens.", kLabelNames)
           .with(labels_);
  prompt_tokens_cached_total_ =
      &registry_
           .counter("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens.",
                    kLabelNames)
           .with(labels_);
  shared_prefix_steps_total_ =
      &registry_
           .counter("longserve:shared_prefix_steps_total",
                    "Decode steps that attended a shared prefix once per group of sequences.",
                    kLabelNames)
           .with(labels_);
  shared_prefix_tokens_total_ =
      &registry_
           .counter("longserve:shared_prefix_tokens_total",
                    "Prefix tokens covered by shared-prefix attention, summed over the group "
                    "members of those steps.",
                    kLabelNames)
           .with(labels_);
  recomputed_tokens_total_ =
      &registry_
           .counter("longserve:recomputed_tokens_total",
                    "Tokens prefilled again because their request was preempted.", kLabelNames)
           .with(labels_);
  kv_working_set_pages_ =
      &registry_
           .gauge("longserve:kv_working_set_pages",
                  "Summed working sets of the running requests in head-pages (--kv-offload on).",
                  kLabelNames)
           .with(labels_);
  kv_device_cache_pages_ =
      &registry_
           .gauge("longserve:kv_device_cache_pages",
                  "Device page cache of the host KV tier in head-pages (--kv-offload on).",
                  kLabelNames)
           .with(labels_);
  kv_selection_overlap_ =
      &registry_
           .gauge("longserve:kv_selection_overlap",
                  "Share of a decode step's selected pages the same layer read one step earlier, "
                  "since start (--kv-offload on).",
                  kLabelNames)
           .with(labels_);
  auto budget_gauge = [&](const char* name, const char* which) {
    return &registry_
                .gauge(name,
                       fmt::format("{} device page cache partition of the running requests, in "
                                   "head-pages (--kv-offload on).",
                                   which),
                       kLabelNames)
                .with(labels_);
  };
  kv_budget_min_pages_ = budget_gauge("longserve:kv_device_budget_min_pages", "Smallest");
  kv_budget_median_pages_ = budget_gauge("longserve:kv_device_budget_median_pages", "Median");
  kv_budget_max_pages_ = budget_gauge("longserve:kv_device_budget_max_pages", "Largest");
  kv_budget_changes_total_ =
      &registry_
           .counter("longserve:kv_device_budget_changes_total",
                    "Elastic device budget plans that changed some request's partition.",
                    kLabelNames)
           .with(labels_);
  kv_budget_moved_pages_total_ =
      &registry_
           .counter("longserve:kv_device_budget_moved_pages_total",
                    "Device cache slots that changed owner through elastic budget plans.",
                    kLabelNames)
           .with(labels_);
  e2e_request_latency_ = &registry_
                              .histogram("vllm:e2e_request_latency_seconds",
                                         "Histogram of e2e request latency in seconds.",
                                         kLabelNames, kRequestLatencyBuckets)
                              .with(labels_);
}

void ServerMetrics::observe_time_to_first_token(double seconds) {
  time_to_first_token_->observe(seconds);
}

void ServerMetrics::observe_inter_token_latency(double seconds) {
  inter_token_latency_->observe(seconds);
}

void ServerMetrics::observe_preemptions(int32_t num_preemptions) {
  request_num_preemptions_->observe(num_preemptions);
}

void ServerMetrics::observe_finished(FinishReason reason, double e2e_seconds, double tpot_seconds,
                                     int32_t num_output_tokens, int32_t num_prompt_tokens) {
  request_success_total_->with({labels_[0], labels_[1], finish_reason_text(reason)}).inc();
  e2e_request_latency_->observe(e2e_seconds);
  if (num_output_tokens > 1) request_time_per_output_token_->observe(tpot_seconds);
  request_prompt_tokens_->observe(num_prompt_tokens);
  request_generation_tokens_->observe(num_output_tokens);
  // Every prompt token counted as computed, prefix-cache hits included (not split out yet).
  request_prefill_kv_computed_tokens_->observe(num_prompt_tokens);
}

void ServerMetrics::observe_phases(double queue_s, double prefill_s, double decode_s,
                                   double inference_s) {
  request_queue_time_->observe(queue_s);
  request_prefill_time_->observe(prefill_s);
  request_decode_time_->observe(decode_s);
  request_inference_time_->observe(inference_s);
}

void ServerMetrics::observe_request_params(int32_t n, int32_t max_tokens,
                                           int32_t max_generation_tokens) {
  request_params_n_->observe(n);
  request_params_max_tokens_->observe(max_tokens);
  request_max_num_generation_tokens_->observe(max_generation_tokens);
}

std::string ServerMetrics::render(const EngineStats& stats) {
  num_requests_running_->set(stats.num_running);
  num_requests_waiting_->set(stats.num_waiting);
  // Every waiting request here waits for capacity; nothing is deferred.
  waiting_capacity_->set(stats.num_waiting);
  waiting_deferred_->set(0);
  std::vector<uint64_t> iteration_counts(stats.iteration_tokens_counts.begin(),
                                         stats.iteration_tokens_counts.end());
  iteration_tokens_->set_counts(iteration_counts, static_cast<double>(stats.iteration_tokens_sum));
  kv_cache_usage_perc_->set(stats.kv_usage);
  num_preemptions_total_->set_total(static_cast<double>(stats.num_preemptions));
  prompt_tokens_total_->set_total(static_cast<double>(stats.prompt_tokens_total));
  generation_tokens_total_->set_total(static_cast<double>(stats.generation_tokens_total));
  kv_offload_host_bytes_->set(static_cast<double>(stats.kv_host_bytes));
  kv_offload_device_cache_bytes_->set(static_cast<double>(stats.kv_device_cache_bytes));
  host_pinned_bytes_->set(static_cast<double>(stats.host_pinned_bytes));
  kv_offload_hits_total_->set_total(static_cast<double>(stats.kv_offload_hits_total));
  kv_offload_misses_total_->set_total(static_cast<double>(stats.kv_offload_misses_total));
  kv_offload_h2d_bytes_total_->set_total(static_cast<double>(stats.kv_offload_bytes_total));
  recomputed_tokens_total_->set_total(static_cast<double>(stats.num_recomputed_tokens));
  prefix_cache_queries_total_->set_total(static_cast<double>(stats.prefix_cache_queries));
  prefix_cache_hits_total_->set_total(static_cast<double>(stats.prefix_cache_hits));
  prompt_tokens_cached_total_->set_total(static_cast<double>(stats.prompt_tokens_cached));
  shared_prefix_steps_total_->set_total(static_cast<double>(stats.shared_prefix_steps));
  shared_prefix_tokens_total_->set_total(static_cast<double>(stats.shared_prefix_tokens));
  kv_working_set_pages_->set(static_cast<double>(stats.kv_working_set_pages));
  kv_device_cache_pages_->set(static_cast<double>(stats.kv_cache_pages));
  kv_selection_overlap_->set(stats.kv_selected_pages_total > 0
                                 ? static_cast<double>(stats.kv_reused_pages_total) /
                                       static_cast<double>(stats.kv_selected_pages_total)
                                 : 0.0);
  kv_budget_min_pages_->set(static_cast<double>(stats.kv_budget_min_pages));
  kv_budget_median_pages_->set(static_cast<double>(stats.kv_budget_median_pages));
  kv_budget_max_pages_->set(static_cast<double>(stats.kv_budget_max_pages));
  kv_budget_changes_total_->set_total(static_cast<double>(stats.kv_budget_changes_total));
  kv_budget_moved_pages_total_->set_total(static_cast<double>(stats.kv_budget_moved_pages_total));
  kv_cache_bytes_per_token_->set(stats.kv_bytes_per_token);
  tp_retrieval_imbalance_->set(stats.tp_retrieval_imbalance);
  for (size_t r = 0; r < stats.tp_ranks.size(); ++r) {
    const EngineRankStats& rs = stats.tp_ranks[r];
    const LabelValues rank = {labels_[0], labels_[1], std::to_string(r)};
    tp_rank_retrieval_kv_heads_->with(rank).set(rs.retrieval_kv_heads);
    tp_rank_streaming_kv_heads_->with(rank).set(rs.streaming_kv_heads);
    tp_rank_kv_offload_host_bytes_->with(rank).set(static_cast<double>(rs.kv_host_bytes));
    tp_rank_kv_offload_device_cache_bytes_->with(rank).set(
        static_cast<double>(rs.kv_device_cache_bytes));
    tp_rank_kv_offload_hits_total_->with(rank).set_total(
        static_cast<double>(rs.kv_offload_hits_total));
    tp_rank_kv_offload_misses_total_->with(rank).set_total(
        static_cast<double>(rs.kv_offload_misses_total));
    tp_rank_kv_offload_h2d_bytes_total_->with(rank).set_total(
        static_cast<double>(rs.kv_offload_bytes_total));
  }
  if (!stats.kv_cache_dtype.empty()) {
    kv_cache_dtype_info_->with({labels_[0], labels_[1], stats.kv_cache_dtype}).set(1.0);
  }
  return registry_.render();
}

void RequestTimer::on_output(const RequestOutput& output, int64_t now_ns) {
  if (finished_) return;
  if (output.scheduled_ns > 0) scheduled_ns_ = output.scheduled_ns;
  if (!output.token_ids.empty()) {
    if (first_token_ns_ < 0) {
      first_token_ns_ = now_ns;
      metrics_->observe_time_to_first_token(static_cast<double>(now_ns - submit_ns_) * 1e-9);
    } else {
      metrics_->observe_inter_token_latency(static_cast<double>(now_ns - last_token_ns_) * 1e-9);
    }
    last_token_ns_ = now_ns;
    num_output_tokens_ += static_cast<int32_t>(output.token_ids.size());
  }
  if (!output.finished) return;
  finished_ = true;
  const double e2e_seconds = static_cast<double>(now_ns - submit_ns_) * 1e-9;
  double tpot_seconds = 0.0;
  if (num_output_tokens_ > 1) {
    tpot_seconds = static_cast<double>(last_token_ns_ - first_token_ns_) * 1e-9 /
                   static_cast<double>(num_output_tokens_ - 1);
  }
  metrics_->observe_finished(output.finish_reason, e2e_seconds, tpot_seconds, num_output_tokens_,
                             num_prompt_tokens_);
  // Phase times as vLLM defines them; a sequence aborted before it was scheduled spent all its
  // time queued.
  const int64_t scheduled = scheduled_ns_ > 0 ? scheduled_ns_ : now_ns;
  const int64_t first = first_token_ns_ >= 0 ? first_token_ns_ : now_ns;
  const int64_t last = last_token_ns_ >= 0 ? last_token_ns_ : now_ns;
  auto seconds = [](int64_t ns) { return static_cast<double>(std::max<int64_t>(ns, 0)) * 1e-9; };
  metrics_->observe_phases(seconds(scheduled - submit_ns_), seconds(first - scheduled),
                           seconds(last - first), seconds(last - scheduled));
  metrics_->observe_preemptions(output.num_preemptions);
}

}  // namespace ls
