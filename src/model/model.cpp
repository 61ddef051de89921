#include "model/model.h"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/gguf_convert.h"
#include "io/gguf_model.h"
#include "model/tensor_parallel.h"

namespace ls {

Model::Model(ModelConfig config, const ArchitectureSpec* arch, ModelWeights weights,
             Backend* backend, std::filesystem::path dir)
    : config_(std::move(config)),
      arch_(arch),
      weights_(std::move(weights)),
      rope_(config_.rope(), config_.head_dim(), config_.max_position_embeddings()),
      backend_(backend),
      dir_(std::move(dir)) {}

Result<std::unique_ptr<Model>> Model::load(const std::filesystem::path& dir, Backend& backend,
                                           std::string_view quantization, TpShard shard,
                                           LoadFormat load_format, uint64_t dummy_seed) {
  LS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  const ArchitectureSpec* arch = find_architecture(config.architecture());
  if (arch == nullptr) {
    return unimplemented("{}: architecture '{}' is not supported (supported: {})",
                         config.source(), config.architecture(),
                         fmt::join(supported_architectures(), ", "));
  }
  // A GGUF model's quantized linear weights stay in their blocks where the backend reads them
  // (the CPU); everything else is dequantized at load to the dtype the backend computes with (f32
  // on the CPU, bf16 on CUDA).
  const bool dummy = load_format == LoadFormat::kDummy;
  std::optional<std::filesystem::path> gguf;
  if (!dummy) {
    LS_ASSIGN_OR_RETURN(gguf, find_gguf_model(dir));
  }
  std::optional<GgmlType> quantize_to;
  Fp8Load fp8 = quantization == "none" ? Fp8Load::kDequantize : Fp8Load::kAuto;
  if (quantization == "fp8") {
    // W8A8 on FP8 tensor cores: only a backend that reads e4m3 weights (CUDA, Hopper) takes it.
    // The CPU loads FP8 checkpoints (dequantized) with auto, but does not quantize to FP8.
    if (gguf) {
      return invalid_argument("{}: --quantization fp8 quantizes a safetensors checkpoint; a GGUF "
                              "model keeps its own types (auto) or is dequantized (none)",
                              gguf->string());
    }
    if (!backend.reads_fp8(config.hidden_size())) {
      return invalid_argument("--quantization fp8 needs the CUDA backend (FP8 tensor cores, "
                              "Hopper); {} does not compute with FP8 weights (it loads FP8 "
                              "checkpoints dequantized with --quantization auto)",
                              backend.name());
    }
    fp8 = Fp8Load::kQuantize;
  } else if (quantization != "auto" && quantization != "none") {
    LS_ASSIGN_OR_RETURN(GgmlType t, parse_quant_type(quantization));
    if (gguf) {
      return invalid_argument("{}: --quantization {} quantizes a safetensors checkpoint; a GGUF "
                              "model keeps its own types (auto) or is dequantized (none)",
                              gguf->string(), quantization);
    }
    quantize_to = t;
  }
  auto open_checkpoint = [&]() -> Result<Checkpoint> {
    if (!gguf) return Checkpoint::open(dir);
    LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(*gguf));
    // Linear weights in block types the backend reads stay quantized in the mapped file (the
    // CPU); the rest is dequantized. A tensor-parallel rank dequantizes everything: its slices
    // (a rank's heads, its MLP columns) need not line up with ggml's 32- or 256-value blocks.
    std::vector<GgmlType> keep;
    for (auto [g, q] : {std::pair{GgmlType::kQ8_0, kernels::QuantType::kQ8_0},
                        std::pair{GgmlType::kQ4_0, kernels::QuantType::kQ4_0},
                        std::pair{GgmlType::kQ4_1, kernels::QuantType::kQ4_1},
                        std::pair{GgmlType::kQ4_K, kernels::QuantType::kQ4_K},
                        std::pair{GgmlType::kQ5_K, kernels::QuantType::kQ5_K},
                        std::pair{GgmlType::kQ6_K, kernels::QuantType::kQ6_K}}) {
      if (quantization == "auto" && backend.reads_quantized(q)) keep.push_back(g);
    }
    if (shard.size > 1 && !keep.empty()) {
      if (shard.rank == 0) {
        LS_LOG_INFO("{}: tensor parallelism dequantizes the GGUF model's blocks to {} at load",
                    gguf->string(), dtype_name(backend.weight_dtype_for(DType::kF32)));
      }
      keep.clear();
    }
    return gguf_checkpoint(std::shared_ptr<const GgufFile>(std::move(file)), config,
                           backend.weight_dtype_for(DType::kF32), keep);
  };
  if (dummy) {
    // This rank's slice only, generated in place of reading (the quantization options apply to
    // the generated bf16 weights as to a checkpoint's).
    LS_ASSIGN_OR_RETURN(TpLayout layout, make_tp_layout(config, shard));
    if (shard.size > 1 && quantize_to) {
      return unimplemented("--tensor-parallel-size {}: tensor parallelism does not quantize to "
                           "ggml types at load (--quantization {})",
                           shard.size, quantization);
    }
    LS_ASSIGN_OR_RETURN(Checkpoint generated,
                        dummy_checkpoint(config, *arch, layout, shard.rank, dummy_seed));
    // (Dummy weights are bf16: no FP8 format to carry.)
    if (shard.size > 1) config = shard_config(config, layout, shard.rank, Fp8Shard::kDequantize);
    LS_ASSIGN_OR_RETURN(ModelWeights weights,
                        load_weights(generated, config, *arch, backend, quantize_to, fp8));
    backend.synchronize();
    LS_LOG_INFO("generated dummy weights for {} (seed {}, {} layers{}): {:.1f} MB on {}",
                dir.string(), dummy_seed, config.num_hidden_layers(),
                shard.size > 1 ? fmt::format(", tensor-parallel rank {} of {}", shard.rank,
                                             shard.size)
                               : std::string(),
                static_cast<double>(weights.bytes) / 1e6, backend.name());
    return std::unique_ptr<Model>(
        new Model(std::move(config), arch, std::move(weights), &backend, dir));
  }
  LS_ASSIGN_OR_RETURN(Checkpoint ckpt, open_checkpoint());
  if (shard.size > 1) {
    // One rank's slices, loaded as if they were a checkpoint of the rank's shard of the model.
    // --quantization fp8 quantizes each rank's slices after slicing: a scale per output row of
    // the slice (a column-parallel row keeps the one-GPU scale; a row-parallel o_proj / down_proj
    // row gets the scale of the rank's columns). An FP8 checkpoint's weights are sliced in the
    // form this backend computes with (Fp8Shard): per-row e4m3 where it reads FP8, dequantized
    // otherwise. A GGUF model arrives dequantized (open_checkpoint). ggml types at load are not
    // sliced, so they are refused.
    if (quantize_to) {
      return unimplemented("--tensor-parallel-size {}: tensor parallelism does not quantize to "
                           "ggml types at load (--quantization {}); bf16 / f16 / f32 and FP8 "
                           "checkpoints (optionally with --quantization fp8) and GGUF models load",
                           shard.size, quantization);
    }
    const Fp8Shard fp8_shard =
        fp8 != Fp8Load::kDequantize && backend.reads_fp8(config.hidden_size())
            ? Fp8Shard::kE4m3Rows
            : Fp8Shard::kDequantize;
    LS_ASSIGN_OR_RETURN(TpLayout layout, make_tp_layout(config, shard));
    // The shard points into the whole checkpoint's mapping: it holds the whole checkpoint.
    auto whole = std::make_shared<const Checkpoint>(std::move(ckpt));
    LS_ASSIGN_OR_RETURN(ckpt, shard_checkpoint(*whole, config, layout, shard.rank, fp8_shard));
    ckpt.hold(std::move(whole));
    config = shard_config(config, layout, shard.rank, fp8_shard);
  }
  LS_ASSIGN_OR_RETURN(ModelWeights weights,
                      load_weights(ckpt, config, *arch, backend, quantize_to, fp8));
  backend.synchronize();
  const ModelConfig::VocabSlice vocab = config.vocab_slice();
  LS_LOG_INFO("loaded {} ({}, {} layers, hidden {}, {}/{} heads, head_dim {}, vocab {}{}): {:.1f} MB of weights on {}",
              dir.string(), config.architecture(), config.num_hidden_layers(), config.hidden_size(),
              config.num_attention_heads(), config.num_key_value_heads(), config.head_dim(),
              vocab.full,
              vocab.parts > 1 ? fmt::format(", rows [{}, {}) of it", vocab.begin,
                                            vocab.begin + config.vocab_size())
                              : std::string(),
              static_cast<double>(weights.bytes) / 1e6, backend.name());
  return std::unique_ptr<Model>(new Model(std::move(config), arch, std::move(weights), &backend, dir));
}

}  // namespace ls
