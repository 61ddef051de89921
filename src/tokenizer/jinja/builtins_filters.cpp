// jinja2's builtin filters (jinja2/filters.py) that chat templates use, with Hugging Face's
// tojson override (json.dumps with ensure_ascii=False, insertion-ordered keys).

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json_bridge.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

Value arg_or(const std::optional<Value>& v, Value dflt) {
  return v ? *v : std::move(dflt);
}

Result<int64_t> int_param(const std::optional<Value>& v, int64_t dflt, std::string_view what) {
  if (!v) return dflt;
  if (!v->is_int() && !v->is_bool()) {
    return invalid_argument("{} must be an integer, not {}", what, v->type_name());
  }
  return v->get_int();
}

Result<std::string> string_param(const std::optional<Value>& v, std::string dflt) {
  if (!v) return dflt;
  return to_str(*v);
}

// Lower-cases strings for the case-insensitive comparisons of sort, unique, min and max.
Value ignore_case(const Value& v) {
  return v.is_string() ? Value(py::lower(v.get_string())) : v;
}

// jinja2's make_attrgetter: "a.b.0" walks items (digit parts as integers).
Value get_path(const Value& item, std::string_view path) {
  Value cur = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string_view part =
        path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) {
      int64_t idx = 0;
      for (char c : part) idx = idx * 10 + (c - '0');
      cur = get_item(cur, Value(idx));
    } else {
      cur = get_item(cur, Value(part));
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value attribute_of(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  return get_path(item, to_str(attribute));
}

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("abs", args, {}));
  if (v.is_int() || v.is_bool()) {
    if (v.get_int() == INT64_MIN) return out_of_range("integer overflow");
    return Value(v.get_int() < 0 ? -v.get_int() : v.get_int());
  }
  if (v.is_float()) return Value(std::fabs(v.get_float()));
  return invalid_argument("bad operand type for abs(): '{}'", v.type_name());
}

Result<Value> f_attr(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("attr", args, {"name"}));
  if (!a[0]) return invalid_argument("attr() missing required argument 'name'");
  // Only real attributes (methods), never dict keys.
  const std::string name = to_str(*a[0]);
  if (v.is_dict()) {
    ValueDict empty;
    const Value bare = Value::dict(std::move(empty));
    Value m = get_attribute(bare, name);
    if (m.is_callable()) return get_attribute(v, name);
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());
  return get_attribute(v, name);
}

Result<Value> f_batch(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("batch", args, {"linecount", "fill_with"}));
  LS_ASSIGN_OR_RETURN(int64_t n, int_param(a[0], 0, "linecount"));
  if (n < 1) return invalid_argument("batch: linecount must be at least 1");
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size())));
  ValueList out;
  ValueList tmp;
  for (auto& item : items) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    if (a[1] && !a[1]->is_none()) {
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(*a[1]);
    }
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::list(std::move(out));
}

Result<Value> f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("capitalize", args, {}));
  return Value(py::capitalize(to_str(v)));
}

Result<Value> f_center(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("center", args, {"width"}));
  LS_ASSIGN_OR_RETURN(int64_t width, int_param(a[0], 80, "width"));
  LS_RETURN_IF_ERROR(interp.check_string_size(static_cast<size_t>(std::max<int64_t>(width, 0))));
  return Value(py::center(to_str(v), width));
}

Result<Value> f_length(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("length", args, {}));
  switch (v.kind()) {
    case ValueKind::kString:
      return Value(py::length(v.get_string()));
    case ValueKind::kList:
      return Value(static_cast<int64_t>(v.get_list().size()));
    case ValueKind::kDict:
      return Value(static_cast<int64_t>(v.get_dict().size()));
    case ValueKind::kUndefined:
      return Value(int64_t{0});
    default:
      return invalid_argument("object of type '{}' has no len()", v.type_name());
  }
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("default", args, {"default_value", "boolean"}));
  const bool boolean = a[1] && a[1]->truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg_or(a[0], Value(""));
  return v;
}

