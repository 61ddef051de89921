#pragma once
// Internal to io/ (includes nlohmann, a private dependency of ls_io): exception-free JSON parsing
// and typed field access whose errors name the source file and the field. Nothing outside src/io
// includes this header.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::io_json {

using Json = nlohmann::json;

struct ParseOptions {
  // nlohmann (like Python) keeps the last of duplicate keys; safetensors forbids them.
  bool reject_duplicate_keys = false;
  // Deepest array/object nesting accepted (the root object is depth 1); bounds memory and time on
  // hostile input before any DOM is built.
  int max_depth = 64;
};

// Parses `text` as one JSON document (UTF-8 is validated). Errors are kDataLoss with a message
// "<what>" that does not yet name the source; the caller prefixes it.
Result<Json> parse(std::string_view text, const ParseOptions& options);

// The whole file as text; kNotFound when it does not exist, kIoError when it cannot be read.
Result<std::string> read_file(const std::filesystem::path& path);

// A JSON type name for messages: "string", "integer", "number", "array", ...
std::string type_name(const Json& value);

// Typed access to fields of a JSON object. Absent and null fields give nullopt; a field of the
// wrong type is kInvalidArgument "<source>: field "<path>" must be <kind>, got <type>".
// `path` is the field's name in messages (e.g. "rope_scaling.factor").
Result<std::optional<int64_t>> opt_int(const Json& obj, std::string_view key,
                                       std::string_view source, std::string_view path);
Result<std::optional<double>> opt_number(const Json& obj, std::string_view key,
                                         std::string_view source, std::string_view path);
Result<std::optional<bool>> opt_bool(const Json& obj, std::string_view key, std::string_view source,
                                     std::string_view path);
Result<std::optional<std::string>> opt_string(const Json& obj, std::string_view key,
                                              std::string_view source, std::string_view path);
// An integer or a list of integers (eos_token_id); absent/null -> empty.
Result<std::vector<int64_t>> int_or_int_list(const Json& obj, std::string_view key,
                                             std::string_view source, std::string_view path);

}  // namespace ls::io_json
