#pragma once
// The engine's public API: what the server and the tools may use. Thread-safe: any thread may
// submit or abort; one engine thread owns the model and runs the step loop; results are
// delivered to each request's OutputSink from that thread (sinks must not block for long).

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "engine/token_constraint.h"

namespace ls {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// One step's output for one request (one sequence of it: `index` < n).
struct RequestOutput {
  int32_t index = 0;              // which of the request's n choices
  std::vector<int32_t> token_ids;  // new tokens this step (usually one)
  std::string text;               // new text to show (may be empty while a stop string or an
                                  // incomplete UTF-8 sequence is held back)
  // For each new token when logprobs were asked: its logprob and the top-N alternatives.
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // Prompt logprobs (SamplingParams::prompt_logprobs >= 0), in the choice's first output only:
  // entry i is prompt token i + 1 (the first prompt token has none), with its top-N alternatives.
  std::vector<TokenLogprob> prompt_logprobs;                   // [num_prompt_tokens - 1]
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;  // [num_prompt_tokens - 1][N]
  std::vector<int32_t> prompt_ranks;  // [num_prompt_tokens - 1] 1 + ids with a larger logit
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;  // the matched stop string, or the stop token id as text
  int32_t stop_token_id = -1;  // the stop_token_ids entry that ended the choice, else -1
  std::string error;        // set when finish_reason == kError
  // With kError, the failure's kind: kFailedPrecondition when the engine is down and the request
  // did not run in the step that took it down (the server answers 503, as for a request refused
  // at submit); kInternal for a failed step (500).
  StatusCode error_code = StatusCode::kInternal;
  // Counts for usage, valid when finished.
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  // core/clock now_ns() when the sequence was first scheduled (0: not yet), for the queue /
  // prefill / decode time metrics.
  int64_t scheduled_ns = 0;
  int32_t num_preemptions = 0;  // times the choice was preempted and recomputed
  // Prompt tokens the request found in the prefix cache (usage.prompt_tokens_details), set once
  // it was admitted; -1 with prefix caching off.
  int32_t cached_tokens = -1;
};

// Called on the engine thread for every RequestOutput of a request, in order; the last one per
// choice has finished == true. Must be fast and must not call back into the engine.
using OutputSink = std::function<void(const RequestOutput&)>;

struct GenerateRequest {
  std::string request_id;           // unique among live requests
  std::vector<int32_t> prompt_ids;  // already tokenized (chat template applied by the caller)
  SamplingParams sampling;
  StopParams stop;
  int32_t n = 1;  // independent choices; choice i uses seed + i when a seed is given
  // Grammar-constrained decoding: when set, called once per choice; the constraint masks every
  // step's logits before sampling (structured outputs, forced tool calls).
  TokenConstraintFactory constraint;
};

// Bucket bounds of vLLM's vllm:iteration_tokens_total histogram (tokens per engine step).
inline constexpr std::array<int32_t, 13> kIterationTokenBuckets = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

// One tensor-parallel rank in EngineStats (docs/tensor-parallel.md).
struct EngineRankStats {
  int32_t retrieval_kv_heads = 0;  // the rank's retrieval kv heads, summed over layers
  int32_t streaming_kv_heads = 0;  // its streaming kv heads, summed over layers
  // The rank's own hierarchical KV tier (--kv-offload on), as the kv_offload_* fields below.
  int64_t kv_host_bytes = 0;
  int64_t kv_device_cache_bytes = 0;
  int64_t kv_offload_hits_total = 0;
  int64_t kv_offload_misses_total = 0;
  int64_t kv_offload_bytes_total = 0;
};

struct EngineStats {
  // Empty while the engine serves; why it is down otherwise (a tensor-parallel rank failed and
  // took the group down: docs/tensor-parallel.md, "Failures"). /health then answers 503.
  std::string engine_error;
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  double kv_usage = 0.0;            // fraction of KV pages in use, 0..1
  int64_t kv_bytes_in_use = 0;
  int64_t num_preemptions = 0;      // since start
  int64_t prompt_tokens_total = 0;  // prompt tokens prefilled, since start
  int64_t generation_tokens_total = 0;
  // Steps by tokens computed: [i] counts steps with at most kIterationTokenBuckets[i] tokens and
  // more than the bound before; the last entry counts the rest. Not cumulative.
  std::array<int64_t, kIterationTokenBuckets.size() + 1> iteration_tokens_counts{};
  int64_t iteration_tokens_sum = 0;
  // Tensor parallelism: [ranks] each rank's numbers (empty at TP = 1), and the head-pattern
  // imbalance over the ranks (most retrieval kv heads / mean; 1 is even, 0 at TP = 1).
  std::vector<EngineRankStats> tp_ranks;
  double tp_retrieval_imbalance = 0.0;
  // Hierarchical KV tier (--kv-offload on; docs/hierarchical-kv.md), zero when off. With tensor
  // parallelism these are rank 0's (tp_ranks has every rank's).
  bool kv_offload = false;
  int64_t kv_host_bytes = 0;            // host pool (pinned on a GPU)
  int64_t host_pinned_bytes = 0;        // page-locked host memory of the backend (0 on the CPU)
  int64_t kv_device_cache_bytes = 0;    // device page cache
  int64_t kv_offload_hits_total = 0;    // mandatory pages found in the device cache
  int64_t kv_offload_misses_total = 0;  // pages copied from host memory
  int64_t kv_offload_bytes_total = 0;   // host-to-device bytes of those copies
  // Admission control (docs/working-set-scheduling.md).
  // Prefix caching (vLLM's counters, in tokens).
  bool prefix_caching = false;
  int64_t prefix_cache_queries = 0;  // tokens looked up when sequences were admitted
  int64_t prefix_cache_hits = 0;     // of them, found cached
  int64_t prompt_tokens_cached = 0;  // prompt tokens found cached at requests' first admission
  // Decode steps that attended a shared prefix once per group (docs/shared-prefix-attention.md).
  int64_t shared_prefix_steps = 0;
  int64_t shared_prefix_tokens = 0;  // prefix tokens they covered, summed over group members
  int64_t num_recomputed_tokens = 0;    // tokens prefilled again after preemptions, since start
  int64_t kv_cache_pages = 0;           // device page cache in head-pages (tier on)
  int64_t kv_working_set_pages = 0;     // running requests' summed working sets (tier on)
  int64_t kv_selected_pages_total = 0;  // decode steps' mandatory pages, since start (tier on)
  int64_t kv_reused_pages_total = 0;    // of them, read one step earlier too: overlap = ratio
  // Per-request device budgets (docs/device-cache-budgets.md), over the running requests'
  // partitions in head-page slots (tier on; 0 with none running).
  bool kv_budget_elastic = false;
  int64_t kv_budget_min_pages = 0;
  int64_t kv_budget_median_pages = 0;
  int64_t kv_budget_max_pages = 0;
  int64_t kv_budget_changes_total = 0;      // plans that changed some request's budget
  int64_t kv_budget_moved_pages_total = 0;  // cache slots that changed owner through them
  // K/V page format (docs/kv-quantization.md) and the cache bytes one token of context adds
  // (retrieval heads, all layers, K + V, scales and summaries included).
  std::string kv_cache_dtype;
  double kv_bytes_per_token = 0.0;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Queues a request. Errors (empty prompt, prompt + max_tokens over the context, bad sampling
  // fields) are returned here and nothing is queued.
  virtual Status submit(GenerateRequest request, OutputSink sink) = 0;
  // Stops a request wherever it is and frees everything it holds; its sink then gets a final
  // output with finish_reason kAbort. Unknown ids are ignored.
  virtual void abort(const std::string& request_id) = 0;
  virtual EngineStats stats() const = 0;

  virtual int32_t max_model_len() const = 0;  // context length in tokens
  virtual int32_t vocab_size() const = 0;
  virtual const std::string& model_name() const = 0;
  // Default eos ids and sampling defaults from generation_config.json.
  virtual const StopParams& default_stop() const = 0;
  virtual const SamplingParams& default_sampling() const = 0;
};

}  // namespace ls
