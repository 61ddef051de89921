#include "server/server_metrics.h"

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
  kv_cache_bytes_per_token_ =
      &registry_
           .gauge("longserve:kv_cache_bytes_per_token",
                  "KV cache bytes one token of context takes (retrieval heads, all layers, K + V, "
                  "scales and key summaries included).",
                  kLabelNames)
           .with(labels_);
  kv_cache_dtype_info_ = &registry_.gauge(
      "longserve:kv_cache_dtype_info",
      "1 for the format of the KV cache pages (--kv-cache-dtype: f32, bf16, fp8, int8, int4).",
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
  // vLLM creates the three usual reasons up front so that rate() sees them from zero.
  for (FinishReason reason : {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort}) {
    request_success_total_->with({labels_[0], labels_[1], finish_reason_text(reason)});
  }
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

void ServerMetrics::observe_finished(FinishReason reason, double e2e_seconds, double tpot_seconds,
                                     int32_t num_output_tokens, int32_t num_prompt_tokens) {
  request_success_total_->with({labels_[0], labels_[1], finish_reason_text(reason)}).inc();
  e2e_request_latency_->observe(e2e_seconds);
  if (num_output_tokens > 1) request_time_per_output_token_->observe(tpot_seconds);
  request_prompt_tokens_->observe(num_prompt_tokens);
  request_generation_tokens_->observe(num_output_tokens);
}

std::string ServerMetrics::render(const EngineStats& stats) {
  num_requests_running_->set(stats.num_running);
  num_requests_waiting_->set(stats.num_waiting);
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
  kv_cache_bytes_per_token_->set(stats.kv_bytes_per_token);
  if (!stats.kv_cache_dtype.empty()) {
    kv_cache_dtype_info_->with({labels_[0], labels_[1], stats.kv_cache_dtype}).set(1.0);
  }
  return registry_.render();
}

void RequestTimer::on_output(const RequestOutput& output, int64_t now_ns) {
  if (finished_) return;
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
}

}  // namespace ls
