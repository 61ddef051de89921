// Attribute and item lookup as jinja2's sandboxed environment does it, the methods of str, dict
// and list values that templates call, argument binding and iteration.

#include <algorithm>
#include <optional>
#include <string>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {
namespace {

// jinja2.utils.object_type_repr: how error messages name an object's type.
std::string object_type_repr(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kNone:
      return "None";
    case ValueKind::kNamespace:
      return "jinja2.utils.Namespace object";
    case ValueKind::kCallable:
      return "builtin_function_or_method object";
    default:
      return std::string(v.type_name()) + " object";
  }
}

Value no_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value no_element(const Value& obj, const Value& key) {
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), to_repr(key)));
}

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
}

using Method = Result<Value> (*)(Interpreter&, const Value& self, CallArgs& args);

Result<std::optional<std::string>> optional_string(const std::optional<Value>& v,
                                                   std::string_view what) {
  if (!v || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) {
    return invalid_argument("{} arg must be None or str, not {}", what, v->type_name());
  }
  return std::optional<std::string>(v->get_string());
}

Result<int64_t> int_arg(const std::optional<Value>& v, int64_t dflt, std::string_view what) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) {
    return invalid_argument("'{}' object cannot be interpreted as an integer ({})", v->type_name(),
                            what);
  }
  return v->get_int();
}

Value string_list(std::vector<std::string> parts) {
  ValueList items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

// str.strip / lstrip / rstrip
template <bool kLeft, bool kRight>
Result<Value> str_strip(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("strip", args, {"chars"}));
  LS_ASSIGN_OR_RETURN(auto chars, optional_string(a[0], "strip"));
  return Value(py::strip(self.get_string(), chars, kLeft, kRight));
}

template <bool kFromRight>
Result<Value> str_split(Interpreter& interp, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("split", args, {"sep", "maxsplit"}));
  LS_ASSIGN_OR_RETURN(auto sep, optional_string(a[0], "must be str or None"));
  if (sep && sep->empty()) return invalid_argument("empty separator");
  LS_ASSIGN_OR_RETURN(int64_t maxsplit, int_arg(a[1], -1, "maxsplit"));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(self.get_string().size() / 16)));
  auto parts = py::split(self.get_string(), sep, maxsplit, kFromRight);
  LS_RETURN_IF_ERROR(interp.check_list_size(parts.size()));
  return string_list(std::move(parts));
}

// The code-point slice s[start:end] that startswith/endswith/find look at.
std::string bounded(const std::string& s, int64_t start, std::optional<int64_t> end) {
  const auto cps = py::decode_utf8(s);
  const auto len = static_cast<int64_t>(cps.size());
  auto clamp = [len](int64_t x) {
    if (x < 0) x += len;
    return std::clamp<int64_t>(x, 0, len);
  };
  const int64_t b = clamp(start);
  const int64_t e = end ? clamp(*end) : len;
  std::string out;
  for (int64_t i = b; i < e; ++i) py::append_utf8(out, cps[static_cast<size_t>(i)]);
  return out;
}

template <bool kEnds>
Result<Value> str_startswith(Interpreter&, const Value& self, CallArgs& args) {
  const std::string_view name = kEnds ? "endswith" : "startswith";
  LS_ASSIGN_OR_RETURN(auto a, bind_args(name, args, {"prefix", "start", "end"}));
  if (!a[0]) return invalid_argument("{}() takes at least 1 argument (0 given)", name);
  std::string text = self.get_string();
  if (a[1] || a[2]) {
    LS_ASSIGN_OR_RETURN(int64_t start, int_arg(a[1], 0, "start"));
    std::optional<int64_t> end;
    if (a[2] && !a[2]->is_none()) {
      LS_ASSIGN_OR_RETURN(end, int_arg(a[2], 0, "end"));
    }
    text = bounded(text, start, end);
  }
  std::vector<std::string> candidates;
  if (a[0]->is_string()) {
    candidates.push_back(a[0]->get_string());
  } else if (a[0]->is_tuple()) {
    for (const Value& v : a[0]->get_list()) {
      if (!v.is_string()) return invalid_argument("tuple for {} must only contain str", name);
      candidates.push_back(v.get_string());
    }
  } else {
    return invalid_argument("{} first arg must be str or a tuple of str, not {}", name,
                            a[0]->type_name());
  }
  for (const auto& c : candidates) {
    const bool hit =
        kEnds ? (text.size() >= c.size() && text.compare(text.size() - c.size(), c.size(), c) == 0)
              : text.compare(0, c.size(), c) == 0;
    if (hit) return Value(true);
  }
  return Value(false);
}

