#include "server/json_fields.h"

#include <cmath>
#include <limits>

namespace ls {

namespace {

// Deepest array/object nesting in `text`, ignoring brackets inside strings. Stops counting once
// past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const char* type_word(const Json& value) {
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "null";
}

}  // namespace

Result<Json> parse_json_object(std::string_view body, int max_depth) {
  if (nesting_depth(body, max_depth) > max_depth) {
    return invalid_argument("JSON nesting is deeper than {} levels", max_depth);
  }
  Json parsed;
  try {
    parsed = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return invalid_argument("Invalid JSON body: {}", e.what());
  }
  if (parsed.is_discarded()) {
    return invalid_argument("Invalid JSON body: expected a JSON object");
  }
  if (!parsed.is_object()) {
    return invalid_argument("Invalid JSON body: expected a JSON object, got {}", type_word(parsed));
  }
  return parsed;
}

const Json* find_field(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> json_integer(const Json& value) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (std::isfinite(d) && std::floor(d) == d && d >= -9.2233720368547758e18 &&
        d < 9.2233720368547758e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

Status read_bool(const Json& object, std::string_view key, bool* out) {
  const Json* value = find_field(object, key);
  if (value == nullptr) return Status::ok_status();
  if (!value->is_boolean()) {
    return invalid_argument("'{}' must be a boolean, got {}", key, type_word(*value));
  }
  *out = value->get<bool>();
  return Status::ok_status();
}

Status read_int64(const Json& object, std::string_view key, std::optional<int64_t>* out) {
  const Json* value = find_field(object, key);
  if (value == nullptr) return Status::ok_status();
  const std::optional<int64_t> integer = json_integer(*value);
  if (!integer) return invalid_argument("'{}' must be an integer, got {}", key, type_word(*value));
  *out = integer;
  return Status::ok_status();
}

Status read_double(const Json& object, std::string_view key, std::optional<double>* out) {
  const Json* value = find_field(object, key);
  if (value == nullptr) return Status::ok_status();
  if (!value->is_number()) {
    return invalid_argument("'{}' must be a number, got {}", key, type_word(*value));
  }
  *out = value->get<double>();
  return Status::ok_status();
}

Status read_string(const Json& object, std::string_view key, std::optional<std::string>* out) {
  const Json* value = find_field(object, key);
  if (value == nullptr) return Status::ok_status();
  if (!value->is_string()) {
    return invalid_argument("'{}' must be a string, got {}", key, type_word(*value));
  }
  *out = value->get<std::string>();
  return Status::ok_status();
}

Status read_string_or_list(const Json& object, std::string_view key,
                           std::vector<std::string>* out) {
  const Json* value = find_field(object, key);
  if (value == nullptr) return Status::ok_status();
  if (value->is_string()) {
    *out = {value->get<std::string>()};
    return Status::ok_status();
  }
  if (!value->is_array()) {
    return invalid_argument("'{}' must be a string or a list of strings, got {}", key,
                            type_word(*value));
  }
  std::vector<std::string> items;
  for (const Json& item : *value) {
    if (!item.is_string()) {
      return invalid_argument("'{}' must be a string or a list of strings", key);
    }
    items.push_back(item.get<std::string>());
  }
  *out = std::move(items);
  return Status::ok_status();
}

Status read_int_list(const Json& object, std::string_view key, std::vector<int64_t>* out) {
  const Json* value = find_field(object, key);
  if (value == nullptr) return Status::ok_status();
  if (!value->is_array()) {
    return invalid_argument("'{}' must be a list of integers, got {}", key, type_word(*value));
  }
  std::vector<int64_t> items;
  items.reserve(value->size());
  for (const Json& item : *value) {
    const std::optional<int64_t> integer = json_integer(item);
    if (!integer) return invalid_argument("'{}' must be a list of integers", key);
    items.push_back(*integer);
  }
  *out = std::move(items);
  return Status::ok_status();
}

std::string dump_json(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace ls
