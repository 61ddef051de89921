#include "tokenizer/jinja/operators.h"

#include <cmath>
#include <optional>
#include <string>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {
namespace {

std::string_view op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "** or pow()";
  }
  return "?";
}

Status unsupported(BinaryOp op, const Value& a, const Value& b) {
  return invalid_argument("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op),
                          a.type_name(), b.type_name());
}

Status overflow() {
  return out_of_range("integer overflow: templates compute with 64-bit integers");
}

bool is_integral(const Value& v) {
  return v.is_int() || v.is_bool();
}

Result<Value> repeat_string(Interpreter& interp, const std::string& s, int64_t n) {
  if (n <= 0 || s.empty()) return Value(std::string());
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / s.size()) return overflow();
  LS_RETURN_IF_ERROR(interp.check_string_size(s.size() * static_cast<size_t>(n)));
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out += s;
  return Value(std::move(out));
}

Result<Value> repeat_list(Interpreter& interp, const Value& list, int64_t n) {
  const ValueList& items = list.get_list();
  if (n <= 0 || items.empty()) return list.is_tuple() ? Value::tuple({}) : Value::list({});
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / items.size()) {
    return overflow();
  }
  LS_RETURN_IF_ERROR(interp.check_list_size(items.size() * static_cast<size_t>(n)));
  ValueList out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return list.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Result<Value> int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) return invalid_argument("0.0 cannot be raised to a negative power");
    return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  int64_t b = base;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, b, &result)) return overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(b, b, &b)) return overflow();
  }
  return Value(result);
}

Result<Value> float_pow(double base, double exp) {
  if (base == 0.0 && exp < 0.0) return invalid_argument("0.0 cannot be raised to a negative power");
  if (base < 0.0 && std::floor(exp) != exp) {
    return unimplemented("a negative number to a fractional power is complex");
  }
  const double r = std::pow(base, exp);
  if (std::isinf(r) && std::isfinite(base) && std::isfinite(exp)) {
    return out_of_range("(34, 'Numerical result out of range')");
  }
  return Value(r);
}

// Python's float divmod (CPython's float_divmod), so // and % agree with it to the last bit.
void float_divmod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0.0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

// printf-style `str % args` for the conversions templates use: %s %r %d %i %f %%.
Result<Value> format_percent(Interpreter& interp, const std::string& fmt_str, const Value& args) {
  const ValueList single{args};
  const ValueList& items = args.is_tuple() ? args.get_list() : single;
  const ValueDict* mapping = args.is_dict() ? &args.get_dict() : nullptr;
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out += fmt_str[i];
      continue;
    }
    if (++i >= fmt_str.size()) return invalid_argument("incomplete format");
    if (fmt_str[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (fmt_str[i] == '(') {
      const size_t close = fmt_str.find(')', i);
      if (close == std::string::npos || mapping == nullptr) {
        return invalid_argument("format requires a mapping");
      }
      arg = mapping->find(fmt_str.substr(i + 1, close - i - 1));
      if (arg == nullptr) return invalid_argument("format key not found");
      used_mapping = true;
      i = close + 1;
      if (i >= fmt_str.size()) return invalid_argument("incomplete format");
    }
    int precision = -1;
    if (fmt_str[i] == '.') {
      precision = 0;
      while (++i < fmt_str.size() && fmt_str[i] >= '0' && fmt_str[i] <= '9') {
        precision = precision * 10 + (fmt_str[i] - '0');
        if (precision > 100) return invalid_argument("precision too large");
      }
      if (i >= fmt_str.size()) return invalid_argument("incomplete format");
    }
    if (arg == nullptr) {
      if (next_arg >= items.size())
        return invalid_argument("not enough arguments for format string");
      arg = &items[next_arg++];
    }
    const char conv = fmt_str[i];
    if (conv == 's') {
      out += to_str(*arg);
    } else if (conv == 'r') {
      out += to_repr(*arg);
    } else if (conv == 'd' || conv == 'i' || conv == 'f') {
      if (!arg->is_number()) {
        return invalid_argument("%{} format: a real number is required, not {}", conv,
                                arg->type_name());
      }
      if (conv == 'f') {
        char buf[512];
        std::snprintf(buf, sizeof(buf), "%.*f", precision < 0 ? 6 : precision, arg->as_double());
        out += buf;
      } else {
        out += std::to_string(arg->is_float() ? static_cast<int64_t>(arg->get_float())
                                              : arg->get_int());
      }
    } else {
      return unimplemented("unsupported format character '{}'", conv);
    }
    LS_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  }
  // Python skips this check for arguments with __getitem__ other than tuples (dict, list,
  // Undefined): it takes them as a mapping for %(name)s.
  const bool mapping_like =
      args.is_dict() || args.is_undefined() || (args.is_list() && !args.is_tuple());
  if (!used_mapping && !mapping_like && next_arg < items.size()) {
    return invalid_argument("not all arguments converted during string formatting");
  }
  return Value(std::move(out));
}

}  // namespace

