#include "model/engine_model.h"

#include "model/model_stack.h"

namespace ls {

EngineModel::EngineModel(std::unique_ptr<ModelStack> stack, GenerationConfig generation)
    : stack_(std::move(stack)), generation_(std::move(generation)) {}

EngineModel::~EngineModel() = default;

Result<std::unique_ptr<EngineModel>> EngineModel::load(const ModelStackOptions& options) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<ModelStack> stack, build_model_stack(options));
  LS_ASSIGN_OR_RETURN(GenerationConfig generation, load_generation_config(options.model_dir));
  return std::unique_ptr<EngineModel>(new EngineModel(std::move(stack), std::move(generation)));
}

StepExecutor& EngineModel::executor() { return stack_->executor(); }
KvManager& EngineModel::kv() { return *stack_->kv; }
int32_t EngineModel::max_model_len() const { return stack_->max_model_len; }
const ModelConfig& EngineModel::config() const { return stack_->config(); }
std::string EngineModel::policy_name() const { return std::string(stack_->policy->name()); }

int64_t EngineModel::exact_decode_len() const { return stack_->policy->exact_decode_len(); }

}  // namespace ls