// Sorts keyed values stably with Python ordering; a comparison error is returned.
Status stable_sort_by(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    if (!error.ok()) return false;
    auto c = compare_values(reverse ? y.first : x.first, reverse ? x.first : y.first, "<");
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return *c < 0;
  });
  return error;
}

Result<Value> f_dictsort(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return invalid_argument("dictsort: a mapping is required");
  const bool case_sensitive = a[0] && a[0]->truthy();
  LS_ASSIGN_OR_RETURN(std::string by, string_param(a[1], "key"));
  if (by != "key" && by != "value") {
    return invalid_argument("You can only sort by either \"key\" or \"value\"");
  }
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(v.get_dict().size())));
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, item] : v.get_dict().entries()) {
    const Value key = by == "key" ? Value(k) : item;
    keyed.emplace_back(case_sensitive ? key : ignore_case(key), Value::tuple({Value(k), item}));
  }
  LS_RETURN_IF_ERROR(stable_sort_by(keyed, a[2] && a[2]->truthy()));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Result<Value> f_escape(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("escape", args, {}));
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return Value(std::move(out));
}

Result<Value> f_first(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("first", args, {}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("last", args, {}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("float", args, {"default"}));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto f = py::parse_float(v.get_string())) return Value(*f);
  }
  return arg_or(a[0], Value(0.0));
}

Result<Value> f_format(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!args.keyword.empty() && !args.positional.empty()) {
    return invalid_argument("can't handle positional and keyword arguments at the same time");
  }
  Value operands;
  if (!args.keyword.empty()) {
    ValueDict d;
    for (auto& [k, item] : args.keyword) d.set(k, item);
    operands = Value::dict(std::move(d));
  } else {
    operands = Value::tuple(args.positional);
  }
  return apply_binary(interp, BinaryOp::kMod, Value(to_str(v)), operands);
}

Result<Value> f_indent(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("indent", args, {"width", "first", "blank"}));
  std::string indention = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      indention = a[0]->get_string();
    } else if (a[0]->is_int() || a[0]->is_bool()) {
      const int64_t w = std::max<int64_t>(a[0]->get_int(), 0);
      LS_RETURN_IF_ERROR(interp.check_string_size(static_cast<size_t>(w)));
      indention = std::string(static_cast<size_t>(w), ' ');
    } else {
      return invalid_argument("indent width must be an integer or a string");
    }
  }
  const bool first = a[1] && a[1]->truthy();
  const bool blank = a[2] && a[2]->truthy();
  const std::vector<std::string> lines = py::splitlines(to_str(v) + "\n");
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      rv += '\n';
      if (blank || !lines[i].empty()) rv += indention;
    }
    rv += lines[i];
    LS_RETURN_IF_ERROR(interp.check_string_size(rv.size()));
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Result<Value> f_int(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("int", args, {"default", "base"}));
  LS_ASSIGN_OR_RETURN(int64_t base, int_param(a[1], 10, "base"));
  const Value dflt = arg_or(a[0], Value(int64_t{0}));
  if (v.is_int() || v.is_bool()) return Value(v.get_int());
  if (v.is_float()) {
    const double f = v.get_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) {
      return out_of_range("cannot convert float {} to integer", to_str(v));
    }
    return Value(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    if (auto i = py::parse_int(v.get_string(), static_cast<int>(base))) return Value(*i);
    if (auto f = py::parse_float(v.get_string())) {
      if (std::isfinite(*f) && std::fabs(*f) < 9.2e18) return Value(static_cast<int64_t>(*f));
    }
  }
  return dflt;
}

Result<Value> f_items(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("items", args, {}));
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return invalid_argument("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, item] : v.get_dict().entries())
    out.push_back(Value::tuple({Value(k), item}));
  return Value::list(std::move(out));
}

