#pragma once
// A loaded decoder model: its immutable config, architecture family, RoPE table and weights on
// one backend. Running it is ModelRunner's job.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"
#include "model/architecture.h"
#include "model/dummy_weights.h"
#include "model/rope_table.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace ls {

class Model {
 public:
  // Reads config.json and the safetensors weights of a Hugging Face model directory.
  // Unknown architectures, unsupported features and every loader fault end in one clear error.
  // quantization: auto | none | fp8 | q8_0 | q4_0 | q4_1 | q4_k | q6_k
  // (EngineConfig::quantization; fp8: model/weights.h Fp8Load).
  // shard: with size > 1, the weights and config (head counts, MLP width) of one
  // tensor-parallel rank (model/tensor_parallel.h).
  // load_format kDummy: no tensor is read; every weight (of this rank's slice) is generated from
  // dummy_seed (model/dummy_weights.h), then quantized as `quantization` says.
  static Result<std::unique_ptr<Model>> load(const std::filesystem::path& dir, Backend& backend,
                                             std::string_view quantization = "auto",
                                             TpShard shard = {},
                                             LoadFormat load_format = LoadFormat::kAuto,
                                             uint64_t dummy_seed = 0);

  const ModelConfig& config() const { return config_; }
  const ArchitectureSpec& arch() const { return *arch_; }
  const ModelWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return rope_; }
  Backend& backend() const { return *backend_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  Model(ModelConfig config, const ArchitectureSpec* arch, ModelWeights weights, Backend* backend,
        std::filesystem::path dir);

  ModelConfig config_;
  const ArchitectureSpec* arch_;
  ModelWeights weights_;
  RopeTable rope_;
  Backend* backend_;
  std::filesystem::path dir_;
};

}  // namespace ls
