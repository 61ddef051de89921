#include "io/fp8_format.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/fp8_format_json.h"

namespace ls {

namespace {

using io_json::Json;

constexpr std::string_view kField = "quantization_config";

Result<std::optional<std::string>> opt_string(const Json& obj, std::string_view key,
                                              std::string_view source, const std::string& path) {
  return io_json::opt_string(obj, key, source, path);
}

bool is_null_or_absent(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null();
}

Result<std::vector<std::string>> string_list(const Json& obj, std::string_view key,
                                             std::string_view source, const std::string& path) {
  std::vector<std::string> out;
  if (is_null_or_absent(obj, key)) return out;
  const Json& v = obj[std::string(key)];
  if (!v.is_array()) {
    return invalid_argument("{}: field \"{}\" must be a list of strings", source, path);
  }
  for (const Json& e : v) {
    if (!e.is_string()) {
      return invalid_argument("{}: field \"{}\" must be a list of strings", source, path);
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

// [r, c] of positive integers.
Status block_shape(const Json& v, std::string_view source, const std::string& path,
                   Fp8CheckpointFormat& f) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
      v[0].get<int64_t>() <= 0 || v[1].get<int64_t>() <= 0 || v[0].get<int64_t>() > (1 << 20) ||
      v[1].get<int64_t>() > (1 << 20)) {
    return invalid_argument("{}: field \"{}\" must be [rows, cols] of positive integers", source,
                            path);
  }
  f.layout = Fp8ScaleLayout::kBlock;
  f.block_rows = v[0].get<int64_t>();
  f.block_cols = v[1].get<int64_t>();
  return {};
}

Result<Fp8CheckpointFormat> native_fp8(const Json& qc, std::string_view source) {
  const std::string p(kField);
  Fp8CheckpointFormat f;
  f.method = "fp8";
  f.scale_suffix = "weight_scale_inv";
  LS_ASSIGN_OR_RETURN(auto scheme, opt_string(qc, "activation_scheme", source, p + ".activation_scheme"));
  if (scheme && *scheme != "dynamic") {
    return unimplemented("{}: {}: quant_method fp8 with activation_scheme \"{}\" (static input "
                         "scales) is not supported; only dynamic activations are",
                         source, p, *scheme);
  }
  LS_ASSIGN_OR_RETURN(auto fmt_name, opt_string(qc, "fmt", source, p + ".fmt"));
  if (fmt_name && *fmt_name != "e4m3") {
    return unimplemented("{}: {}: quant_method fp8 with fmt \"{}\" is not supported (only e4m3)",
                         source, p, *fmt_name);
  }
  if (is_null_or_absent(qc, "weight_block_size")) {
    return unimplemented("{}: {}: quant_method fp8 without weight_block_size (per-tensor scales) "
                         "is not supported; block-scaled checkpoints ([128, 128]) are",
                         source, p);
  }
  LS_RETURN_IF_ERROR(block_shape(qc["weight_block_size"], source, p + ".weight_block_size", f));
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    LS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        string_list(qc, key, source, p + "." + key));
    f.ignore.insert(f.ignore.end(), names.begin(), names.end());
  }
  return f;
}

// One config group's "weights" (or "input_activations"): a float 8-bit scheme.
Status float8_scheme(const Json& s, std::string_view source, const std::string& path) {
  if (!s.is_object()) return invalid_argument("{}: field \"{}\" must be an object", source, path);
  LS_ASSIGN_OR_RETURN(auto type, opt_string(s, "type", source, path + ".type"));
  if (type.value_or("int") != "float") {
    return unimplemented("{}: {}.type \"{}\" is not supported (only float: FP8 e4m3)", source, path,
                         type.value_or("(absent)"));
  }
  LS_ASSIGN_OR_RETURN(auto bits, io_json::opt_int(s, "num_bits", source, path + ".num_bits"));
  if (bits.value_or(0) != 8) {
    return unimplemented("{}: {}.num_bits {} is not supported (only 8)", source, path,
                         bits ? std::to_string(*bits) : std::string("(absent)"));
  }
  LS_ASSIGN_OR_RETURN(auto symmetric, io_json::opt_bool(s, "symmetric", source, path + ".symmetric"));
  if (!symmetric.value_or(true)) {
    return unimplemented("{}: {}: asymmetric (zero-point) FP8 is not supported", source, path);
  }
  return {};
}

Result<Fp8CheckpointFormat> compressed_tensors(const Json& qc, std::string_view source) {
  const std::string p(kField);
  Fp8CheckpointFormat f;
  f.method = "compressed-tensors";
  f.scale_suffix = "weight_scale";
  LS_ASSIGN_OR_RETURN(auto format, opt_string(qc, "format", source, p + ".format"));
  if (!is_null_or_absent(qc, "kv_cache_scheme")) {
    return unimplemented("{}: {}.kv_cache_scheme (static FP8 KV cache scales) is not supported; "
                         "use --kv-cache-dtype for a quantized KV cache",
                         source, p);
  }
  LS_ASSIGN_OR_RETURN(f.ignore, string_list(qc, "ignore", source, p + ".ignore"));
  if (is_null_or_absent(qc, "config_groups") || !qc["config_groups"].is_object() ||
      qc["config_groups"].empty()) {
    return invalid_argument("{}: {}.config_groups must be a non-empty object", source, p);
  }
  std::optional<std::string> strategy;
  for (const auto& [name, group] : qc["config_groups"].items()) {
    const std::string g = p + ".config_groups." + name;
    if (!group.is_object()) return invalid_argument("{}: field \"{}\" must be an object", source, g);
    LS_ASSIGN_OR_RETURN(auto group_format, opt_string(group, "format", source, g + ".format"));
    const std::string fmt_name = group_format.value_or(format.value_or("(absent)"));
    if (fmt_name != "float-quantized") {
      return unimplemented("{}: compressed-tensors format \"{}\" ({}) is not supported (only "
                           "float-quantized: FP8 weights)",
                           source, fmt_name, group_format ? g + ".format" : p + ".format");
    }
    if (is_null_or_absent(group, "weights")) {
      return unimplemented("{}: {} quantizes no weights; not supported", source, g);
    }
    const Json& w = group["weights"];
    LS_RETURN_IF_ERROR(float8_scheme(w, source, g + ".weights"));
    LS_ASSIGN_OR_RETURN(auto dynamic, io_json::opt_bool(w, "dynamic", source, g + ".weights.dynamic"));
    if (dynamic.value_or(false)) {
      return unimplemented("{}: {}.weights.dynamic true is not supported", source, g);
    }
    LS_ASSIGN_OR_RETURN(auto s, opt_string(w, "strategy", source, g + ".weights.strategy"));
    const std::string st = s.value_or("tensor");
    if (st != "channel" && st != "tensor" && st != "block") {
      return unimplemented("{}: {}.weights.strategy \"{}\" is not supported (channel, tensor or "
                           "block)",
                           source, g, st);
    }
    if (strategy && *strategy != st) {
      return unimplemented("{}: config groups with different weight strategies ({} and {}) are "
                           "not supported",
                           source, *strategy, st);
    }
    strategy = st;
    if (st == "block") {
      if (is_null_or_absent(w, "block_structure")) {
        return invalid_argument("{}: {}.weights.strategy block needs block_structure", source, g);
      }
      LS_RETURN_IF_ERROR(block_shape(w["block_structure"], source, g + ".weights.block_structure", f));
    } else {
      f.layout = st == "channel" ? Fp8ScaleLayout::kChannel : Fp8ScaleLayout::kTensor;
    }
    if (!is_null_or_absent(group, "input_activations")) {
      const Json& a = group["input_activations"];
      LS_RETURN_IF_ERROR(float8_scheme(a, source, g + ".input_activations"));
      LS_ASSIGN_OR_RETURN(auto adyn,
                          io_json::opt_bool(a, "dynamic", source, g + ".input_activations.dynamic"));
      if (!adyn.value_or(false)) {
        return unimplemented("{}: {}.input_activations are static (input_scale tensors); only "
                             "dynamic activation quantization is supported",
                             source, g);
      }
    }
    if (!is_null_or_absent(group, "output_activations")) {
      return unimplemented("{}: {}.output_activations quantization is not supported", source, g);
    }
  }
  return f;
}

}  // namespace

const char* fp8_layout_name(Fp8ScaleLayout layout) {
  switch (layout) {
    case Fp8ScaleLayout::kTensor:
      return "per-tensor";
    case Fp8ScaleLayout::kChannel:
      return "per-channel";
    case Fp8ScaleLayout::kBlock:
      return "block";
  }
  return "?";
}

Result<Fp8CheckpointFormat> parse_fp8_format(const Json& qc, std::string_view source) {
  const std::string p(kField);
  if (!qc.is_object()) {
    return invalid_argument("{}: field \"{}\" must be an object, got {}", source, p,
                            io_json::type_name(qc));
  }
  LS_ASSIGN_OR_RETURN(auto method, opt_string(qc, "quant_method", source, p + ".quant_method"));
  if (!method) return invalid_argument("{}: {}.quant_method is missing", source, p);
  if (*method == "fp8") return native_fp8(qc, source);
  if (*method == "compressed-tensors") return compressed_tensors(qc, source);
  return unimplemented("{}: {}.quant_method \"{}\" is not supported (FP8 checkpoints only: "
                       "compressed-tensors float-quantized, or fp8 with weight_block_size)",
                       source, p, *method);
}

}  // namespace ls