Result<Value> f_join(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("join", args, {"d", "attribute"}));
  LS_ASSIGN_OR_RETURN(std::string sep, string_param(a[0], ""));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size())));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    const Value item = (a[1] && !a[1]->is_none()) ? attribute_of(items[i], *a[1]) : items[i];
    out += item.is_string() ? item.get_string() : to_str(item);
    LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  }
  return Value(std::move(out));
}

Result<Value> f_list(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("list", args, {}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  return Value::list(std::move(items));
}

Result<Value> f_lower(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("lower", args, {}));
  return Value(py::lower(to_str(v)));
}

Result<Value> f_upper(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("upper", args, {}));
  return Value(py::upper(to_str(v)));
}

Result<Value> f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size())));
  ValueList out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    // map(attribute='x', default=...)
    LS_ASSIGN_OR_RETURN(Args a, bind_args("map", args, {"attribute", "default"}));
    if (!a[0]) return Value::list(std::move(items));
    for (const Value& item : items) {
      Value got = attribute_of(item, *a[0]);
      if (got.is_undefined() && a[1] && !a[1]->is_none()) got = *a[1];
      out.push_back(std::move(got));
    }
    return Value::list(std::move(out));
  }
  // map('filter', args...)
  const std::string name = to_str(args.positional[0]);
  const FilterFn fn = find_filter(name);
  if (fn == nullptr) return invalid_argument("No filter named '{}'.", name);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    CallArgs call = rest;
    LS_ASSIGN_OR_RETURN(Value mapped, fn(interp, item, call));
    out.push_back(std::move(mapped));
  }
  return Value::list(std::move(out));
}

Result<Value> min_or_max(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  LS_ASSIGN_OR_RETURN(Args a,
                      bind_args(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size())));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = a[0] && a[0]->truthy();
  auto key_of = [&](const Value& item) {
    Value k = (a[1] && !a[1]->is_none()) ? attribute_of(item, *a[1]) : item;
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key_of(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key_of(items[i]);
    LS_ASSIGN_OR_RETURN(int c, compare_values(k, best_key, want_max ? ">" : "<"));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Result<Value> f_min(Interpreter& interp, const Value& v, CallArgs& args) {
  return min_or_max(interp, v, args, false);
}
Result<Value> f_max(Interpreter& interp, const Value& v, CallArgs& args) {
  return min_or_max(interp, v, args, true);
}

// select / reject / selectattr / rejectattr.
Result<Value> select_or_reject(Interpreter& interp, const Value& v, CallArgs& args,
                               bool with_attribute, bool select) {
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size())));
  size_t next_arg = 0;
  std::optional<Value> attribute;
  if (with_attribute) {
    if (args.positional.empty()) return invalid_argument("Missing parameter for attribute name");
    attribute = args.positional[next_arg++];
  }
  TestFn test = nullptr;
  if (next_arg < args.positional.size()) {
    const std::string name = to_str(args.positional[next_arg++]);
    test = find_test(name);
    if (test == nullptr) return invalid_argument("No test named '{}'.", name);
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next_arg),
                              args.positional.end());
  test_args.keyword = args.keyword;
  ValueList out;
  for (const Value& item : items) {
    const Value subject = attribute ? attribute_of(item, *attribute) : item;
    bool pass = false;
    if (test != nullptr) {
      CallArgs call = test_args;
      LS_ASSIGN_OR_RETURN(pass, test(interp, subject, call));
    } else {
      pass = subject.truthy();
    }
    if (pass == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> f_select(Interpreter& interp, const Value& v, CallArgs& args) {
  return select_or_reject(interp, v, args, false, true);
}
Result<Value> f_reject(Interpreter& interp, const Value& v, CallArgs& args) {
  return select_or_reject(interp, v, args, false, false);
}
Result<Value> f_selectattr(Interpreter& interp, const Value& v, CallArgs& args) {
  return select_or_reject(interp, v, args, true, true);
}
Result<Value> f_rejectattr(Interpreter& interp, const Value& v, CallArgs& args) {
  return select_or_reject(interp, v, args, true, false);
}

Result<Value> f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("replace", args, {"old", "new", "count"}));
  if (!a[0] || !a[1]) return invalid_argument("replace() missing required arguments");
  int64_t count = -1;
  if (a[2] && !a[2]->is_none()) {
    LS_ASSIGN_OR_RETURN(count, int_param(a[2], -1, "count"));
  }
  std::string out = py::replace(to_str(v), to_str(*a[0]), to_str(*a[1]), count);
  LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  return Value(std::move(out));
}

