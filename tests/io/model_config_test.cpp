#include "io/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "io_test_util.h"

namespace ls {
namespace {

// config.json files as published on the Hugging Face hub (trimmed of keys nothing reads).
constexpr const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 128256})";

// Qwen2.5-7B-Instruct with the YaRN block its model card says to add for long inputs.
constexpr const char* kQwen25Yarn = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 152064,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})";

constexpr const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

constexpr const char* kMistral01 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

constexpr const char* kLlama2 = R"({
  "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16", "transformers_version": "4.31.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

// What transformers 5.17 writes (LlamaConfig(...).to_json_string()): rope_parameters, "dtype".
constexpr const char* kV5 = R"({
  "attention_bias": false, "bos_token_id": 1, "dtype": "float32", "eos_token_id": 2,
  "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
  "max_position_embeddings": 2048, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 4, "num_hidden_layers": 1, "num_key_value_heads": 4,
  "pad_token_id": null, "rms_norm_eps": 1e-06,
  "rope_parameters": {"factor": 2.0, "rope_theta": 500000.0, "rope_type": "linear",
                      "type": "linear"},
  "tie_word_embeddings": false, "transformers_version": "5.17.0", "vocab_size": 32000})";

ModelConfig parse_ok(std::string_view json) {
  auto r = parse_model_config(json, "/m/config.json");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

TEST(ModelConfig, Llama31) {
  const ModelConfig c = parse_ok(kLlama31);
  EXPECT_EQ(c.architecture(), "LlamaForCausalLM");
  EXPECT_EQ(c.model_type(), "llama");
  EXPECT_EQ(c.hidden_size(), 4096);
  EXPECT_EQ(c.intermediate_size(), 14336);
  EXPECT_EQ(c.num_hidden_layers(), 32);
  EXPECT_EQ(c.num_attention_heads(), 32);
  EXPECT_EQ(c.num_key_value_heads(), 8);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.rotary_dim(), 128);
  EXPECT_EQ(c.vocab_size(), 128256);
  EXPECT_EQ(c.max_position_embeddings(), 131072);
  EXPECT_EQ(c.rms_norm_eps(), 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings());
  EXPECT_EQ(c.attention_bias(), false);
  EXPECT_EQ(c.mlp_bias(), false);
  EXPECT_EQ(c.sliding_window(), std::nullopt);
  EXPECT_EQ(c.bos_token_id(), 128000);
  EXPECT_EQ(c.eos_token_ids(), (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.dtype(), DType::kBF16);
  EXPECT_EQ(c.source(), "/m/config.json");
  const RopeConfig& r = c.rope();
  EXPECT_EQ(r.type, RopeType::kLlama3);
  EXPECT_EQ(r.theta, 500000.0);
  EXPECT_EQ(r.factor, 8.0);
  EXPECT_EQ(r.low_freq_factor, 1.0);
  EXPECT_EQ(r.high_freq_factor, 4.0);
  EXPECT_EQ(r.original_max_position_embeddings, 8192);
  EXPECT_EQ(rope_attention_scaling(r), 1.0);
}

TEST(ModelConfig, Qwen25WithYarnAndDisabledSlidingWindow) {
  const ModelConfig c = parse_ok(kQwen25Yarn);
  EXPECT_EQ(c.architecture(), "Qwen2ForCausalLM");
  EXPECT_EQ(c.head_dim(), 128);  // 3584 / 28
  EXPECT_EQ(c.num_key_value_heads(), 4);
  EXPECT_EQ(c.sliding_window(), std::nullopt);  // use_sliding_window: false
  EXPECT_EQ(c.max_window_layers(), 28);
  EXPECT_EQ(c.attention_bias(), std::nullopt);  // Qwen2's biases are implied, not configured
  EXPECT_EQ(c.eos_token_ids(), (std::vector<int64_t>{151645}));
  EXPECT_EQ(c.rope().type, RopeType::kYarn);  // legacy "type" spelling
  EXPECT_EQ(c.rope().theta, 1e6);
  EXPECT_EQ(c.rope().factor, 4.0);
  EXPECT_EQ(c.rope().original_max_position_embeddings, 32768);
  EXPECT_EQ(c.rope().beta_fast, 32);
  EXPECT_EQ(c.rope().beta_slow, 1);
  EXPECT_TRUE(c.rope().truncate);
  EXPECT_DOUBLE_EQ(rope_attention_scaling(c.rope()), 0.1 * std::log(4.0) + 1.0);
}

TEST(ModelConfig, Qwen3ExplicitHeadDimAndTiedEmbeddings) {
  const ModelConfig c = parse_ok(kQwen3);
  EXPECT_EQ(c.architecture(), "Qwen3ForCausalLM");
  EXPECT_EQ(c.hidden_size() / c.num_attention_heads(), 64);
  EXPECT_EQ(c.head_dim(), 128);  // explicit, and different from hidden / heads
  EXPECT_TRUE(c.tie_word_embeddings());
  EXPECT_EQ(c.attention_bias(), false);
  EXPECT_EQ(c.sliding_window(), std::nullopt);
  EXPECT_EQ(c.rope().type, RopeType::kDefault);  // rope_scaling: null
  EXPECT_EQ(c.rope().theta, 1e6);                // an integer in the file
  EXPECT_EQ(c.rms_norm_eps(), 1e-6);
}

TEST(ModelConfig, MistralSlidingWindow) {
  const ModelConfig c = parse_ok(kMistral01);
  EXPECT_EQ(c.architecture(), "MistralForCausalLM");
  EXPECT_EQ(c.sliding_window(), 4096);
  EXPECT_EQ(c.rope().theta, 1e4);
  EXPECT_EQ(c.num_key_value_heads(), 8);
  EXPECT_EQ(c.bos_token_id(), 1);
  EXPECT_EQ(c.eos_token_ids(), (std::vector<int64_t>{2}));
}

TEST(ModelConfig, DisabledSlidingWindowIsNotValidated) {
  auto j = nlohmann::json::parse(kQwen25Yarn);
  j["sliding_window"] = 0;
  EXPECT_EQ(parse_ok(j.dump()).sliding_window(), std::nullopt);
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse_ok(j.dump()).sliding_window(), 4096);
}

