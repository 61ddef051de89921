// jinja2's builtin filters (jinja2/filters.py) that chat templates use, with Hugging Face's
// tojson override (json.dumps with ensure_ascii=False, insertion-ordered keys).

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filters_internal.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json_bridge.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {
namespace {

using namespace filters;  // NOLINT: the helpers and sequence filters

// str(v) without a copy when v already is a string (message contents can be long).
std::string_view text_of(const Value& v, std::string& scratch) {
  if (v.is_string()) return v.get_string();
  scratch = to_str(v);
  return scratch;
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

Result<Value> f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("capitalize", args, {}));
  return Value(py::capitalize(text_of(v, scratch)));
}

Result<Value> f_center(Interpreter& interp, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("center", args, {"width"}));
  LS_ASSIGN_OR_RETURN(int64_t width, int_param(a[0], 80, "width"));
  LS_RETURN_IF_ERROR(interp.check_string_size(static_cast<size_t>(std::max<int64_t>(width, 0))));
  return Value(py::center(text_of(v, scratch), width));
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("default", args, {"default_value", "boolean"}));
  const bool boolean = a[1] && a[1]->truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg_or(a[0], Value(""));
  return v;
}

Result<Value> f_escape(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("escape", args, {}));
  if (v.is_markup()) return v;  // already safe: markupsafe does not escape twice
  return Value::markup(py::html_escape(text_of(v, scratch)));
}

Result<Value> f_forceescape(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("forceescape", args, {}));
  return Value::markup(py::html_escape(text_of(v, scratch)));
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("float", args, {"default"}));
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());  // float(Undefined)
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
  // jinja2 appends "\n" to the value itself (`s += newline`), so only strings work.
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());
  if (!v.is_string()) {
    return invalid_argument("unsupported operand type(s) for +=: '{}' and 'str'", v.type_name());
  }
  const std::vector<std::string> lines = py::splitlines(v.get_string() + "\n");
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
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());  // int(Undefined)
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
      if (std::isfinite(*f)) return out_of_range("cannot convert {} to a 64-bit integer", *f);
    }
  }
  return dflt;
}

Result<Value> f_lower(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("lower", args, {}));
  return Value(py::lower(text_of(v, scratch)));
}

Result<Value> f_upper(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("upper", args, {}));
  return Value(py::upper(text_of(v, scratch)));
}

Result<Value> f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("replace", args, {"old", "new", "count"}));
  if (!a[0] || !a[1]) return invalid_argument("replace() missing required arguments");
  int64_t count = -1;
  if (a[2] && !a[2]->is_none()) {
    LS_ASSIGN_OR_RETURN(count, int_param(a[2], -1, "count"));
  }
  std::string out = py::replace(text_of(v, scratch), to_str(*a[0]), to_str(*a[1]), count);
  LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  return Value(std::move(out));
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
  // math.floor / math.ceil return ints in Python, so the result is never -0.0.
  const double whole = (method == "ceil" ? std::ceil(x) : std::floor(x)) + 0.0;
  return Value(whole / scale);
}

Result<Value> f_safe(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("safe", args, {}));
  return Value::markup(to_str(v));
}

Result<Value> f_string(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("string", args, {}));
  return Value(to_str(v));
}

Result<Value> f_title(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("title", args, {}));
  // jinja2's title: words start after runs of whitespace, '-', '(', '{', '[' or '<'.
  const auto cps = py::decode_utf8(text_of(v, scratch));
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
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("trim", args, {"chars"}));
  std::optional<std::string> chars;
  if (a[0] && !a[0]->is_none()) chars = to_str(*a[0]);
  return Value(py::strip(text_of(v, scratch), chars, true, true));
}

Result<Value> f_truncate(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a,
                      bind_args("truncate", args, {"length", "killwords", "end", "leeway"}));
  LS_ASSIGN_OR_RETURN(int64_t length, int_param(a[0], 255, "length"));
  LS_ASSIGN_OR_RETURN(std::string end, string_param(a[2], "..."));
  LS_ASSIGN_OR_RETURN(int64_t leeway, int_param(a[3], 5, "leeway"));
  const auto end_len = py::length(end);
  if (length < end_len) return invalid_argument("expected length >= {}, got {}", end_len, length);
  if (leeway < 0) return invalid_argument("expected leeway >= 0, got {}", leeway);
  // jinja2 measures the value as it is (no str()), so a short list comes back unchanged.
  if (!v.is_string()) {
    if (v.is_undefined()) return v;
    CallArgs no_args;
    LS_ASSIGN_OR_RETURN(Value len, f_length(interp, v, no_args));
    if (len.get_int() <= length + leeway) return v;
    return invalid_argument("can only concatenate {} (not \"str\") to {}", v.type_name(),
                            v.type_name());
  }
  const std::string& s = v.get_string();
  const auto cps = py::decode_utf8(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(s);
  std::vector<char32_t> head(cps.begin(), cps.begin() + (length - end_len));
  std::string result = py::encode_utf8(head);
  if (!(a[1] && a[1]->truthy())) {
    const size_t space = result.rfind(' ');
    if (space != std::string::npos) result.resize(space);
  }
  return Value(result + end);
}

Result<Value> f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  std::string scratch;
  LS_ASSIGN_OR_RETURN(Args a, bind_args("wordcount", args, {}));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t cp : py::decode_utf8(text_of(v, scratch))) {
    const bool w = py::is_word_char(cp);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

// jinja2 implements these filters as Python generators: nothing runs until the result is
// consumed. Computing eagerly gives the same items for these pure filters; what must wait for the
// consumer is an error (so `x | select('odd') is iterable` is fine for any x, as in jinja2). The
// render limits still stop runaway work at once.
template <FilterFn kFn>
Result<Value> lazy(Interpreter& interp, const Value& v, CallArgs& args) {
  Result<Value> computed = kFn(interp, v, args);
  if (!computed.ok()) {
    if (computed.status().code() == StatusCode::kResourceExhausted) return computed.status();
    return Value::failed_generator(computed.status());
  }
  if (computed->is_list()) return Value::generator(computed->get_list());
  return computed;  // reverse of a str stays a str
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", lazy<f_batch>},
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
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", lazy<f_items>},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", lazy<f_map>},
    {"max", f_max},
    {"min", f_min},
    {"reject", lazy<f_reject>},
    {"rejectattr", lazy<f_rejectattr>},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", lazy<f_select>},
    {"selectattr", lazy<f_selectattr>},
    {"slice", lazy<f_slice>},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", lazy<f_unique>},
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
