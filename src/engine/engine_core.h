#pragma once
// EngineCore: the synchronous engine. add_request() queues work, step() runs one scheduler step
// (one forward over a mixed batch), samples, checks stop conditions and delivers outputs to each
// request's sink. Single-threaded by design; AsyncEngine (async_engine.h) runs it on its own
// thread behind the thread-safe Engine API, and the CLI drives it directly.

#include <array>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/engine_api.h"
#include "engine/device_budget.h"
#include "engine/engine_config.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/working_set.h"
#include "kv/kv_manager.h"
#include "kv/prefix_key.h"
#include "model/engine_model.h"
#include "model/step_executor.h"
#include "tokenizer/tokenizer.h"

namespace ls {


// What decides a cached page's K/V bytes besides its tokens: the prefix cache's key seed, so pages
// of another model (directory, load format and dummy seed, quantization), attention configuration
// or KV format never match.
PrefixKey prefix_cache_seed(const EngineConfig& config, const KvGeometry& geometry);

class EngineCore {
 public:
  // Loads the model and builds every component the config asks for.
  static Result<std::unique_ptr<EngineCore>> create(const EngineConfig& config);
  // For tests: a caller-made executor (a fake model), KV manager and optional tokenizer.
  // The executor writes no KV, so the KV manager only needs to agree on block accounting.
  EngineCore(const EngineConfig& config, std::unique_ptr<StepExecutor> executor,
             std::unique_ptr<KvManager> kv, std::shared_ptr<const Tokenizer> tokenizer,
             int32_t max_model_len, StopParams default_stop, SamplingParams default_sampling);
  ~EngineCore();

  // Checks the request (empty or too long prompt, bad fields: vLLM's messages) and queues it.
  Status add_request(GenerateRequest request, OutputSink sink);
  // The checks add_request makes that depend only on immutable state (safe from any thread):
  // everything but the uniqueness of the request id.
  Status validate_request(const GenerateRequest& request) const;
  // Frees the request wherever it is; its sink receives a final kAbort output.
  void abort(const std::string& request_id);
  // Aborts every live request (shutdown): each choice gets its final kAbort output.
  void abort_all();
  // One step; returns after the step's outputs were delivered. A failing forward finishes the
  // step's sequences with kError and leaves the engine serving, unless the executor cannot run
  // any more steps (StepExecutor::fatal_error, a tensor-parallel group a failed rank took down):
  // then every request ends with kError, the engine is down for good (fatal_error()), and
  // add_request and step() return that error.
  Status step();
  // Ok while the engine serves; the error that took it down otherwise.
  const Status& fatal_error() const { return fatal_; }
  bool has_work() const { return scheduler_.has_work(); }
  EngineStats stats() const;

  // Logits of every position of `ids` ([ids.size(), vocab] f32), computed in prefill chunks
  // outside the scheduler (the `score` command). Needs an idle engine. `kv_bytes` (optional)
  // receives the KV bytes the sequence held at its end.
  Status score(std::span<const int32_t> ids, std::vector<float>& logits,
               int64_t* kv_bytes = nullptr);

  int32_t max_model_len() const { return max_model_len_; }
  int32_t vocab_size() const { return executor_->vocab_size(); }
  const std::string& model_name() const { return model_name_; }
  const StopParams& default_stop() const { return default_stop_; }
  const SamplingParams& default_sampling() const { return default_sampling_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  const KvManager& kv() const { return *kv_; }
  // "dense", "lserve", ... (empty for a test engine).
  std::string attention_policy_name() const;
  const EngineConfig& config() const { return config_; }
  // Tokens prefilled again after preemptions, since start (the thrash admission prevents).
  int64_t recomputed_tokens() const { return scheduler_.num_recomputed_tokens(); }
  // Selection locality and working sets (--kv-offload on; null otherwise).
  const WorkingSetTracker* working_sets() const { return working_sets_.get(); }
  const DeviceBudgetPlanner* device_budgets() const { return budgets_.get(); }
  // Layer-segmented prefill: whether the scheduler uses it, and the runner's hidden-state arena.
  bool layer_segmented_prefill() const { return scheduler_.config().layer_segment_min_tokens > 0; }
  int64_t layer_segment_arena_bytes() const { return executor_->layer_segment_arena_bytes(); }

 private:
  EngineCore(const EngineConfig& config, std::unique_ptr<EngineModel> model,
             std::shared_ptr<const Tokenizer> tokenizer, StopParams default_stop,
             SamplingParams default_sampling);
  void finish(Sequence* seq, RequestOutput& out);
  // Ends the request's live choices: kAbort when `error` is ok, else kError with its message.
  void end_request(const std::string& request_id, const Status& error);
  Status step_once();
  // Whether the engine is down (fatal_ set); on the first call that finds the executor down (or
  // `threw`: the step threw, so its state is unknown), sets fatal_ and ends every request with it.
  bool went_down(const Status& threw = {});
  void fail_sequences(const SchedulerOutput& out, const Status& error);
  void process_sample(Sequence* seq, std::span<float> logits);
  // Prompt logprobs: limits prefill chunks so a step's logit rows fit, and turns `num_positions`
  // rows of [vocab] logits (prompt positions first_position...) into the sequence's entries.
  void cap_prompt_logprob_chunks();
  void collect_prompt_logprobs(Sequence* seq, int32_t first_position, int32_t num_positions,
                               const float* rows);
  void init_working_sets();
  void init_prefix_caching();
  // The request's prompt tokens found in the prefix cache (-1 with caching off).
  int32_t cached_tokens(const Sequence& seq) const;
  // The step's tokens (decodes, prefill chunks) through the executor into logits_; fills
  // prompt_rows (per chunk: the prompt positions whose logits give prompt logprobs).
  Status forward_chunks(const SchedulerOutput& out, int64_t step_ns,
                        std::vector<std::pair<int32_t, int32_t>>& prompt_rows);
  // The layer-segmented prefill's share (if any) into segment_logits_.
  Status forward_segments(const LayerSegmentShare& share);
  // Samples from one row of logits, or fails the sequence when they are not finite.
  void deliver_sample(Sequence* seq, std::span<float> logits);

  EngineConfig config_;
  std::unique_ptr<EngineModel> model_;  // null for a test engine
  std::unique_ptr<StepExecutor> owned_executor_;  // test engines own these two
  std::unique_ptr<KvManager> owned_kv_;
  StepExecutor* executor_;
  KvManager* kv_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  int32_t max_model_len_;
  StopParams default_stop_;
  SamplingParams default_sampling_;
  std::string model_name_;
  Scheduler scheduler_;
  std::unique_ptr<WorkingSetTracker> working_sets_;  // --kv-offload on
  std::unique_ptr<DeviceBudgetPlanner> budgets_;     // --device-cache-budget elastic
  std::mt19937_64 seed_rng_;

  std::map<std::string, std::vector<std::unique_ptr<Sequence>>> requests_;  // id -> choices
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  std::array<int64_t, kIterationTokenBuckets.size() + 1> iteration_tokens_counts_{};
  int64_t iteration_tokens_sum_ = 0;
  std::vector<float> logits_;  // [rows, vocab] scratch of the last step
  std::vector<float> segment_logits_;  // [1, vocab] a layer-segmented prefill's last token
  Status fatal_;  // why the engine is down (ok while it serves)
};

}  // namespace ls