Result<Value> apply_binary(Interpreter& interp, BinaryOp op, const Value& a, const Value& b) {
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = is_integral(a) && is_integral(b);
  switch (op) {
    case BinaryOp::kAdd:
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.get_int(), b.get_int(), &r)) return overflow();
        return Value(r);
      }
      if (numbers) return Value(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        LS_RETURN_IF_ERROR(interp.check_string_size(a.get_string().size() + b.get_string().size()));
        if (a.is_markup() || b.is_markup()) {
          // Markup + str escapes the plain operand (markupsafe's __add__ / __radd__).
          const std::string lhs = a.is_markup() ? a.get_string() : py::html_escape(a.get_string());
          const std::string rhs = b.is_markup() ? b.get_string() : py::html_escape(b.get_string());
          LS_RETURN_IF_ERROR(interp.check_string_size(lhs.size() + rhs.size()));
          return Value::markup(lhs + rhs);
        }
        return Value(a.get_string() + b.get_string());
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        LS_RETURN_IF_ERROR(interp.check_list_size(a.get_list().size() + b.get_list().size()));
        ValueList items = a.get_list();
        items.insert(items.end(), b.get_list().begin(), b.get_list().end());
        return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      if (a.is_string() || a.is_list()) {
        return invalid_argument("can only concatenate {} (not \"{}\") to {}", a.type_name(),
                                b.type_name(), a.type_name());
      }
      return unsupported(op, a, b);
    case BinaryOp::kSub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.get_int(), b.get_int(), &r)) return overflow();
        return Value(r);
      }
      if (numbers) return Value(a.as_double() - b.as_double());
      return unsupported(op, a, b);
    case BinaryOp::kMul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.get_int(), b.get_int(), &r)) return overflow();
        return Value(r);
      }
      if (numbers) return Value(a.as_double() * b.as_double());
      if (a.is_string() && is_integral(b))
        return repeat_string(interp, a.get_string(), b.get_int());
      if (b.is_string() && is_integral(a))
        return repeat_string(interp, b.get_string(), a.get_int());
      if (a.is_list() && is_integral(b)) return repeat_list(interp, a, b.get_int());
      if (b.is_list() && is_integral(a)) return repeat_list(interp, b, a.get_int());
      return unsupported(op, a, b);
    case BinaryOp::kDiv:
      if (!numbers) return unsupported(op, a, b);
      if (b.as_double() == 0.0) return invalid_argument("division by zero");
      return Value(a.as_double() / b.as_double());
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (op == BinaryOp::kMod && a.is_string()) return format_percent(interp, a.get_string(), b);
      if (!numbers) return unsupported(op, a, b);
      if (ints) {
        const int64_t x = a.get_int();
        const int64_t y = b.get_int();
        if (y == 0) {
          return invalid_argument("{}", op == BinaryOp::kMod
                                            ? "integer modulo by zero"
                                            : "integer division or modulo by zero");
        }
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == BinaryOp::kMod) return Value(int64_t{0});
          return overflow();
        }
        int64_t q = x / y;
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          r += y;
          q -= 1;
        }
        return op == BinaryOp::kMod ? Value(r) : Value(q);
      }
      const double y = b.as_double();
      if (y == 0.0) {
        return invalid_argument(
            "{}", op == BinaryOp::kMod ? "float modulo" : "float floor division by zero");
      }
      double fd = 0.0;
      double m = 0.0;
      float_divmod(a.as_double(), y, &fd, &m);
      return op == BinaryOp::kMod ? Value(m) : Value(fd);
    }
    case BinaryOp::kPow:
      if (ints) return int_pow(a.get_int(), b.get_int());
      if (numbers) return float_pow(a.as_double(), b.as_double());
      return unsupported(op, a, b);
  }
  return unsupported(op, a, b);
}

