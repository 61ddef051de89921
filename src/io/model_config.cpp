#include "io/model_config.h"

#include <cmath>
#include <memory>
#include <new>
#include <optional>

#include "core/log.h"
#include "io/fp8_format_json.h"
#include "io/gguf_model.h"
#include "io/json_util.h"

namespace ls {
namespace {

using io_json::Json;

// Sizes and ids above this are refused, so products of two of them (hidden x vocab, ...) never
// overflow int64 in the layers that use them.
constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;

// Reads fields of one JSON object, naming `source` and the field (with `prefix`, e.g.
// "rope_scaling.") in every error.
class Fields {
 public:
  Fields(const Json& obj, std::string_view source, std::string prefix = {})
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  std::string path(std::string_view key) const { return prefix_ + std::string(key); }
  bool has(std::string_view key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }

  Result<std::optional<int64_t>> opt_int(std::string_view key, int64_t min) const {
    LS_ASSIGN_OR_RETURN(auto v, io_json::opt_int(obj_, key, source_, path(key)));
    if (v) LS_RETURN_IF_ERROR(check_range(key, *v, min));
    return v;
  }
  Result<int64_t> req_int(std::string_view key, int64_t min) const {
    LS_ASSIGN_OR_RETURN(auto v, opt_int(key, min));
    if (!v) return missing(key);
    return *v;
  }
  // A finite number; `positive` also demands > 0.
  Result<std::optional<double>> opt_number(std::string_view key, bool positive) const {
    LS_ASSIGN_OR_RETURN(auto v, io_json::opt_number(obj_, key, source_, path(key)));
    if (v && (!std::isfinite(*v) || (positive && *v <= 0))) {
      return invalid_argument("{}: field \"{}\" must be a {}number, got {}", source_, path(key),
                              positive ? "positive " : "finite ", *v);
    }
    return v;
  }
  Result<double> req_number(std::string_view key, bool positive) const {
    LS_ASSIGN_OR_RETURN(auto v, opt_number(key, positive));
    if (!v) return missing(key);
    return *v;
  }
  Result<std::optional<bool>> opt_bool(std::string_view key) const {
    return io_json::opt_bool(obj_, key, source_, path(key));
  }
  Result<std::optional<std::string>> opt_string(std::string_view key) const {
    return io_json::opt_string(obj_, key, source_, path(key));
  }
  Status missing(std::string_view key) const {
    return invalid_argument("{}: required field \"{}\" is missing", source_, path(key));
  }

 private:
  Status check_range(std::string_view key, int64_t v, int64_t min) const {
    if (v < min) {
      return invalid_argument("{}: field \"{}\" must be {}, got {}", source_, path(key),
                              min == 1 ? "positive" : fmt::format("at least {}", min), v);
    }
    if (v > kMaxSize) {
      return invalid_argument("{}: field \"{}\" is implausibly large ({})", source_, path(key), v);
    }
    return {};
  }

  const Json& obj_;
  std::string_view source_;
  std::string prefix_;
};

Result<RopeType> parse_rope_type(std::string_view name, std::string_view source,
                                 const std::string& field) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "dynamic") return RopeType::kDynamic;
  if (name == "yarn") return RopeType::kYarn;
  if (name == "llama3") return RopeType::kLlama3;
  return unimplemented("{}: {} \"{}\" is not supported (default, linear, dynamic, yarn, llama3)",
                       source, field, name);
}

