// The globals a chat template sees besides its context: jinja2's range / dict / namespace
// and the two Hugging Face adds, raise_exception(message) and strftime_now(format).

#include <ctime>
#include <memory>
#include <utility>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"

namespace ls::jinja {
namespace {

// jinja2.sandbox.MAX_RANGE: the sandbox refuses longer ranges.
constexpr int64_t kMaxRange = 100000;

Result<Value> g_range(Interpreter& interp, CallArgs& args) {
  if (!args.keyword.empty()) return invalid_argument("range() takes no keyword arguments");
  std::vector<int64_t> a;
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) {
      return invalid_argument("'{}' object cannot be interpreted as an integer", v.type_name());
    }
    a.push_back(v.get_int());
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (a.size() == 1) {
    stop = a[0];
  } else if (a.size() == 2 || a.size() == 3) {
    start = a[0];
    stop = a[1];
    if (a.size() == 3) step = a[2];
  } else {
    return invalid_argument("range expected at most 3 arguments, got {}", a.size());
  }
  if (step == 0) return invalid_argument("range() arg 3 must not be zero");
  // Length computed in 128 bits so extreme bounds cannot overflow.
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 mag = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 length = span <= 0 ? 0 : (span + mag - 1) / mag;
  if (length > kMaxRange) {
    return out_of_range("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).",
                        kMaxRange);
  }
  LS_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(length)));
  ValueList items;
  items.reserve(static_cast<size_t>(length));
  for (__int128 i = 0; i < length; ++i) items.emplace_back(static_cast<int64_t>(start + i * step));
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs) and namespace(...) take the same arguments.
Result<ValueDict> dict_from_args(std::string_view fn, const CallArgs& args) {
  ValueDict d;
  if (args.positional.size() > 1) {
    return invalid_argument("{} expected at most 1 argument, got {}", fn, args.positional.size());
  }
  if (args.positional.size() == 1) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.get_dict().entries()) d.set(k, v);
    } else if (src.is_list()) {
      for (const Value& pair : src.get_list()) {
        if (!pair.is_list() || pair.get_list().size() != 2 || !pair.get_list()[0].is_string()) {
          return invalid_argument("{}: expected (str key, value) pairs", fn);
        }
        d.set(pair.get_list()[0].get_string(), pair.get_list()[1]);
      }
    } else if (!src.is_undefined()) {
      return invalid_argument("'{}' object is not iterable", src.type_name());
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

Result<Value> g_dict(Interpreter&, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(ValueDict d, dict_from_args("dict", args));
  return Value::dict(std::move(d));
}

Result<Value> g_namespace(Interpreter& interp, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(ValueDict d, dict_from_args("namespace", args));
  auto ns = std::make_shared<Namespace>();
  ns->attrs = std::move(d);
  interp.register_namespace(ns);
  return Value::make_namespace(std::move(ns));
}

Result<Value> g_raise_exception(Interpreter& interp, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("raise_exception", args, {"message"}));
  return interp.raise_template_error(a[0] ? to_str(*a[0]) : std::string());
}

Result<Value> g_strftime_now(Interpreter&, CallArgs& args) {
  LS_ASSIGN_OR_RETURN(auto a, bind_args("strftime_now", args, {"format"}));
  if (!a[0] || !a[0]->is_string()) return invalid_argument("strftime_now() argument must be str");
  const std::string& format = a[0]->get_string();
  if (format.empty()) return Value(std::string());
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  // strftime cannot tell "needs more room" from "empty result"; grow up to a sane bound.
  for (size_t size = 64 + format.size() * 4; size <= (1u << 20); size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
    if (n > 0) {
      buf.resize(n);
      return Value(std::move(buf));
    }
  }
  return Value(std::string());
}

const std::vector<std::pair<std::string_view, Value>>& globals() {
  static const auto* table = new std::vector<std::pair<std::string_view, Value>>{
      {"range", Value::callable("range", g_range)},
      {"dict", Value::callable("dict", g_dict)},
      {"namespace", Value::callable("namespace", g_namespace)},
      {"raise_exception", Value::callable("raise_exception", g_raise_exception)},
      {"strftime_now", Value::callable("strftime_now", g_strftime_now)},
  };
  return *table;
}

}  // namespace

const Value* find_global(std::string_view name) {
  for (const auto& [k, v] : globals()) {
    if (k == name) return &v;
  }
  return nullptr;
}

}  // namespace ls::jinja
