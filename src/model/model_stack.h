#pragma once
// The data plane of one engine, built from plain knobs: backend, model, attention policy, KV
// memory and the runner that ties them. The engine owns a ModelStack but only talks to it through
// StepExecutor (runner) and KvManager (kv), so the control plane never touches device memory.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "model/model_stack_options.h"
#include "attention/attention_policy.h"
#include "backend/backend.h"
#include "kv/kv_manager.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace ls {


struct ModelStack {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<AttentionPolicy> policy;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<ModelRunner> runner;
  int32_t max_model_len = 0;
};

// Loads the model on options.device, creates the policy, sizes both KV pools and allocates them.
// KV budget: kv_cache_bytes when given; else on the CPU enough for max_num_seqs sequences of
// max_model_len tokens capped at a quarter of the machine's memory, and on a GPU
// gpu_memory_utilization of the device memory minus weights and activations.
Result<std::unique_ptr<ModelStack>> build_model_stack(const ModelStackOptions& options);

}  // namespace ls