Result<RopeConfig> parse_rope(const Json& root, std::string_view source, int64_t max_pos) {
  const Fields top(root, source);
  const Json* dict = nullptr;
  std::string dict_name;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!top.has(key)) continue;
    const Json& v = root[key];
    if (!v.is_object()) {
      return invalid_argument("{}: field \"{}\" must be an object, got {}", source, key,
                              io_json::type_name(v));
    }
    // transformers: `rope_scaling or rope_parameters`, so an empty rope_scaling defers.
    if (dict == nullptr && !v.empty()) {
      dict = &v;
      dict_name = key;
    }
  }
  static const Json kEmpty = Json::object();
  if (dict == nullptr) {
    dict = &kEmpty;
    dict_name = "rope_parameters";
  }
  for (const auto& [key, value] : dict->items()) {
    if (value.is_object()) {
      return unimplemented("{}: per-layer-type RoPE settings ({}.{}) are not supported", source,
                           dict_name, key);
    }
  }
  const Fields rope(*dict, source, dict_name + ".");

  RopeConfig r;
  LS_ASSIGN_OR_RETURN(auto dict_theta, rope.opt_number("rope_theta", true));
  LS_ASSIGN_OR_RETURN(auto top_theta, top.opt_number("rope_theta", true));
  r.theta = dict_theta ? *dict_theta : top_theta ? *top_theta : 10000.0;

  LS_ASSIGN_OR_RETURN(auto type_name, rope.opt_string("rope_type"));
  std::string type_field = rope.path("rope_type");
  if (!type_name) {
    LS_ASSIGN_OR_RETURN(type_name, rope.opt_string("type"));
    type_field = rope.path("type");
  }
  LS_ASSIGN_OR_RETURN(r.type, parse_rope_type(type_name.value_or("default"), source, type_field));

  LS_ASSIGN_OR_RETURN(auto dict_partial, rope.opt_number("partial_rotary_factor", true));
  LS_ASSIGN_OR_RETURN(auto top_partial, top.opt_number("partial_rotary_factor", true));
  r.partial_rotary_factor = dict_partial ? *dict_partial : top_partial ? *top_partial : 1.0;
  if (r.partial_rotary_factor > 1.0) {
    return invalid_argument("{}: partial_rotary_factor must be in (0, 1], got {}", source,
                            r.partial_rotary_factor);
  }

  if (r.type == RopeType::kDefault) return r;

  LS_ASSIGN_OR_RETURN(auto factor, rope.opt_number("factor", true));
  if (r.type == RopeType::kYarn || r.type == RopeType::kLlama3) {
    // transformers lets a top-level original_max_position_embeddings (Phi3's spelling) win.
    LS_ASSIGN_OR_RETURN(auto top_orig, top.opt_int("original_max_position_embeddings", 1));
    LS_ASSIGN_OR_RETURN(auto dict_orig, rope.opt_int("original_max_position_embeddings", 1));
    r.original_max_position_embeddings = top_orig ? *top_orig : dict_orig ? *dict_orig : max_pos;
  }
  if (r.type == RopeType::kYarn && !factor) {
    factor = static_cast<double>(max_pos) / static_cast<double>(r.original_max_position_embeddings);
  }
  if (!factor) return rope.missing("factor");
  r.factor = *factor;

  if (r.type == RopeType::kLlama3) {
    LS_ASSIGN_OR_RETURN(r.low_freq_factor, rope.req_number("low_freq_factor", true));
    LS_ASSIGN_OR_RETURN(r.high_freq_factor, rope.req_number("high_freq_factor", true));
    if (r.high_freq_factor == r.low_freq_factor) {
      return invalid_argument("{}: {} and {} must differ (both {})", source,
                              rope.path("low_freq_factor"), rope.path("high_freq_factor"),
                              r.low_freq_factor);
    }
  }
  if (r.type == RopeType::kYarn) {
    LS_ASSIGN_OR_RETURN(auto beta_fast, rope.opt_number("beta_fast", false));
    LS_ASSIGN_OR_RETURN(auto beta_slow, rope.opt_number("beta_slow", false));
    // Python's `get("beta_fast") or 32`: zero also means the default.
    r.beta_fast = beta_fast.value_or(0) != 0 ? *beta_fast : 32;
    r.beta_slow = beta_slow.value_or(0) != 0 ? *beta_slow : 1;
    if (r.beta_fast <= 0 || r.beta_slow <= 0) {
      return invalid_argument("{}: {} and {} must be positive", source, rope.path("beta_fast"),
                              rope.path("beta_slow"));
    }
    LS_ASSIGN_OR_RETURN(r.attention_factor, rope.opt_number("attention_factor", true));
    LS_ASSIGN_OR_RETURN(r.mscale, rope.opt_number("mscale", false));
    LS_ASSIGN_OR_RETURN(r.mscale_all_dim, rope.opt_number("mscale_all_dim", false));
    LS_ASSIGN_OR_RETURN(auto truncate, rope.opt_bool("truncate"));
    r.truncate = truncate.value_or(true);
  }
  return r;
}

