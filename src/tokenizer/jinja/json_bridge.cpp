#include "tokenizer/jinja/json_bridge.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {

Value value_from_json(const nlohmann::ordered_json& json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null:
      return Value::none();
    case Type::boolean:
      return Value(json.get<bool>());
    case Type::number_integer:
      return Value(json.get<int64_t>());
    case Type::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value(static_cast<int64_t>(u));
      }
      return Value(static_cast<double>(u));
    }
    case Type::number_float:
      return Value(json.get<double>());
    case Type::string:
      return Value(json.get_ref<const std::string&>());
    case Type::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(value_from_json(item));
      return Value::list(std::move(items));
    }
    case Type::object: {
      ValueDict dict;
      for (const auto& [key, item] : json.items()) dict.set(key, value_from_json(item));
      return Value::dict(std::move(dict));
    }
    default:
      return Value::none();
  }
}

namespace {

void append_escaped(std::string& out, const std::string& s, bool ensure_ascii) {
  char buf[16];
  out += '"';
  for (char32_t cp : py::decode_utf8(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      py::append_utf8(out, cp);
    }
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {}

  Status write(std::string& out, const Value& v, int depth) {
    if (depth > kMaxDepth) return invalid_argument("tojson: value nested too deeply");
    switch (v.kind()) {
      case ValueKind::kNone:
        out += "null";
        return Status::ok_status();
      case ValueKind::kBool:
        out += v.get_bool() ? "true" : "false";
        return Status::ok_status();
      case ValueKind::kInt:
        out += std::to_string(v.get_int());
        return Status::ok_status();
      case ValueKind::kFloat: {
        const double f = v.get_float();
        if (std::isnan(f)) {
          out += "NaN";
        } else if (std::isinf(f)) {
          out += f > 0 ? "Infinity" : "-Infinity";
        } else {
          out += py::repr_float(f);
        }
        return Status::ok_status();
      }
      case ValueKind::kString:
        append_escaped(out, v.get_string(), options_.ensure_ascii);
        return Status::ok_status();
      case ValueKind::kList:
        return write_list(out, v.get_list(), depth);
      case ValueKind::kDict:
        return write_dict(out, v.get_dict(), depth);
      default:
        return invalid_argument("Object of type {} is not JSON serializable", v.type_name());
    }
  }

 private:
  static constexpr int kMaxDepth = 512;

  void newline(std::string& out, int level) {
    if (!options_.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *options_.indent;
  }

  Status write_list(std::string& out, const ValueList& items, int depth) {
    if (items.empty()) {
      out += "[]";
      return Status::ok_status();
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += options_.item_separator;
      newline(out, depth + 1);
      LS_RETURN_IF_ERROR(write(out, items[i], depth + 1));
    }
    newline(out, depth);
    out += ']';
    return Status::ok_status();
  }

  Status write_dict(std::string& out, const ValueDict& dict, int depth) {
    if (dict.empty()) {
      out += "{}";
      return Status::ok_status();
    }
    std::vector<const ValueDict::Entry*> entries;
    entries.reserve(dict.size());
    for (const auto& e : dict.entries()) entries.push_back(&e);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += options_.item_separator;
      newline(out, depth + 1);
      append_escaped(out, dict_key_text(entries[i]->first), options_.ensure_ascii);
      out += options_.key_separator;
      LS_RETURN_IF_ERROR(write(out, entries[i]->second, depth + 1));
    }
    newline(out, depth);
    out += '}';
    return Status::ok_status();
  }

  const JsonDumpOptions& options_;
};

}  // namespace

Result<std::string> dump_json(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  JsonWriter writer(options);
  LS_RETURN_IF_ERROR(writer.write(out, value, 0));
  return out;
}

}  // namespace ls::jinja
