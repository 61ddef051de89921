// jinja2's filters over sequences: map / select / reject / selectattr / rejectattr (lazy, as
// jinja2's generators are), sort, unique, dictsort, min, max, sum, join, first, last, batch,
// slice, items, reverse, list and length.

#include <algorithm>
#include <optional>
#include <string>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filters_internal.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pystr.h"

namespace ls::jinja::filters {
namespace {

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

Result<Value> select_or_reject(Interpreter& interp, const Value& v, CallArgs& args,
                               bool with_attribute, bool select) {
  if (!v.truthy()) return Value::list({});  // jinja2: `if value:` guards the whole filter
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

Status check_hashable(const Value& v) {
  if (v.is_list() && v.is_tuple()) {
    for (const Value& item : v.get_list()) LS_RETURN_IF_ERROR(check_hashable(item));
    return Status::ok_status();
  }
  if (v.is_list() || v.is_dict() || v.is_namespace()) {
    return invalid_argument("unhashable type: '{}'", v.type_name());
  }
  return Status::ok_status();
}

}  // namespace

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

Value ignore_case(const Value& v) {
  return v.is_string() ? Value(py::lower(v.get_string())) : v;
}

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
    const Value key = by == "key" ? dict_key_value(k) : item;
    keyed.emplace_back(case_sensitive ? key : ignore_case(key),
                       Value::tuple({dict_key_value(k), item}));
  }
  LS_RETURN_IF_ERROR(stable_sort_by(keyed, a[2] && a[2]->truthy()));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Result<Value> f_first(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("first", args, {}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("last", args, {}));
  if (v.is_generator()) return invalid_argument("'generator' object is not reversible");
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> f_items(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("items", args, {}));
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return invalid_argument("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, item] : v.get_dict().entries())
    out.push_back(Value::tuple({dict_key_value(k), item}));
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

Result<Value> f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!v.truthy()) return Value::list({});  // jinja2: `if value:` guards the whole filter
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

Result<Value> f_min(Interpreter& interp, const Value& v, CallArgs& args) {
  return min_or_max(interp, v, args, false);
}

Result<Value> f_max(Interpreter& interp, const Value& v, CallArgs& args) {
  return min_or_max(interp, v, args, true);
}

// select / reject / selectattr / rejectattr.

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

// unique() keeps a set of the keys it has seen, so keys must be hashable as in Python.

Result<Value> f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("unique", args, {"case_sensitive", "attribute"}));
  LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
  const bool case_sensitive = a[0] && a[0]->truthy();
  ValueList seen;
  ValueList out;
  for (const Value& item : items) {
    Value key = (a[1] && !a[1]->is_none()) ? attribute_of(item, *a[1]) : item;
    if (!case_sensitive) key = ignore_case(key);
    LS_RETURN_IF_ERROR(check_hashable(key));
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

Result<Value> f_reverse(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args("reverse", args, {}));
  if (v.is_string()) {
    auto cps = py::decode_utf8(v.get_string());
    std::reverse(cps.begin(), cps.end());
    return Value(py::encode_utf8(cps));
  }
  // reversed(x), else list(x) reversed; eager, unlike the generator filters.
  auto items = iterate(v);
  if (!items.ok()) return invalid_argument("argument must be iterable");
  std::reverse(items->begin(), items->end());
  return Value::generator(std::move(items).value());
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

}  // namespace ls::jinja::filters
