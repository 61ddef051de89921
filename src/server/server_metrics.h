#pragma once
// The vLLM (v1 engine) metric set served on GET /metrics, with vLLM's names, buckets and labels
// (model_name, engine="0"), so dashboards and scrapers built for vLLM work unchanged.
//
// Gauges and token counters that the engine keeps are copied from Engine::stats() at scrape
// time. Latency histograms are the server's own measurements: a RequestTimer follows one
// sequence (one choice of one engine request) from submit to its final output, on the thread
// that delivers the outputs.

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine_api.h"
#include "server/metrics_registry.h"

namespace ls {

class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int32_t max_model_len);

  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  // A finished sequence: its end-to-end latency, its mean time per output token (only when it
  // produced more than one token), and its token counts.
  void observe_finished(FinishReason reason, double e2e_seconds, double tpot_seconds,
                        int32_t num_output_tokens, int32_t num_prompt_tokens);
  // vLLM's phase times of a finished sequence (seconds): queued until first scheduled, first
  // scheduled until the first token, first to last token, first scheduled to last token.
  void observe_phases(double queue_s, double prefill_s, double decode_s, double inference_s);
  // Per engine request once all its choices finished: n, max_tokens and the most tokens one of
  // its choices generated.
  void observe_request_params(int32_t n, int32_t max_tokens, int32_t max_generation_tokens);

  // A finished sequence's preemption count (vllm:request_num_preemptions).
  void observe_preemptions(int32_t num_preemptions);

  // Refreshes the engine-backed series from `stats` and renders everything.
  std::string render(const EngineStats& stats);

 private:
  MetricsRegistry registry_;
  const LabelValues labels_;  // {model_name, engine}
  Gauge* num_requests_running_;
  Gauge* num_requests_waiting_;
  Gauge* kv_cache_usage_perc_;
  Counter* prompt_tokens_total_;
  Counter* generation_tokens_total_;
  Counter* num_preemptions_total_;
  // The host KV tier (docs/hierarchical-kv.md); zero while --kv-offload is off.
  Gauge* kv_offload_host_bytes_;
  Gauge* kv_offload_device_cache_bytes_;
  Gauge* host_pinned_bytes_;
  Counter* kv_offload_hits_total_;
  Counter* kv_offload_misses_total_;
  Counter* kv_offload_h2d_bytes_total_;
  // Tensor parallelism (docs/tensor-parallel.md): the head-pattern imbalance, and per rank
  // (label rank="r") its kv heads by role and its own KV tier.
  Gauge* tp_retrieval_imbalance_;
  GaugeFamily* tp_rank_retrieval_kv_heads_;
  GaugeFamily* tp_rank_streaming_kv_heads_;
  GaugeFamily* tp_rank_kv_offload_host_bytes_;
  GaugeFamily* tp_rank_kv_offload_device_cache_bytes_;
  CounterFamily* tp_rank_kv_offload_hits_total_;
  CounterFamily* tp_rank_kv_offload_misses_total_;
  CounterFamily* tp_rank_kv_offload_h2d_bytes_total_;
  Gauge* kv_cache_bytes_per_token_;
  GaugeFamily* kv_cache_dtype_info_;  // 1 for the engine's --kv-cache-dtype page format
  CounterFamily* request_success_total_;
  Histogram* time_to_first_token_;
  Histogram* inter_token_latency_;
  Histogram* request_time_per_output_token_;
  Histogram* e2e_request_latency_;
  Histogram* request_prompt_tokens_;
  Histogram* request_generation_tokens_;
  Histogram* request_queue_time_;
  Histogram* request_prefill_time_;
  Histogram* request_decode_time_;
  Histogram* request_inference_time_;
  Histogram* request_prefill_kv_computed_tokens_;
  Histogram* request_params_n_;
  Histogram* request_params_max_tokens_;
  Histogram* request_max_num_generation_tokens_;
  Histogram* iteration_tokens_;
  Gauge* waiting_capacity_;
  Gauge* waiting_deferred_;
  // Admission control (docs/working-set-scheduling.md).
  Histogram* request_num_preemptions_;
  Counter* recomputed_tokens_total_;
  Counter* prefix_cache_queries_total_;
  Counter* prefix_cache_hits_total_;
  Counter* prompt_tokens_cached_total_;
  // Shared-prefix (Hydragen) decode attention (docs/shared-prefix-attention.md).
  Counter* shared_prefix_steps_total_;
  Counter* shared_prefix_tokens_total_;
  Gauge* kv_working_set_pages_;
  Gauge* kv_device_cache_pages_;
  Gauge* kv_selection_overlap_;
  // Per-request device budgets (docs/device-cache-budgets.md).
  Gauge* kv_budget_min_pages_;
  Gauge* kv_budget_median_pages_;
  Gauge* kv_budget_max_pages_;
  Counter* kv_budget_changes_total_;
  Counter* kv_budget_moved_pages_total_;
};

// Follows one sequence: call on_output for each of its outputs in order (the engine delivers
// them in order on one thread, so no locking is needed). Observes TTFT on the first output with
// tokens, ITL between later ones, and the per-request histograms on the final output.
class RequestTimer {
 public:
  RequestTimer(std::shared_ptr<ServerMetrics> metrics, int64_t submit_ns, int32_t num_prompt_tokens)
      : metrics_(std::move(metrics)),
        submit_ns_(submit_ns),
        num_prompt_tokens_(num_prompt_tokens) {}

  void on_output(const RequestOutput& output, int64_t now_ns);

 private:
  std::shared_ptr<ServerMetrics> metrics_;
  int64_t submit_ns_;
  int32_t num_prompt_tokens_;
  int64_t first_token_ns_ = -1;
  int64_t last_token_ns_ = -1;
  int64_t scheduled_ns_ = 0;
  int32_t num_output_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace ls