Result<Value> f_reverse(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("reverse", args, {}));
  if (v.is_string()) {
    auto cps = py::decode_utf8(v.get_string());
    std::reverse(cps.begin(), cps.end());
    return Value(py::encode_utf8(cps));
  }
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Result<Value> f_round(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("round", args, {"precision", "method"}));
  LS_ASSIGN_OR_RETURN(int64_t precision, int_param(a[0], 0, "precision"));
  LS_ASSIGN_OR_RETURN(std::string method, string_param(a[1], "common"));
  if (method != "common" && method != "ceil" && method != "floor") {
    return invalid_argument("method must be common, ceil or floor");
  }
  if (!v.is_number())
    return invalid_argument("type {} doesn't define __round__ method", v.type_name());
  if (method == "common") {
    if (!v.is_float()) {
      if (precision >= 0) return Value(v.get_int());
      return Value(static_cast<int64_t>(py::round_half_even(v.as_double(), precision)));
    }
    return Value(py::round_half_even(v.get_float(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Result<Value> f_safe(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("safe", args, {}));
  return Value(to_str(v));
}

Result<Value> f_slice(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("slice", args, {"slices", "fill_with"}));
  LS_ASSIGN_OR_RETURN(int64_t slices, int_param(a[0], 0, "slices"));
  if (slices < 1) return invalid_argument("slice: slices must be at least 1");
  LS_ASSIGN_OR_RETURN(ValueList seq, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(seq.size()) + slices));
  LS_RETURN_IF_ERROR(interp.check_list_size(static_cast<size_t>(slices)));
  const auto length = static_cast<int64_t>(seq.size());
  const int64_t per_slice = length / slices;
  const int64_t with_extra = length % slices;
  int64_t offset = 0;
  ValueList out;
  for (int64_t n = 0; n < slices; ++n) {
    const int64_t start = offset + n * per_slice;
    if (n < with_extra) ++offset;
    const int64_t end = offset + (n + 1) * per_slice;
    ValueList tmp(seq.begin() + start, seq.begin() + end);
    if (a[1] && !a[1]->is_none() && n >= with_extra) tmp.push_back(*a[1]);
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::list(std::move(out));
}

Result<Value> f_sort(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("sort", args, {"reverse", "case_sensitive", "attribute"}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size()) * 8));
  const bool case_sensitive = a[1] && a[1]->truthy();
  std::vector<std::string> attrs;
  if (a[2] && !a[2]->is_none()) {
    if (a[2]->is_string()) {
      attrs = py::split(a[2]->get_string(), std::string(","), -1, false);
    } else {
      attrs.push_back(to_str(*a[2]));
    }
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    ValueList parts;
    if (attrs.empty()) {
      parts.push_back(case_sensitive ? item : ignore_case(item));
    } else {
      for (const auto& attr : attrs) {
        Value got = get_path(item, attr);
        parts.push_back(case_sensitive ? got : ignore_case(got));
      }
    }
    keyed.emplace_back(Value::list(std::move(parts)), item);
  }
  LS_RETURN_IF_ERROR(stable_sort_by(keyed, a[0] && a[0]->truthy()));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Result<Value> f_string(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("string", args, {}));
  return Value(to_str(v));
}

Result<Value> f_sum(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("sum", args, {"attribute", "start"}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(items.size())));
  Value total = arg_or(a[1], Value(int64_t{0}));
  for (const Value& item : items) {
    const Value x = (a[0] && !a[0]->is_none()) ? attribute_of(item, *a[0]) : item;
    if (x.is_undefined()) return invalid_argument("{}", x.undefined_message());
    LS_ASSIGN_OR_RETURN(total, apply_binary(interp, BinaryOp::kAdd, total, x));
  }
  return total;
}