Result<Value> str_replace(Interpreter& interp, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("replace", args, {"old", "new", "count"}));
  if (!a[0] || !a[1] || !a[0]->is_string() || !a[1]->is_string()) {
    return invalid_argument("replace() arguments must be str");
  }
  LS_ASSIGN_OR_RETURN(int64_t count, int_arg(a[2], -1, "count"));
  const std::string out =
      py::replace(self.get_string(), a[0]->get_string(), a[1]->get_string(), count);
  LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  return Value(out);
}

template <std::string (*kFn)(std::string_view)>
Result<Value> str_transform(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("method", args, {}));
  return Value(kFn(self.get_string()));
}

template <bool (*kFn)(std::string_view)>
Result<Value> str_predicate(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("method", args, {}));
  return Value(kFn(self.get_string()));
}

template <bool kFromRight, bool kRaise>
Result<Value> str_find(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("find", args, {"sub", "start", "end"}));
  if (!a[0] || !a[0]->is_string()) return invalid_argument("must be str");
  LS_ASSIGN_OR_RETURN(int64_t start, int_arg(a[1], 0, "start"));
  std::optional<int64_t> end;
  if (a[2] && !a[2]->is_none()) {
    LS_ASSIGN_OR_RETURN(end, int_arg(a[2], 0, "end"));
  }
  const auto cps_len = py::length(self.get_string());
  int64_t base = start < 0 ? std::max<int64_t>(0, start + cps_len) : std::min(start, cps_len);
  const std::string text = bounded(self.get_string(), start, end);
  int64_t idx;
  if (kFromRight) {
    const size_t hit = text.rfind(a[0]->get_string());
    idx = hit == std::string::npos ? -1 : py::length(std::string_view(text).substr(0, hit));
  } else {
    idx = py::find(text, a[0]->get_string());
  }
  if (idx < 0) {
    if (kRaise) return invalid_argument("substring not found");
    return Value(int64_t{-1});
  }
  return Value(idx + base);
}

Result<Value> str_count(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("count", args, {"sub"}));
  if (!a[0] || !a[0]->is_string()) return invalid_argument("must be str");
  return Value(py::count(self.get_string(), a[0]->get_string()));
}

Result<Value> str_join(Interpreter& interp, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("join", args, {"iterable"}));
  if (!a[0]) return invalid_argument("join() takes exactly one argument (0 given)");
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(*a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return invalid_argument("sequence item {}: expected str instance, {} found", i,
                              items[i].type_name());
    }
    if (i > 0) out += self.get_string();
    out += items[i].get_string();
    LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  }
  return Value(std::move(out));
}

Result<Value> str_splitlines(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("splitlines", args, {}));
  return string_list(py::splitlines(self.get_string()));
}

Result<Value> str_center(Interpreter& interp, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("center", args, {"width"}));
  LS_ASSIGN_OR_RETURN(int64_t width, int_arg(a[0], 0, "width"));
  LS_RETURN_IF_ERROR(interp.check_string_size(static_cast<size_t>(std::max<int64_t>(width, 0))));
  return Value(py::center(self.get_string(), width));
}

