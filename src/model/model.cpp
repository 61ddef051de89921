#include "model/model.h"

#include <fmt/format.h>

#include "core/log.h"
#include "io/checkpoint.h"

namespace ls {

Model::Model(ModelConfig config, const ArchitectureSpec* arch, ModelWeights weights,
             Backend* backend, std::filesystem::path dir)
    : config_(std::move(config)),
      arch_(arch),
      weights_(std::move(weights)),
      rope_(config_.rope(), config_.head_dim(), config_.max_position_embeddings()),
      backend_(backend),
      dir_(std::move(dir)) {}

Result<std::unique_ptr<Model>> Model::load(const std::filesystem::path& dir, Backend& backend) {
  LS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  const ArchitectureSpec* arch = find_architecture(config.architecture());
  if (arch == nullptr) {
    return unimplemented("{}: architecture '{}' is not supported (supported: {})",
                         (dir / "config.json").string(), config.architecture(),
                         fmt::join(supported_architectures(), ", "));
  }
  LS_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  LS_ASSIGN_OR_RETURN(ModelWeights weights, load_weights(ckpt, config, *arch, backend));
  backend.synchronize();
  LS_LOG_INFO("loaded {} ({}, {} layers, hidden {}, {}/{} heads, head_dim {}, vocab {}): {:.1f} MB of weights on {}",
              dir.string(), config.architecture(), config.num_hidden_layers(), config.hidden_size(),
              config.num_attention_heads(), config.num_key_value_heads(), config.head_dim(),
              config.vocab_size(), static_cast<double>(weights.bytes) / 1e6, backend.name());
  return std::unique_ptr<Model>(new Model(std::move(config), arch, std::move(weights), &backend, dir));
}

}  // namespace ls
