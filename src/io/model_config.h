#pragma once
// ModelConfig: the facts a Hugging Face config.json states about a decoder-only model, validated
// and immutable. It describes; it does not decide which architectures are supported (the model
// registry does that with architecture()), so unknown architectures are recorded, not rejected.
//
// Resolution rules (those of transformers v5 for Llama/Mistral/Qwen2/Qwen3):
// - num_key_value_heads defaults to num_attention_heads; head_dim is the explicit value when
//   present (Qwen3's differs from hidden/heads), else hidden_size / num_attention_heads, which
//   must then divide exactly.
// - hidden_act must be "silu" (absent means silu); anything else is kUnimplemented.
// - sliding_window: absent or null means none, and so does Qwen2/Qwen3's use_sliding_window: false.
// - RoPE comes in three spellings: top-level rope_theta + rope_scaling{rope_type|type, ...}
//   (rope_type wins over the legacy type), or v5's rope_parameters{rope_theta, rope_type, ...}.
//   A non-empty rope_scaling wins over rope_parameters; rope_theta inside the dict wins over the
//   top-level one; the default theta is 1e4. Type null/"default" -> kDefault; linear, dynamic,
//   yarn, llama3 are supported; any other type is kUnimplemented naming config.json.
// - Required: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
//   max_position_embeddings, rms_norm_eps, and one of architectures / model_type.
// Every error names the source (config.json path) and the field.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/fp8_format.h"
#include "io/rope.h"

namespace ls {

class ModelConfig {
 public:
  // First entry of "architectures" ("LlamaForCausalLM"); empty when the config has none.
  const std::string& architecture() const { return architecture_; }
  const std::string& model_type() const { return model_type_; }  // "llama", "qwen3"; may be empty
  int64_t hidden_size() const { return hidden_size_; }
  int64_t intermediate_size() const { return intermediate_size_; }
  int64_t num_hidden_layers() const { return num_hidden_layers_; }
  int64_t num_attention_heads() const { return num_attention_heads_; }
  int64_t num_key_value_heads() const { return num_key_value_heads_; }
  int64_t head_dim() const { return head_dim_; }
  // The vocabulary rows this model holds: the whole vocabulary, or one tensor-parallel rank's
  // slice (padded; see vocab_slice()).
  int64_t vocab_size() const { return vocab_size_; }
  // Vocabulary-parallel embedding and LM head (model/tensor_parallel.h): this config's
  // vocab_size() rows are ids [begin, begin + vocab_size()) of a vocabulary of `full` ids split in
  // `parts` equal slices (the last ones padded with zero rows past `full`). parts == 1: the whole
  // vocabulary (begin 0, full == vocab_size()).
  struct VocabSlice {
    int64_t begin = 0;
    int64_t parts = 1;
    int64_t full = 0;
  };
  VocabSlice vocab_slice() const {
    return vocab_slice_.parts > 1 ? vocab_slice_ : VocabSlice{0, 1, vocab_size_};
  }
  // The whole vocabulary's size (token ids are in [0, full_vocab_size())).
  int64_t full_vocab_size() const { return vocab_slice().full; }
  int64_t max_position_embeddings() const { return max_position_embeddings_; }
  double rms_norm_eps() const { return rms_norm_eps_; }
  bool tie_word_embeddings() const { return tie_word_embeddings_; }  // default false
  // As stated; absent -> nullopt (the architecture decides: Qwen2 has q/k/v biases regardless).
  std::optional<bool> attention_bias() const { return attention_bias_; }
  std::optional<bool> mlp_bias() const { return mlp_bias_; }
  // Tokens of the local attention window; nullopt = full attention.
  std::optional<int64_t> sliding_window() const { return sliding_window_; }
  // Qwen2/Qwen3: layers at or above this index use the sliding window (when there is one).
  std::optional<int64_t> max_window_layers() const { return max_window_layers_; }
  std::optional<int64_t> bos_token_id() const { return bos_token_id_; }
  // eos_token_id as a list (a single int becomes one entry); empty when absent.
  const std::vector<int64_t>& eos_token_ids() const { return eos_token_ids_; }
  std::optional<int64_t> pad_token_id() const { return pad_token_id_; }
  // "dtype" (v5) or "torch_dtype": float32/float16/bfloat16; nullopt when absent or another type.
  std::optional<DType> dtype() const { return dtype_; }
  const RopeConfig& rope() const { return rope_; }
  // quantization_config of an FP8 checkpoint (io/fp8_format.h); nullopt when the config has none.
  // Any other quantization_config is refused when the config is parsed.
  const std::optional<Fp8CheckpointFormat>& fp8_weights() const { return fp8_weights_; }
  // int(head_dim * partial_rotary_factor).
  int64_t rotary_dim() const { return rope_rotary_dim(rope_, head_dim_); }
  // Where the config came from, for messages.
  const std::string& source() const { return source_; }

  // The same config with the head counts and MLP width of one tensor-parallel rank's shard
  // (model/tensor_parallel.h); head_dim and everything else stay as stated.
  ModelConfig with_shard_sizes(int64_t num_attention_heads, int64_t num_key_value_heads,
                               int64_t intermediate_size) const {
    ModelConfig c = *this;
    c.num_attention_heads_ = num_attention_heads;
    c.num_key_value_heads_ = num_key_value_heads;
    c.intermediate_size_ = intermediate_size;
    return c;
  }
  // The same config with another FP8 weight format (nullopt: float weights), for a
  // tensor-parallel rank whose shard stores its FP8 weights differently (model/tensor_parallel.h).
  ModelConfig with_fp8_weights(std::optional<Fp8CheckpointFormat> format) const {
    ModelConfig c = *this;
    c.fp8_weights_ = std::move(format);
    return c;
  }
  // The same config holding `rows` vocabulary rows from id `begin`, one of `parts` slices of
  // this config's vocabulary (vocab_slice()).
  ModelConfig with_vocab_slice(int64_t begin, int64_t rows, int64_t parts) const {
    ModelConfig c = *this;
    c.vocab_slice_ = VocabSlice{begin, parts, vocab_size_};
    c.vocab_size_ = rows;
    return c;
  }

 private:
  friend Result<ModelConfig> parse_model_config(std::string_view json,
                                                std::string_view source_name);
  ModelConfig() = default;

  std::string architecture_;
  std::string model_type_;
  int64_t hidden_size_ = 0;
  int64_t intermediate_size_ = 0;
  int64_t num_hidden_layers_ = 0;
  int64_t num_attention_heads_ = 0;
  int64_t num_key_value_heads_ = 0;
  int64_t head_dim_ = 0;
  int64_t vocab_size_ = 0;
  VocabSlice vocab_slice_;  // parts == 1: the whole vocabulary
  int64_t max_position_embeddings_ = 0;
  double rms_norm_eps_ = 0;
  bool tie_word_embeddings_ = false;
  std::optional<bool> attention_bias_;
  std::optional<bool> mlp_bias_;
  std::optional<int64_t> sliding_window_;
  std::optional<int64_t> max_window_layers_;
  std::optional<int64_t> bos_token_id_;
  std::vector<int64_t> eos_token_ids_;
  std::optional<int64_t> pad_token_id_;
  std::optional<DType> dtype_;
  RopeConfig rope_;
  std::optional<Fp8CheckpointFormat> fp8_weights_;
  std::string source_;
};

// Parses config.json text; `source_name` names it in errors.
Result<ModelConfig> parse_model_config(std::string_view json, std::string_view source_name);
// Reads <model_dir>/config.json.
Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir);

}  // namespace ls
