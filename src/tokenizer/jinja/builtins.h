#pragma once
// What jinja2 (as Hugging Face configures it) provides by name: filters, tests, globals
// (range, dict, namespace, raise_exception, strftime_now) and the methods of str, dict and list
// values that chat templates call ("x".startswith(...), d.items(), ...). Also the attribute and
// item lookups of jinja2's sandboxed environment, which never fail: a missing attribute or key
// is an Undefined carrying jinja2's message for when it is used.

#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/value.h"

namespace ls::jinja {

class Interpreter;

using FilterFn = Result<Value> (*)(Interpreter&, const Value& input, CallArgs& args);
using TestFn = Result<bool> (*)(Interpreter&, const Value& input, CallArgs& args);

// nullptr when there is no filter / test of that name.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// A global function or value, or nullptr.
const Value* find_global(std::string_view name);

// obj.name: a bound method of a str / dict / list / loop, else the dict key, else Undefined.
Value get_attribute(const Value& obj, std::string_view name);
// obj[key]: item first, then (string keys) attribute, else Undefined. Slices are handled by
// the interpreter.
Value get_item(const Value& obj, const Value& key);

// Binds call arguments to parameter names as Python does (positional first, then keywords);
// absent parameters are nullopt. Too many positionals or an unknown keyword is an error naming
// the function.
Result<std::vector<std::optional<Value>>> bind_args(std::string_view function_name,
                                                    const CallArgs& args,
                                                    std::initializer_list<std::string_view> params);

// Iterating a value in a for loop or a filter: list/tuple items, dict keys, string code points;
// Undefined is empty; anything else is "'int' object is not iterable".
Result<ValueList> iterate(const Value& value);

}  // namespace ls::jinja