TEST(ModelConfig, Llama2Defaults) {
  const ModelConfig c = parse_ok(kLlama2);
  EXPECT_EQ(c.rope().type, RopeType::kDefault);
  EXPECT_EQ(c.rope().theta, 10000.0);  // no rope_theta: the default
  EXPECT_EQ(c.num_key_value_heads(), 32);
  EXPECT_EQ(c.dtype(), DType::kF16);
  EXPECT_EQ(c.attention_bias(), std::nullopt);
}

TEST(ModelConfig, TransformersV5Spelling) {
  const ModelConfig c = parse_ok(kV5);
  EXPECT_EQ(c.architecture(), "");  // no architectures: model_type names the model
  EXPECT_EQ(c.model_type(), "llama");
  EXPECT_EQ(c.dtype(), DType::kF32);  // "dtype", not "torch_dtype"
  EXPECT_EQ(c.pad_token_id(), std::nullopt);
  EXPECT_EQ(c.rope().type, RopeType::kLinear);
  EXPECT_EQ(c.rope().theta, 500000.0);
  EXPECT_EQ(c.rope().factor, 2.0);
}

TEST(ModelConfig, RopeSpellingPrecedence) {
  auto with = [](const std::string& extra) {
    return std::string(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10,
      "max_position_embeddings": 2048, "rms_norm_eps": 1e-6)") +
           extra + "}";
  };
  // rope_type wins over the legacy type key.
  EXPECT_EQ(parse_ok(with(R"(,"rope_scaling": {"rope_type": "linear", "type": "dynamic",
                            "factor": 2.0})"))
                .rope()
                .type,
            RopeType::kLinear);
  // A non-empty rope_scaling wins over rope_parameters; an empty one defers to it.
  EXPECT_EQ(parse_ok(with(R"(,"rope_scaling": {"type": "linear", "factor": 2.0},
                            "rope_parameters": {"rope_type": "dynamic", "factor": 3.0})"))
                .rope()
                .factor,
            2.0);
  EXPECT_EQ(parse_ok(with(R"(,"rope_scaling": {},
                            "rope_parameters": {"rope_type": "dynamic", "factor": 3.0})"))
                .rope()
                .type,
            RopeType::kDynamic);
  // rope_theta inside the dict wins over the top-level one.
  EXPECT_EQ(parse_ok(with(R"(,"rope_theta": 1000.0, "rope_parameters": {"rope_theta": 2000.0})"))
                .rope()
                .theta,
            2000.0);
  EXPECT_EQ(parse_ok(with(R"(,"rope_theta": 1000.0, "rope_scaling": {"rope_type": "linear",
                            "factor": 2.0})"))
                .rope()
                .theta,
            1000.0);
  // "default" and a null type are the plain RoPE.
  EXPECT_EQ(parse_ok(with(R"(,"rope_scaling": {"rope_type": "default"})")).rope().type,
            RopeType::kDefault);
  EXPECT_EQ(
      parse_ok(with(R"(,"rope_parameters": {"rope_type": null, "rope_theta": 5.0})")).rope().type,
      RopeType::kDefault);
  // yarn without a factor takes max_position / original_max_position; llama3 without
  // original_max_position takes max_position.
  const ModelConfig yarn = parse_ok(
      with(R"(,"rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 512})"));
  EXPECT_EQ(yarn.rope().factor, 4.0);
  const ModelConfig llama3 = parse_ok(with(R"(,"rope_scaling": {"rope_type": "llama3",
      "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0})"));
  EXPECT_EQ(llama3.rope().original_max_position_embeddings, 2048);
  // partial_rotary_factor at the top level.
  const ModelConfig partial = parse_ok(with(R"(,"partial_rotary_factor": 0.5)"));
  EXPECT_EQ(partial.rotary_dim(), 8);
}

TEST(ModelConfig, LoadFromDirectory) {
  io_test::TempDir dir;
  auto missing = load_model_config(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find((dir / "config.json").string()), std::string::npos);

  io_test::write_text(dir / "config.json", kQwen3);
  auto loaded = load_model_config(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->head_dim(), 128);
  EXPECT_EQ(loaded->source(), (dir / "config.json").string());
}

// ---------------------------------------------------------------------------------------------
// Malformed configs: one clear error naming config.json and the field.

struct Bad {
  const char* what;
  std::string json;
  StatusCode code;
  std::string fragment;
};

// The Llama-2 config with the keys of `patch` (a JSON object) replaced; a null value removes the
// key.
std::string llama2_patched(const std::string& patch) {
  auto j = nlohmann::json::parse(kLlama2);
  const auto changes = nlohmann::json::parse(patch);
  for (const auto& [key, value] : changes.items()) {
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
  }
  return j.dump();
}

std::string llama2_with(const std::string& key, const std::string& value) {
  return llama2_patched("{\"" + key + "\": " + (value.empty() ? "null" : value) + "}");
}

TEST(ModelConfig, MalformedConfigs) {
  const auto inv = StatusCode::kInvalidArgument;
  const auto unimpl = StatusCode::kUnimplemented;
  const std::vector<Bad> cases = {
      {"not JSON", R"({"hidden_size": 64,)", StatusCode::kDataLoss, "parse error"},
      {"not an object", "[1]", inv, "must be a JSON object"},
      {"missing hidden_size", llama2_with("hidden_size", ""), inv,
       "required field \"hidden_size\" is missing"},
      {"missing rms_norm_eps", llama2_with("rms_norm_eps", ""), inv, "\"rms_norm_eps\""},
      {"missing vocab_size", llama2_with("vocab_size", ""), inv, "\"vocab_size\""},
      {"hidden_size string", llama2_with("hidden_size", R"("4096")"), inv,
       "field \"hidden_size\" must be an integer, got a string"},
      {"hidden_size float", llama2_with("hidden_size", "4096.5"), inv,
       "field \"hidden_size\" must be an integer, got a non-integer number"},
      {"zero layers", llama2_with("num_hidden_layers", "0"), inv,
       "field \"num_hidden_layers\" must be positive, got 0"},
      {"negative heads", llama2_with("num_attention_heads", "-4"), inv,
       "\"num_attention_heads\" must be positive"},
      {"huge vocab", llama2_with("vocab_size", "99999999999"), inv, "implausibly large"},
      {"heads not divisible by kv heads", llama2_with("num_key_value_heads", "5"), inv,
       "num_attention_heads (32) is not a multiple of num_key_value_heads (5)"},
      {"hidden not divisible by heads", llama2_with("hidden_size", "4090"), inv,
       "no head_dim, and hidden_size (4090) is not a multiple of num_attention_heads (32)"},
      {"eps not positive", llama2_with("rms_norm_eps", "0"), inv,
       "field \"rms_norm_eps\" must be a positive number"},
      {"gelu", llama2_with("hidden_act", R"("gelu")"), unimpl, "hidden_act \"gelu\""},
      {"tie not bool", llama2_with("tie_word_embeddings", R"("yes")"), inv,
       "\"tie_word_embeddings\" must be a boolean"},
      {"eos string", llama2_with("eos_token_id", R"("2")"), inv,
       "\"eos_token_id\" must be an integer or a list of integers"},
      {"eos list with string", llama2_with("eos_token_id", R"([2, "x"])"), inv,
       "\"eos_token_id[1]\" must be an integer"},
      {"negative eos", llama2_with("eos_token_id", "-1"), inv, "invalid token id"},
      {"architectures not a list", llama2_with("architectures", R"("LlamaForCausalLM")"), inv,
       "\"architectures\" must be a list of strings"},
      {"no architecture or model_type",
       llama2_patched(R"({"architectures": null, "model_type": null})"), inv,
       "neither \"architectures\" nor \"model_type\""},
      {"window not positive", llama2_with("sliding_window", "0"), inv,
       "field \"sliding_window\" must be positive, got 0"},
      {"rope_scaling string", llama2_with("rope_scaling", R"("linear")"), inv,
       "field \"rope_scaling\" must be an object"},
      {"unknown rope type", llama2_with("rope_scaling", R"({"rope_type": "longrope"})"), unimpl,
       "rope_scaling.rope_type \"longrope\" is not supported"},
      {"unknown legacy rope type", llama2_with("rope_scaling", R"({"type": "su", "factor": 2})"),
       unimpl, "rope_scaling.type \"su\""},
      {"rope type not string", llama2_with("rope_scaling", R"({"rope_type": 3})"), inv,
       "\"rope_scaling.rope_type\" must be a string"},
      {"linear without factor", llama2_with("rope_scaling", R"({"rope_type": "linear"})"), inv,
       "required field \"rope_scaling.factor\" is missing"},
      {"factor not positive", llama2_with("rope_scaling", R"({"type": "dynamic", "factor": 0})"),
       inv, "\"rope_scaling.factor\" must be a positive number"},
      {"llama3 without low_freq_factor",
       llama2_with("rope_scaling",
                   R"({"rope_type": "llama3", "factor": 8, "high_freq_factor": 4})"),
       inv, "\"rope_scaling.low_freq_factor\" is missing"},
      {"llama3 equal freq factors",
       llama2_with("rope_scaling", R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 2,
                                       "high_freq_factor": 2})"),
       inv, "must differ"},
      {"yarn truncate not bool",
       llama2_with("rope_scaling", R"({"rope_type": "yarn", "factor": 2, "truncate": 1})"), inv,
       "\"rope_scaling.truncate\" must be a boolean"},
      {"theta not positive", llama2_with("rope_theta", "-1"), inv,
       "\"rope_theta\" must be a positive number"},
      {"v5 theta wrong type", llama2_with("rope_parameters", R"({"rope_theta": "1e4"})"), inv,
       "\"rope_parameters.rope_theta\" must be a number"},
      {"per-layer rope", llama2_with("rope_parameters", R"({"full_attention": {"rope_type":
                                                           "default"}})"),
       unimpl, "per-layer-type"},
      {"partial above one", llama2_with("partial_rotary_factor", "1.5"), inv,
       "partial_rotary_factor must be in (0, 1]"},
      {"odd rotary dim", llama2_patched(R"({"head_dim": 6, "partial_rotary_factor": 0.5})"), inv,
       "int(head_dim 6 x partial_rotary_factor 0.5) = 3 must be even"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    auto r = parse_model_config(b.json, "/models/x/config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), b.code) << r.status().to_string();
    EXPECT_EQ(r.status().message().rfind("/models/x/config.json: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(b.fragment), std::string::npos) << r.status().message();
  }
}

// quantization_config of published FP8 checkpoints (RedHatAI's FP8-dynamic compressed-tensors
// configs; the fine-grained fp8 config of DeepSeek-V3 / Qwen3-FP8), trimmed.
constexpr const char* kCtChannel = R"({"quantization_config": {
  "quant_method": "compressed-tensors", "format": "float-quantized",
  "quantization_status": "compressed", "ignore": ["lm_head"], "kv_cache_scheme": null,
  "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": true,
                "dynamic": false, "group_size": null, "block_structure": null},
    "input_activations": {"type": "float", "num_bits": 8, "strategy": "token",
                          "symmetric": true, "dynamic": true},
    "output_activations": null}}}})";

