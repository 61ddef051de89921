#include "model/model.h"

#include <fmt/format.h>

#include "core/log.h"
#include "io/checkpoint.h"
#include "io/gguf_model.h"

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
                         config.source(), config.architecture(),
                         fmt::join(supported_architectures(), ", "));
  }
  // A GGUF model is dequantized at load to the dtype the backend computes with (f32 on the CPU,
  // bf16 on CUDA), so everything past the weights is the same as for a safetensors checkpoint.
  LS_ASSIGN_OR_RETURN(std::optional<std::filesystem::path> gguf, find_gguf_model(dir));
  auto open_checkpoint = [&]() -> Result<Checkpoint> {
    if (!gguf) return Checkpoint::open(dir);
    LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(*gguf));
    return gguf_checkpoint(*file, config, backend.weight_dtype_for(DType::kF32));
  };
  LS_ASSIGN_OR_RETURN(Checkpoint ckpt, open_checkpoint());
  LS_ASSIGN_OR_RETURN(ModelWeights weights, load_weights(ckpt, config, *arch, backend));
  backend.synchronize();
  LS_LOG_INFO("loaded {} ({}, {} layers, hidden {}, {}/{} heads, head_dim {}, vocab {}): {:.1f} MB of weights on {}",
              dir.string(), config.architecture(), config.num_hidden_layers(), config.hidden_size(),
              config.num_attention_heads(), config.num_key_value_heads(), config.head_dim(),
              config.vocab_size(), static_cast<double>(weights.bytes) / 1e6, backend.name());
  return std::unique_ptr<Model>(new Model(std::move(config), arch, std::move(weights), &backend, dir));
}

}  // namespace ls