// An int, or (for bos_token_id) a list holding exactly one.
Result<std::optional<int64_t>> parse_token_id(const Json& root, std::string_view source,
                                              std::string_view key) {
  LS_ASSIGN_OR_RETURN(auto ids, io_json::int_or_int_list(root, key, source, key));
  if (ids.empty()) return std::optional<int64_t>();
  if (ids.size() > 1) {
    return invalid_argument("{}: field \"{}\" lists {} ids; one is expected", source, key,
                            ids.size());
  }
  if (ids[0] < 0 || ids[0] > kMaxSize) {
    return invalid_argument("{}: field \"{}\" is not a valid token id ({})", source, key, ids[0]);
  }
  return std::optional<int64_t>(ids[0]);
}

}  // namespace

Result<ModelConfig> parse_model_config(std::string_view json, std::string_view source_name) {
  const std::string source(source_name);
  try {
    auto parsed = io_json::parse(json, {});
    if (!parsed.ok()) {
      return Status(parsed.status().code(),
                    fmt::format("{}: {}", source, parsed.status().message()));
    }
    const Json& root = *parsed;
    if (!root.is_object()) {
      return invalid_argument("{}: must be a JSON object, got {}", source,
                              io_json::type_name(root));
    }
    const Fields f(root, source);
    ModelConfig c;
    c.source_ = source;

    if (f.has("architectures")) {
      const Json& archs = root["architectures"];
      if (!archs.is_array() || (!archs.empty() && !archs[0].is_string())) {
        return invalid_argument("{}: field \"architectures\" must be a list of strings", source);
      }
      if (!archs.empty()) c.architecture_ = archs[0].get<std::string>();
    }
    LS_ASSIGN_OR_RETURN(auto model_type, f.opt_string("model_type"));
    c.model_type_ = model_type.value_or("");
    if (c.architecture_.empty() && c.model_type_.empty()) {
      return invalid_argument("{}: neither \"architectures\" nor \"model_type\" names the model",
                              source);
    }

    LS_ASSIGN_OR_RETURN(c.hidden_size_, f.req_int("hidden_size", 1));
    LS_ASSIGN_OR_RETURN(c.intermediate_size_, f.req_int("intermediate_size", 1));
    LS_ASSIGN_OR_RETURN(c.num_hidden_layers_, f.req_int("num_hidden_layers", 1));
    LS_ASSIGN_OR_RETURN(c.num_attention_heads_, f.req_int("num_attention_heads", 1));
    LS_ASSIGN_OR_RETURN(c.vocab_size_, f.req_int("vocab_size", 1));
    LS_ASSIGN_OR_RETURN(c.max_position_embeddings_, f.req_int("max_position_embeddings", 1));
    LS_ASSIGN_OR_RETURN(c.rms_norm_eps_, f.req_number("rms_norm_eps", true));

    LS_ASSIGN_OR_RETURN(auto kv_heads, f.opt_int("num_key_value_heads", 1));
    c.num_key_value_heads_ = kv_heads.value_or(c.num_attention_heads_);
    if (c.num_attention_heads_ % c.num_key_value_heads_ != 0) {
      return invalid_argument(
          "{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", source,
          c.num_attention_heads_, c.num_key_value_heads_);
    }
    LS_ASSIGN_OR_RETURN(auto head_dim, f.opt_int("head_dim", 1));
    if (head_dim) {
      c.head_dim_ = *head_dim;
    } else if (c.hidden_size_ % c.num_attention_heads_ != 0) {
      return invalid_argument(
          "{}: no head_dim, and hidden_size ({}) is not a multiple of num_attention_heads ({})",
          source, c.hidden_size_, c.num_attention_heads_);
    } else {
      c.head_dim_ = c.hidden_size_ / c.num_attention_heads_;
    }

    LS_ASSIGN_OR_RETURN(auto act, f.opt_string("hidden_act"));
    if (act && *act != "silu") {
      return unimplemented("{}: hidden_act \"{}\" is not supported (only \"silu\")", source, *act);
    }
    LS_ASSIGN_OR_RETURN(auto tie, f.opt_bool("tie_word_embeddings"));
    c.tie_word_embeddings_ = tie.value_or(false);
    LS_ASSIGN_OR_RETURN(c.attention_bias_, f.opt_bool("attention_bias"));
    LS_ASSIGN_OR_RETURN(c.mlp_bias_, f.opt_bool("mlp_bias"));

    // Qwen2/Qwen3 keep a sliding_window value even when use_sliding_window is false; it is then
    // ignored (not validated), as transformers does.
    LS_ASSIGN_OR_RETURN(auto use_window, f.opt_bool("use_sliding_window"));
    if (use_window.value_or(true)) {
      LS_ASSIGN_OR_RETURN(c.sliding_window_, f.opt_int("sliding_window", 1));
    }
    LS_ASSIGN_OR_RETURN(c.max_window_layers_, f.opt_int("max_window_layers", 0));

    LS_ASSIGN_OR_RETURN(c.bos_token_id_, parse_token_id(root, source, "bos_token_id"));
    LS_ASSIGN_OR_RETURN(c.pad_token_id_, parse_token_id(root, source, "pad_token_id"));
    LS_ASSIGN_OR_RETURN(c.eos_token_ids_,
                        io_json::int_or_int_list(root, "eos_token_id", source, "eos_token_id"));
    for (int64_t id : c.eos_token_ids_) {
      if (id < 0 || id > kMaxSize) {
        return invalid_argument("{}: field \"eos_token_id\" holds an invalid token id ({})", source,
                                id);
      }
    }

    const char* dtype_key = f.has("dtype") ? "dtype" : "torch_dtype";
    LS_ASSIGN_OR_RETURN(auto dtype_name, f.opt_string(dtype_key));
    if (dtype_name) {
      const auto d = dtype_from_name(*dtype_name);
      if (d == DType::kF32 || d == DType::kF16 || d == DType::kBF16) {
        c.dtype_ = d;
      } else {
        LS_LOG_WARN("{}: ignoring {} \"{}\" (not float32, float16 or bfloat16)", source, dtype_key,
                    *dtype_name);
      }
    }

    if (f.has("quantization_config")) {
      LS_ASSIGN_OR_RETURN(c.fp8_weights_, parse_fp8_format(root["quantization_config"], source));
    }
    LS_ASSIGN_OR_RETURN(c.rope_, parse_rope(root, source, c.max_position_embeddings_));
    const int64_t rotary_dim = c.rotary_dim();
    const int64_t min_rotary_dim = c.rope_.type == RopeType::kDynamic ? 4 : 2;
    if (rotary_dim < min_rotary_dim || rotary_dim % 2 != 0) {
      return invalid_argument(
          "{}: the rotary dimension int(head_dim {} x partial_rotary_factor {}) = {} must be even "
          "and at least {}",
          source, c.head_dim_, c.rope_.partial_rotary_factor, rotary_dim, min_rotary_dim);
    }
    return c;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory", source);
  } catch (const std::exception& e) {
    return internal_error("{}: {}", source, e.what());
  }
}

Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir) {
  LS_ASSIGN_OR_RETURN(std::optional<std::filesystem::path> gguf, find_gguf_model(model_dir));
  if (gguf) {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(*gguf));
    return gguf_model_config(*file);
  }
  const auto path = model_dir / "config.json";
  LS_ASSIGN_OR_RETURN(std::string text, io_json::read_file(path));
  return parse_model_config(text, path.string());
}

}  // namespace ls
