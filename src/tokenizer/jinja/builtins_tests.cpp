// jinja2's builtin tests (jinja2/tests.py): `x is defined`, `x is string`, `x is equalto y`, ...

#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

Result<Value> required_arg(const CallArgs& args, std::string_view test_name) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args(test_name, args, {"other"}));
  if (!a[0]) return invalid_argument("{}() missing 1 required positional argument", test_name);
  return *a[0];
}

Status no_args(const CallArgs& args, std::string_view test_name) {
  LS_ASSIGN_OR_RETURN(Args a, bind_args(test_name, args, {}));
  return Status::ok_status();
}

// value % divisor == 0 with Python's modulo.
Result<bool> divisible(Interpreter& interp, const Value& v, const Value& divisor, int64_t rest) {
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());
  LS_ASSIGN_OR_RETURN(Value m, apply_binary(interp, BinaryOp::kMod, v, divisor));
  return values_equal(m, Value(rest));
}

Result<bool> t_odd(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_RETURN_IF_ERROR(no_args(args, "odd"));
  return divisible(interp, v, Value(int64_t{2}), 1);
}
Result<bool> t_even(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_RETURN_IF_ERROR(no_args(args, "even"));
  return divisible(interp, v, Value(int64_t{2}), 0);
}
Result<bool> t_divisibleby(Interpreter& interp, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Value num, required_arg(args, "divisibleby"));
  return divisible(interp, v, num, 0);
}

#define LS_SIMPLE_TEST(fn, name, expr)                                             \
  Result<bool> fn(Interpreter&, [[maybe_unused]] const Value& v, CallArgs& args) { \
    LS_RETURN_IF_ERROR(no_args(args, name));                                       \
    return (expr);                                                                 \
  }
LS_SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
LS_SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
LS_SIMPLE_TEST(t_none, "none", v.is_none())
LS_SIMPLE_TEST(t_boolean, "boolean", v.is_bool())
LS_SIMPLE_TEST(t_false, "false", v.is_bool() && !v.get_bool())
LS_SIMPLE_TEST(t_true, "true", v.is_bool() && v.get_bool())
LS_SIMPLE_TEST(t_integer, "integer", v.is_int())
LS_SIMPLE_TEST(t_float, "float", v.is_float())
LS_SIMPLE_TEST(t_number, "number", v.is_number())
LS_SIMPLE_TEST(t_string, "string", v.is_string())
LS_SIMPLE_TEST(t_mapping, "mapping", v.is_dict())
LS_SIMPLE_TEST(t_iterable, "iterable",
               v.is_string() || v.is_list() || v.is_dict() || v.is_generator() || v.is_undefined())
// Undefined has __len__ and __getitem__ (both fail when used), so it passes both of these.
LS_SIMPLE_TEST(t_sequence, "sequence",
               v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
LS_SIMPLE_TEST(t_callable, "callable", v.is_callable() || v.is_undefined())
LS_SIMPLE_TEST(t_lower, "lower", py::is_lower(to_str(v)))
LS_SIMPLE_TEST(t_upper, "upper", py::is_upper(to_str(v)))
LS_SIMPLE_TEST(t_escaped, "escaped", v.is_markup())
LS_SIMPLE_TEST(t_filter, "filter", v.is_string() && find_filter(v.get_string()) != nullptr)
LS_SIMPLE_TEST(t_test, "test", v.is_string() && find_test(v.get_string()) != nullptr)
#undef LS_SIMPLE_TEST

Result<bool> t_eq(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Value other, required_arg(args, "eq"));
  return values_equal(v, other);
}
Result<bool> t_ne(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Value other, required_arg(args, "ne"));
  return !values_equal(v, other);
}

template <int kLo, int kHi>  // passes when compare(v, other) is within [kLo, kHi]
Result<bool> t_order(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Value other, required_arg(args, "compare"));
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());
  if (other.is_undefined()) return invalid_argument("{}", other.undefined_message());
  const std::string_view op = kLo == -1 && kHi == -1 ? "<"
                              : kLo == -1            ? "<="
                              : kHi == 1 && kLo == 1 ? ">"
                                                     : ">=";
  LS_ASSIGN_OR_RETURN(int c, compare_values(v, other, op));
  return c >= kLo && c <= kHi;
}

Result<bool> t_sameas(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Value other, required_arg(args, "sameas"));
  // Identity of the immutable scalars Python shares (None, booleans, small ints, equal str
  // constants); containers are only ever the same object through the same variable, which a
  // template cannot observe otherwise.
  if (v.kind() != other.kind()) return false;
  if (v.is_none() || v.is_bool() || v.is_string()) return values_equal(v, other);
  if (v.is_int()) return v.get_int() == other.get_int() && v.get_int() >= -5 && v.get_int() <= 256;
  return false;
}

Result<bool> t_in(Interpreter&, const Value& v, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(Value seq, required_arg(args, "in"));
  return contains(seq, v);
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"number", t_number},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"lower", t_lower},
    {"upper", t_upper},
    {"escaped", t_escaped},
    {"filter", t_filter},
    {"test", t_test},
    {"sameas", t_sameas},
    {"in", t_in},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_order<-1, -1>},
    {"lessthan", t_order<-1, -1>},
    {"<", t_order<-1, -1>},
    {"le", t_order<-1, 0>},
    {"<=", t_order<-1, 0>},
    {"gt", t_order<1, 1>},
    {"greaterthan", t_order<1, 1>},
    {">", t_order<1, 1>},
    {"ge", t_order<0, 1>},
    {">=", t_order<0, 1>},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace ls::jinja