std::string with_quant(const std::string& patch_json) {
  return llama2_patched(patch_json);
}

// ct: the compressed-tensors config above with `group` fields of the group replaced.
std::string ct_with(const std::string& section, const std::string& key, const std::string& value) {
  auto j = nlohmann::json::parse(kCtChannel);
  auto& qc = j["quantization_config"];
  auto& target = section.empty() ? qc : section == "group" ? qc["config_groups"]["group_0"]
                                                           : qc["config_groups"]["group_0"][section];
  target[key] = nlohmann::json::parse(value);
  return with_quant(j.dump());
}

TEST(ModelConfig, Fp8Formats) {
  auto none = parse_model_config(kLlama2, "c");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->fp8_weights());

  auto ct = parse_model_config(with_quant(kCtChannel), "c");
  ASSERT_TRUE(ct.ok()) << ct.status().to_string();
  ASSERT_TRUE(ct->fp8_weights());
  EXPECT_EQ(ct->fp8_weights()->method, "compressed-tensors");
  EXPECT_EQ(ct->fp8_weights()->layout, Fp8ScaleLayout::kChannel);
  EXPECT_EQ(ct->fp8_weights()->scale_suffix, "weight_scale");
  EXPECT_EQ(ct->fp8_weights()->ignore, std::vector<std::string>{"lm_head"});

  auto tensor = parse_model_config(ct_with("weights", "strategy", R"("tensor")"), "c");
  ASSERT_TRUE(tensor.ok()) << tensor.status().to_string();
  EXPECT_EQ(tensor->fp8_weights()->layout, Fp8ScaleLayout::kTensor);
  // Weight-only FP8 (no input_activations) loads too: activations are quantized per token.
  auto weight_only = parse_model_config(ct_with("group", "input_activations", "null"), "c");
  ASSERT_TRUE(weight_only.ok()) << weight_only.status().to_string();

  auto block = parse_model_config(
      with_quant(R"({"quantization_config": {"quant_method": "fp8", "activation_scheme":
                 "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}})"),
      "c");
  ASSERT_TRUE(block.ok()) << block.status().to_string();
  EXPECT_EQ(block->fp8_weights()->method, "fp8");
  EXPECT_EQ(block->fp8_weights()->layout, Fp8ScaleLayout::kBlock);
  EXPECT_EQ(block->fp8_weights()->block_rows, 128);
  EXPECT_EQ(block->fp8_weights()->block_cols, 128);
  EXPECT_EQ(block->fp8_weights()->scale_suffix, "weight_scale_inv");
}