Result<Value> apply_negate(const Value& a) {
  if (is_integral(a)) {
    if (a.get_int() == std::numeric_limits<int64_t>::min()) return overflow();
    return Value(-a.get_int());
  }
  if (a.is_float()) return Value(-a.get_float());
  return invalid_argument("bad operand type for unary -: '{}'", a.type_name());
}

Result<Value> apply_plus(const Value& a) {
  if (is_integral(a)) return Value(a.get_int());
  if (a.is_float()) return a;
  return invalid_argument("bad operand type for unary +: '{}'", a.type_name());
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kString:
      if (!item.is_string()) {
        return invalid_argument("'in <string>' requires string as left operand, not {}",
                                item.type_name());
      }
      return container.get_string().find(item.get_string()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& v : container.get_list()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case ValueKind::kDict:
      if (item.is_list() && !item.is_tuple()) return invalid_argument("unhashable type: 'list'");
      if (item.is_dict()) return invalid_argument("unhashable type: 'dict'");
      if (const std::optional<std::string> key = dict_key(item)) {
        return container.get_dict().find(*key) != nullptr;
      }
      return false;
    case ValueKind::kGenerator: {
      LS_ASSIGN_OR_RETURN(ValueList items, iterate(container));
      for (const Value& v : items) {
        if (values_equal(v, item)) return true;
      }
      return false;
    }
    case ValueKind::kUndefined:
      return false;
    default:
      return invalid_argument("argument of type '{}' is not iterable", container.type_name());
  }
}

Result<Value> slice_value(const Value& obj, const Value& start_v, const Value& stop_v,
                          const Value& step_v) {
  auto bound = [](const Value& v, bool* ok) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_int() || v.is_bool()) return v.get_int();
    *ok = false;
    return std::nullopt;
  };
  bool ok = true;
  const auto start_opt = bound(start_v, &ok);
  const auto stop_opt = bound(stop_v, &ok);
  const auto step_opt = bound(step_v, &ok);
  // jinja2 slices with Python's own subscription (not its forgiving getitem), so these raise.
  if (obj.is_dict()) return invalid_argument("unhashable type: 'slice'");
  if (!obj.is_string() && !obj.is_list()) {
    return invalid_argument("'{}' object is not subscriptable", obj.type_name());
  }
  if (!ok) {
    return invalid_argument("slice indices must be integers or None or have an __index__ method");
  }
  const int64_t step = step_opt.value_or(1);
  if (step == 0) return invalid_argument("slice step cannot be zero");

  std::vector<char32_t> cps;
  if (obj.is_string()) cps = py::decode_utf8(obj.get_string());
  const int64_t len = obj.is_string() ? static_cast<int64_t>(cps.size())
                                      : static_cast<int64_t>(obj.get_list().size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  const int64_t start = adjust(start_opt, step < 0 ? len - 1 : 0);
  const int64_t stop = adjust(stop_opt, step < 0 ? -1 : len);
  std::vector<int64_t> indices;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) indices.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) indices.push_back(i);
  }
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : indices) py::append_utf8(out, cps[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  ValueList out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(obj.get_list()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace ls::jinja
