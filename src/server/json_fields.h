#pragma once
// Reading OpenAI request bodies: parse a body into a JSON object, then read typed optional
// fields. An absent field and an explicit null both mean "not given" (clients such as the vLLM
// bench send "logprobs": null); a field of the wrong type is an invalid_argument Status naming
// the field. Nothing here throws.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ls {

using Json = nlohmann::ordered_json;

// Parses `body` as one JSON object. Rejects malformed JSON, invalid UTF-8, nesting deeper than
// `max_depth` (checked before parsing, so hostile input cannot exhaust the stack), and
// top-level values that are not objects.
Result<Json> parse_json_object(std::string_view body, int max_depth = 64);

// The field's value, or nullptr when absent or null.
const Json* find_field(const Json& object, std::string_view key);

// Each reader leaves `out` untouched when the field is absent or null.
Status read_bool(const Json& object, std::string_view key, bool* out);
// Integers; floats with an integral value are accepted too (Python clients may send 16.0).
Status read_int64(const Json& object, std::string_view key, std::optional<int64_t>* out);
Status read_double(const Json& object, std::string_view key, std::optional<double>* out);
Status read_string(const Json& object, std::string_view key, std::optional<std::string>* out);
// A string or a list of strings (OpenAI's "stop").
Status read_string_or_list(const Json& object, std::string_view key, std::vector<std::string>* out);
Status read_int_list(const Json& object, std::string_view key, std::vector<int64_t>* out);

// Integral value of a JSON number, if it has one.
std::optional<int64_t> json_integer(const Json& value);

// One-line dump that never throws: invalid UTF-8 becomes U+FFFD.
std::string dump_json(const Json& value);

}  // namespace ls
