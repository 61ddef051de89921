#pragma once
// Between request JSON and template values: JSON in (messages, tools, extra context), and the
// `tojson` filter out, which Hugging Face overrides with Python's json.dumps(ensure_ascii=False)
// so that templates print JSON without HTML escaping and with keys in insertion order.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja/value.h"

namespace ls::jinja {

// Objects keep their key order; integers beyond int64 become floats.
Value value_from_json(const nlohmann::ordered_json& json);

// json.dumps keyword arguments.
struct JsonDumpOptions {
  std::optional<std::string> indent;  // None: one line; else this string per level
  std::string item_separator = ", ";  // Python's default is "," when indent is set
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Undefined, namespaces and callables are not serializable: an error as in Python.
Result<std::string> dump_json(const Value& value, const JsonDumpOptions& options);

}  // namespace ls::jinja