// Every format, scale layout or activation scheme the loader does not implement is refused when
// config.json is parsed, naming it.
TEST(ModelConfig, Fp8FormatsRefused) {
  const auto inv = StatusCode::kInvalidArgument;
  const auto unimpl = StatusCode::kUnimplemented;
  const std::vector<Bad> cases = {
      {"awq", with_quant(R"({"quantization_config": {"quant_method": "awq", "bits": 4}})"), unimpl,
       "quant_method \"awq\" is not supported"},
      {"no quant_method", with_quant(R"({"quantization_config": {"bits": 4}})"), inv,
       "quant_method is missing"},
      {"not an object", with_quant(R"({"quantization_config": "fp8"})"), inv, "must be an object"},
      {"int8 compressed-tensors", ct_with("", "format", R"("int-quantized")"), unimpl,
       "compressed-tensors format \"int-quantized\""},
      {"nvfp4", ct_with("", "format", R"("nvfp4-pack-quantized")"), unimpl,
       "\"nvfp4-pack-quantized\""},
      {"int weights", ct_with("weights", "type", R"("int")"), unimpl, ".weights.type \"int\""},
      {"4-bit float", ct_with("weights", "num_bits", "4"), unimpl, "num_bits 4"},
      {"group strategy", ct_with("weights", "strategy", R"("group")"), unimpl,
       "strategy \"group\" is not supported"},
      {"asymmetric", ct_with("weights", "symmetric", "false"), unimpl, "asymmetric"},
      {"static activations", ct_with("input_activations", "dynamic", "false"), unimpl,
       "input_activations are static"},
      {"output activations", ct_with("group", "output_activations",
                                     R"({"type": "float", "num_bits": 8})"),
       unimpl, "output_activations"},
      {"kv cache scheme", ct_with("", "kv_cache_scheme", R"({"type": "float", "num_bits": 8})"),
       unimpl, "kv_cache_scheme"},
      {"block without structure", ct_with("weights", "strategy", R"("block")"), inv,
       "needs block_structure"},
      {"native static", with_quant(R"({"quantization_config": {"quant_method": "fp8",
         "activation_scheme": "static", "weight_block_size": [128, 128]}})"),
       unimpl, "activation_scheme \"static\""},
      {"native e5m2", with_quant(R"({"quantization_config": {"quant_method": "fp8",
         "fmt": "e5m2", "weight_block_size": [128, 128]}})"),
       unimpl, "fmt \"e5m2\""},
      {"native per-tensor", with_quant(R"({"quantization_config": {"quant_method": "fp8",
         "activation_scheme": "dynamic"}})"),
       unimpl, "without weight_block_size"},
      {"native bad block", with_quant(R"({"quantization_config": {"quant_method": "fp8",
         "weight_block_size": [128, 0]}})"),
       inv, "weight_block_size\" must be [rows, cols]"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    auto r = parse_model_config(b.json, "/models/x/config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), b.code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(b.fragment), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace ls
