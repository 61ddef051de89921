#pragma once
// The data plane of one engine, built from plain knobs: backend, model, attention policy, KV
// memory and the runner that ties them. The engine owns a ModelStack but only talks to it through
// StepExecutor (runner) and KvManager (kv), so the control plane never touches device memory.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model_stack_options.h"
#include "attention/attention_policy.h"
#include "backend/backend.h"
#include "backend/communicator.h"
#include "kv/kv_manager.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace ls {


struct ModelStack {
  // One rank (or the whole model without tensor parallelism). With tensor parallelism the
  // top-level stack has no backend, model, pool or runner of its own: it holds the ranks' stacks
  // (whose runners all read `kv`), the unbound policy over the whole model (its geometry is the
  // KvManager's), and the executor that runs the ranks.
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<AttentionPolicy> policy;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<ModelRunner> runner;
  int32_t max_model_len = 0;
  std::vector<std::unique_ptr<ModelStack>> tp_ranks;
  std::vector<std::unique_ptr<Communicator>> tp_comms;  // [ranks]
  std::unique_ptr<StepExecutor> tp_executor;
  std::optional<ModelConfig> tp_full_config;  // the whole model's config

  StepExecutor& executor() { return tp_executor ? *tp_executor : *runner; }
  const ModelConfig& config() const { return tp_full_config ? *tp_full_config : model->config(); }

  // Tensor parallelism only: the stacks must outlive the executor's threads.
  ~ModelStack();
};

// Loads the model on options.device, creates the policy, sizes both KV pools and allocates them.
// KV budget: kv_cache_bytes when given; else on the CPU enough for max_num_seqs sequences of
// max_model_len tokens capped at a quarter of the machine's memory, and on a GPU
// gpu_memory_utilization of the device memory minus weights and activations.
Result<std::unique_ptr<ModelStack>> build_model_stack(const ModelStackOptions& options);

// Free physical memory in bytes (the automatic host KV pool takes a share of it; 0 if unknown).
int64_t free_ram_bytes();

// options.tensor_parallel_size ranks (model/tensor_parallel_stack.cpp); build_model_stack calls
// it for tensor_parallel_size > 1.
Result<std::unique_ptr<ModelStack>> build_tensor_parallel_stack(const ModelStackOptions& options);

}  // namespace ls
