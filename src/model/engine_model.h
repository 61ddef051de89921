#pragma once
// EngineModel: what the engine's control plane needs from the data plane — run a step
// (StepExecutor), the KV bookkeeping (KvManager) and a few facts — without including any
// backend header. It owns the ModelStack (backend, weights, policy, KV memory, runner).

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "io/generation_config.h"
#include "io/model_config.h"
#include "kv/kv_manager.h"
#include "model/model_stack_options.h"
#include "model/step_executor.h"

namespace ls {

struct ModelStack;

class EngineModel {
 public:
  // Builds the ModelStack and reads generation_config.json.
  static Result<std::unique_ptr<EngineModel>> load(const ModelStackOptions& options);
  ~EngineModel();

  StepExecutor& executor();
  KvManager& kv();
  int32_t max_model_len() const;
  const ModelConfig& config() const;
  std::string policy_name() const;
  int64_t exact_decode_len() const;  // AttentionPolicy::exact_decode_len
  const GenerationConfig& generation() const { return generation_; }

 private:
  EngineModel(std::unique_ptr<ModelStack> stack, GenerationConfig generation);
  std::unique_ptr<ModelStack> stack_;
  GenerationConfig generation_;
};

}  // namespace ls
