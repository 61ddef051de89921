#pragma once
// A GGUF file as a model: the config.json facts its metadata states, and its tensors under the
// Hugging Face names the weight loader reads, dequantized. Only the architectures the model
// families implement are mapped (llama, mistral, qwen2, qwen3).
//
// Metadata -> config (as llama.cpp's convert_hf_to_gguf.py writes it, reversed):
//   general.architecture                       -> architectures / model_type
//   <arch>.embedding_length / feed_forward_length / block_count / context_length
//   <arch>.attention.head_count / head_count_kv / key_length (head_dim) / layer_norm_rms_epsilon
//   <arch>.rope.freq_base / dimension_count / scaling.{type,factor,original_context_length}
//   <arch>.attention.sliding_window; tokenizer.ggml.{bos,eos,padding}_token_id
//   vocab_size from token_embd.weight; tie_word_embeddings when output.weight is absent;
//   attention_bias when blk.0.attn_q.bias is present.
// The result goes through parse_model_config, so it is validated exactly like a config.json.
//
// llama.cpp's converter permutes the rows of q_proj and k_proj of llama-family models (llama,
// mistral) so that its "normal" RoPE rotates adjacent pairs; the loader undoes that permutation
// (as transformers' GGUF loader does) so the weights match the Hugging Face layout the model
// families use (rotate_half pairs). Qwen2/Qwen3 are converted without permutation.

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"
#include "io/gguf.h"
#include "io/model_config.h"

namespace ls {

// The GGUF file `model` names: `model` itself when it is a regular file that starts with the GGUF
// magic, or the only *.gguf file of a directory that has no config.json. nullopt when `model` is
// not a GGUF model (a Hugging Face directory, or nothing at all: the caller's own loader reports
// that); kInvalidArgument when a directory holds several *.gguf files and no config.json.
Result<std::optional<std::filesystem::path>> find_gguf_model(const std::filesystem::path& model);

Result<ModelConfig> gguf_model_config(const GgufFile& file);
// Stop ids and bos from the tokenizer metadata (GGUF has no generation_config.json).
Result<GenerationConfig> gguf_generation_config(const GgufFile& file);

// Every tensor under its Hugging Face name, dequantized to `dtype` (f32 or bf16; 1-D tensors such
// as norm weights and biases stay f32), with the q/k permutation undone for llama-family models.
// Tensors the mapping does not know keep their GGUF name, so Checkpoint::check_names reports them
// as unexpected. `config` must come from gguf_model_config(file).
Result<Checkpoint> gguf_checkpoint(const GgufFile& file, const ModelConfig& config, DType dtype);
// The same, but the 2-D linear weights (q/k/v/o/gate/up/down projections, lm_head) whose type is
// in `keep_quantized` stay in their blocks (Checkpoint::find_quantized, pointing into the mapped
// file; llama-family q/k: a row-permuted copy of the blocks), and such an embedding table is
// both dequantized (for the lookup) and kept quantized (for a tied lm_head). The checkpoint holds
// `file` while any quantized tensor points into it.
Result<Checkpoint> gguf_checkpoint(std::shared_ptr<const GgufFile> file, const ModelConfig& config,
                                   DType dtype, const std::vector<GgmlType>& keep_quantized);

}  // namespace ls
