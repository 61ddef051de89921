#pragma once
// Typed reads of optional tokenizer.json fields. nlohmann's accessors throw on a type mismatch;
// these return a Status that names the field instead, so bad files give clear errors.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ls::tok {

// The member `key` of object j, or nullptr when absent or null.
inline const nlohmann::json* json_member(const nlohmann::json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline Result<bool> json_bool(const nlohmann::json& j, std::string_view key, bool fallback,
                              std::string_view where) {
  const nlohmann::json* v = json_member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return invalid_argument("{}.{}: expected a boolean", where, key);
  return v->get<bool>();
}

inline Result<std::optional<std::string>> json_opt_string(const nlohmann::json& j,
                                                          std::string_view key,
                                                          std::string_view where) {
  const nlohmann::json* v = json_member(j, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return invalid_argument("{}.{}: expected a string", where, key);
  return std::optional<std::string>(v->get<std::string>());
}

inline Result<std::string> json_string(const nlohmann::json& j, std::string_view key,
                                       std::string_view where) {
  LS_ASSIGN_OR_RETURN(auto v, json_opt_string(j, key, where));
  if (!v) return invalid_argument("{}.{}: missing", where, key);
  return std::move(*v);
}

inline Result<int64_t> json_int(const nlohmann::json& j, std::string_view key, int64_t fallback,
                                std::string_view where) {
  const nlohmann::json* v = json_member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) return invalid_argument("{}.{}: expected an integer", where, key);
  return v->get<int64_t>();
}

// The "type" tag of a component object.
inline Result<std::string> json_type(const nlohmann::json& j, std::string_view where) {
  if (!j.is_object()) return invalid_argument("{}: expected an object", where);
  return json_string(j, "type", where);
}

// Sequences of components nest; a hostile file must not exhaust the stack.
inline constexpr int kMaxComponentDepth = 16;

}  // namespace ls::tok