// str.format with automatic ({}) or explicit ({0}, {name}) fields and no format specs.
Result<Value> str_format(Interpreter& interp, const Value& self, CallArgs& args) {
  const std::string& f = self.get_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos)
      return invalid_argument("{}", "Single '{' encountered in format string");
    const std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    if (field.find_first_of(":!.[") != std::string::npos) {
      return unimplemented("str.format field '{}' is not supported", field);
    }
    const Value* v = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t idx = field.empty() ? auto_index++ : std::stoul(field.substr(0, 6));
      if (idx >= args.positional.size())
        return invalid_argument("Replacement index {} out of range", idx);
      v = &args.positional[idx];
    } else {
      for (const auto& [k, kv] : args.keyword) {
        if (k == field) v = &kv;
      }
      if (v == nullptr) return invalid_argument("KeyError: '{}'", field);
    }
    out += to_str(*v);
    LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  }
  return Value(std::move(out));
}

Result<Value> dict_items(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("items", args, {}));
  ValueList items;
  for (const auto& [k, v] : self.get_dict().entries()) {
    items.push_back(Value::tuple({dict_key_value(k), v}));
  }
  return Value::list(std::move(items));
}

Result<Value> dict_keys(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("keys", args, {}));
  ValueList items;
  for (const auto& entry : self.get_dict().entries()) items.push_back(dict_key_value(entry.first));
  return Value::list(std::move(items));
}

Result<Value> dict_values(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("values", args, {}));
  ValueList items;
  for (const auto& entry : self.get_dict().entries()) items.push_back(entry.second);
  return Value::list(std::move(items));
}

Result<Value> dict_get(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("get", args, {"key", "default"}));
  if (!a[0]) return invalid_argument("get expected at least 1 argument, got 0");
  if (const std::optional<std::string> stored = dict_key(*a[0])) {
    if (const Value* v = self.get_dict().find(*stored)) return *v;
  }
  return a[1] ? *a[1] : Value::none();
}

Result<Value> dict_copy(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("copy", args, {}));
  return self;
}

Result<Value> list_index(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("index", args, {"value"}));
  if (!a[0]) return invalid_argument("index expected at least 1 argument, got 0");
  const ValueList& items = self.get_list();
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], *a[0])) return Value(static_cast<int64_t>(i));
  }
  return invalid_argument("{} is not in list", to_repr(*a[0]));
}

Result<Value> list_count(Interpreter&, const Value& self, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("count", args, {"value"}));
  if (!a[0]) return invalid_argument("count() takes exactly one argument (0 given)");
  int64_t n = 0;
  for (const Value& v : self.get_list()) n += values_equal(v, *a[0]) ? 1 : 0;
  return Value(n);
}

struct MethodEntry {
  std::string_view name;
  Method fn;
};

constexpr MethodEntry kStringMethods[] = {
    {"strip", str_strip<true, true>},
    {"lstrip", str_strip<true, false>},
    {"rstrip", str_strip<false, true>},
    {"split", str_split<false>},
    {"rsplit", str_split<true>},
    {"startswith", str_startswith<false>},
    {"endswith", str_startswith<true>},
    {"replace", str_replace},
    {"upper", str_transform<py::upper>},
    {"lower", str_transform<py::lower>},
    {"title", str_transform<py::title>},
    {"capitalize", str_transform<py::capitalize>},
    {"find", str_find<false, false>},
    {"rfind", str_find<true, false>},
    {"index", str_find<false, true>},
    {"rindex", str_find<true, true>},
    {"count", str_count},
    {"join", str_join},
    {"splitlines", str_splitlines},
    {"center", str_center},
    {"format", str_format},
    {"isdigit", str_predicate<py::is_digit>},
    {"isalpha", str_predicate<py::is_alpha>},
    {"isalnum", str_predicate<py::is_alnum>},
    {"isspace", str_predicate<py::is_space_str>},
    {"islower", str_predicate<py::is_lower>},
    {"isupper", str_predicate<py::is_upper>},
};

constexpr MethodEntry kDictMethods[] = {
    {"items", dict_items}, {"keys", dict_keys}, {"values", dict_values},
    {"get", dict_get},     {"copy", dict_copy},
};
constexpr std::string_view kUnsafeDictMethods[] = {"pop",    "popitem", "setdefault",
                                                   "update", "clear",   "fromkeys"};

