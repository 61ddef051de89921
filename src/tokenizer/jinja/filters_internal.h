#pragma once
// Shared by the filter files (builtins_filters.cpp: text and numbers, and the registry;
// builtins_filters_seq.cpp: sequences): argument helpers and the sequence filters.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/value.h"

namespace ls::jinja {
class Interpreter;
}

namespace ls::jinja::filters {

using Args = std::vector<std::optional<Value>>;

Value arg_or(const std::optional<Value>& v, Value dflt);
Result<int64_t> int_param(const std::optional<Value>& v, int64_t dflt, std::string_view what);
Result<std::string> string_param(const std::optional<Value>& v, std::string dflt);
// Lower-cases strings for the case-insensitive comparisons of sort, unique, min and max.
Value ignore_case(const Value& v);
// jinja2's make_attrgetter: "a.b.0" walks items (digit parts as integers).
Value get_path(const Value& item, std::string_view path);
Value attribute_of(const Value& item, const Value& attribute);
// Sorts keyed values stably with Python ordering; a comparison error is returned.
Status stable_sort_by(std::vector<std::pair<Value, Value>>& keyed, bool reverse);

// The sequence filters (builtins_filters_seq.cpp).
Result<Value> f_batch(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_dictsort(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_first(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_last(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_items(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_join(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_list(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_map(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_min(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_max(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_select(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_reject(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_selectattr(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_rejectattr(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_slice(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_sort(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_sum(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_unique(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_reverse(Interpreter& interp, const Value& v, CallArgs& args);
Result<Value> f_length(Interpreter& interp, const Value& v, CallArgs& args);

}  // namespace ls::jinja::filters