Result<Value> f_title(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("title", args, {}));
  // jinja2's title: words start after runs of whitespace, '-', '(', '{', '[' or '<'.
  const auto cps = py::decode_utf8(to_str(v));
  auto is_boundary = [](char32_t c) {
    return py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  bool word_start = true;
  for (char32_t cp : cps) {
    std::string ch;
    py::append_utf8(ch, cp);
    if (is_boundary(cp)) {
      out += ch;
      word_start = true;
    } else if (word_start) {
      out += py::upper(ch);
      word_start = false;
    } else {
      out += py::lower(ch);
    }
  }
  return Value(std::move(out));
}

Result<Value> f_tojson(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(
      Args a, bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensure_ascii = a[0] && a[0]->truthy();
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      options.indent = a[1]->get_string();
    } else if (a[1]->is_int() || a[1]->is_bool()) {
      const int64_t n = std::clamp<int64_t>(a[1]->get_int(), 0, 1024);
      options.indent = std::string(static_cast<size_t>(n), ' ');
    } else {
      return invalid_argument("tojson: indent must be an integer or a string");
    }
    options.item_separator.assign(1, ',');
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_list() || a[2]->get_list().size() != 2 || !a[2]->get_list()[0].is_string() ||
        !a[2]->get_list()[1].is_string()) {
      return invalid_argument("tojson: separators must be a pair of strings");
    }
    options.item_separator = a[2]->get_list()[0].get_string();
    options.key_separator = a[2]->get_list()[1].get_string();
  }
  options.sort_keys = a[3] && a[3]->truthy();
  LS_ASSIGN_OR_RETURN(std::string json, dump_json(v, options));
  LS_RETURN_IF_ERROR(interp.check_string_size(json.size()));
  return Value(std::move(json));
}

Result<Value> f_trim(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("trim", args, {"chars"}));
  std::optional<std::string> chars;
  if (a[0] && !a[0]->is_none()) chars = to_str(*a[0]);
  return Value(py::strip(to_str(v), chars, true, true));
}

Result<Value> f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a,
                      bind_args("truncate", args, {"length", "killwords", "end", "leeway"}));
  LS_ASSIGN_OR_RETURN(int64_t length, int_param(a[0], 255, "length"));
  LS_ASSIGN_OR_RETURN(std::string end, string_param(a[2], "..."));
  LS_ASSIGN_OR_RETURN(int64_t leeway, int_param(a[3], 5, "leeway"));
  const std::string s = to_str(v);
  const auto cps = py::decode_utf8(s);
  const auto end_len = py::length(end);
  if (length < end_len) return invalid_argument("expected length >= {}, got {}", end_len, length);
  if (leeway < 0) return invalid_argument("expected leeway >= 0, got {}", leeway);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(s);
  std::vector<char32_t> head(cps.begin(), cps.begin() + (length - end_len));
  std::string result = py::encode_utf8(head);
  if (!(a[1] && a[1]->truthy())) {
    const size_t space = result.rfind(' ');
    if (space != std::string::npos) result.resize(space);
  }
  return Value(result + end);
}

Result<Value> f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("unique", args, {"case_sensitive", "attribute"}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  const bool case_sensitive = a[0] && a[0]->truthy();
  ValueList seen;
  ValueList out;
  for (const Value& item : items) {
    Value key = (a[1] && !a[1]->is_none()) ? attribute_of(item, *a[1]) : item;
    if (!case_sensitive) key = ignore_case(key);
    LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(seen.size()) + 1));
    bool dup = false;
    for (const Value& s : seen) {
      if (values_equal(s, key)) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("wordcount", args, {}));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t cp : py::decode_utf8(to_str(v))) {
    const bool w = py::is_word_char(cp);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace ls::jinja