constexpr MethodEntry kListMethods[] = {{"index", list_index}, {"count", list_count}};
constexpr std::string_view kUnsafeListMethods[] = {"append",  "extend", "insert", "pop", "remove",
                                                   "reverse", "sort",   "clear",  "copy"};

template <size_t N>
std::optional<Value> bind_method(const MethodEntry (&table)[N], const Value& self,
                                 std::string_view name) {
  for (const auto& m : table) {
    if (m.name != name) continue;
    const Method fn = m.fn;
    return Value::callable(std::string(name), [self, fn](Interpreter& interp, CallArgs& args) {
      return fn(interp, self, args);
    });
  }
  return std::nullopt;
}

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace

Value get_attribute(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case ValueKind::kString:
      if (auto m = bind_method(kStringMethods, obj, name)) return *m;
      return no_attribute(obj, name);
    case ValueKind::kDict:
      if (auto m = bind_method(kDictMethods, obj, name)) return *m;
      if (listed(kUnsafeDictMethods, name)) return unsafe(obj, name);
      if (const Value* v = obj.get_dict().find(name)) return *v;
      return no_attribute(obj, name);
    case ValueKind::kList:
      if (auto m = bind_method(kListMethods, obj, name)) return *m;
      if (!obj.is_tuple() && listed(kUnsafeListMethods, name)) return unsafe(obj, name);
      return no_attribute(obj, name);
    case ValueKind::kNamespace:
      if (const Value* v = obj.get_namespace().attrs.find(name)) return *v;
      return no_attribute(obj, name);
    default:
      return no_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case ValueKind::kDict:
      if (const std::optional<std::string> stored = dict_key(key)) {
        if (const Value* v = obj.get_dict().find(*stored)) return *v;
      }
      break;
    case ValueKind::kList:
      if (key.is_int() || key.is_bool()) {
        const auto& items = obj.get_list();
        int64_t i = key.get_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
      }
      break;
    case ValueKind::kString:
      if (key.is_int() || key.is_bool()) {
        const auto cps = py::decode_utf8(obj.get_string());
        int64_t i = key.get_int();
        if (i < 0) i += static_cast<int64_t>(cps.size());
        if (i >= 0 && i < static_cast<int64_t>(cps.size())) {
          std::string ch;
          py::append_utf8(ch, cps[static_cast<size_t>(i)]);
          return Value(std::move(ch));
        }
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attribute(obj, key.get_string());
  return no_element(obj, key);
}

Result<std::vector<std::optional<Value>>> bind_args(
    std::string_view function_name, const CallArgs& args,
    std::initializer_list<std::string_view> params) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.positional.size() > params.size()) {
    return invalid_argument("{}() takes at most {} argument(s) ({} given)", function_name,
                            params.size(), args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), k);
    if (it == params.end()) {
      return invalid_argument("{}() got an unexpected keyword argument '{}'", function_name, k);
    }
    const auto idx = static_cast<size_t>(it - params.begin());
    if (out[idx]) {
      return invalid_argument("{}() got multiple values for argument '{}'", function_name, k);
    }
    out[idx] = v;
  }
  return out;
}

Result<ValueList> iterate(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kList:
      return value.get_list();
    case ValueKind::kDict: {
      ValueList keys;
      keys.reserve(value.get_dict().size());
      for (const auto& entry : value.get_dict().entries()) {
        keys.push_back(dict_key_value(entry.first));
      }
      return keys;
    }
    case ValueKind::kString: {
      ValueList chars;
      for (char32_t cp : py::decode_utf8(value.get_string())) {
        std::string ch;
        py::append_utf8(ch, cp);
        chars.emplace_back(std::move(ch));
      }
      return chars;
    }
    case ValueKind::kGenerator:
      if (!value.get_generator().error.ok()) return value.get_generator().error;
      return value.get_generator().items;
    case ValueKind::kUndefined:
      return ValueList{};
    default:
      return invalid_argument("'{}' object is not iterable", value.type_name());
  }
}

}  // namespace ls::jinja
