#pragma once
// The StepExecutor of tensor parallelism (docs/tensor-parallel.md): one process, one persistent
// worker thread per rank. forward() hands the same StepInput to every rank's ModelRunner, each on
// its own thread (bound to its device), and returns rank 0's logits; the ranks meet only in the
// all-reduces inside their runners. A rank that fails (an error, or an exception its thread
// catches) aborts the group, so the others' waits end, and the step fails with that rank's error;
// the group is then reset for the next step when the transport allows and the failure was an
// error value, otherwise (an aborted NCCL group, or an exception, after which the rank's state is
// unknown) the executor is down: fatal_error() says why and every later step fails with it.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/status.h"
#include "model/model_runner.h"
#include "model/step_executor.h"
#include "model/tp_fault.h"

namespace ls {

class TensorParallelExecutor final : public StepExecutor {
 public:
  struct Rank {
    ModelRunner* runner = nullptr;
    Backend* backend = nullptr;
    Communicator* comm = nullptr;
  };
  // ranks[r] is rank r; the pointers must outlive the executor.
  explicit TensorParallelExecutor(std::vector<Rank> ranks);
  ~TensorParallelExecutor() override;
  TensorParallelExecutor(const TensorParallelExecutor&) = delete;
  TensorParallelExecutor& operator=(const TensorParallelExecutor&) = delete;

  Status forward(const StepInput& step, std::vector<float>& logits) override;
  int32_t vocab_size() const override { return ranks_[0].runner->vocab_size(); }
  Status forward_layer_segments(const LayerSegmentInput& in, std::vector<float>& logits) override;
  int32_t num_layers() const override { return ranks_[0].runner->num_layers(); }
  int32_t max_layer_segment_tokens() const override {
    return ranks_[0].runner->max_layer_segment_tokens();
  }
  // Rank 0's (every rank holds an arena of the same size).
  int64_t layer_segment_arena_bytes() const override {
    return ranks_[0].runner->layer_segment_arena_bytes();
  }
  // Rank 0's tier (each rank has its own, over its own heads).
  KvTierStats kv_tier_stats() const override { return ranks_[0].runner->kv_tier_stats(); }
  // Rank 0's (every rank runs the same steps).
  int64_t shared_prefix_steps() const override { return ranks_[0].runner->shared_prefix_steps(); }
  int64_t shared_prefix_tokens() const override {
    return ranks_[0].runner->shared_prefix_tokens();
  }
  Status set_device_budgets(const std::vector<int32_t>& slots) override;
  Status fatal_error() const override { return broken_; }
  std::vector<TpRankStats> tp_rank_stats() const override;
  // The ranks' kv heads by role, summed over layers ([ranks] each), from the builder.
  void set_head_roles(std::vector<int32_t> retrieval, std::vector<int32_t> streaming);
  int32_t size() const { return static_cast<int32_t>(ranks_.size()); }
  // Test-only (model/tp_fault.h): arms one injected rank failure. Call before the first step.
  Status set_fault(const TpFault& fault);

 private:
  enum class StepKind { kPrefill, kDecode, kOther };
  // Runs job(rank) on every rank's thread and waits for all; the first failure wins. A failure
  // after which the group cannot be reset takes the executor down (broken_): the ranks then drop
  // their recorded steps and the communicators' abort completes before this returns.
  Status run_all(const std::function<Status(int32_t)>& job, StepKind kind);
  // Hands job to every rank's thread and waits until all are done (first_error_ and threw_ say
  // how it went); rank fail_before_step (-1: none) fails with the injected fault instead.
  void dispatch(const std::function<Status(int32_t)>& job, int32_t fail_before_step);
  void worker(int32_t rank);
  // Whether the armed fault fires in this step (counts the matching steps).
  bool fault_fires(StepKind kind);

  std::vector<Rank> ranks_;
  std::vector<std::vector<float>> scratch_logits_;  // [ranks] logits of ranks other than 0
  std::vector<int32_t> retrieval_heads_, streaming_heads_;  // [ranks] summed over layers
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<Status(int32_t)>* job_ = nullptr;
  int64_t generation_ = 0;
  int32_t pending_ = 0;
  bool stop_ = false;
  Status first_error_;  // this step's failure: the first rank failing on its own, else the first
  bool first_error_victim_ = false;  // first_error_ is a rank whose collective failed
  bool threw_ = false;  // some rank's job threw this step
  Status broken_;       // set when the group cannot be reset: every later step fails with it
  // [ranks] what each rank's runner calls its collectives through (tensor_parallel_executor.cpp)
  std::vector<std::unique_ptr<Communicator>> rank_comms_;
  // Fault injection (tests): the armed fault, matching steps seen, and the rank that fails before
  // its step in this one (-1: none).
  TpFault fault_;
  int64_t fault_matches_ = 0;
  int32_t fail_before_step_ = -1;
};

}  // namespace ls
