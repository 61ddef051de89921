#pragma once
// The values a chat template computes with, shaped after the Python objects jinja2 sees: None,
// bool, int, float, str, list, tuple, dict (insertion-ordered, string keys), jinja2's Undefined,
// namespace() objects and callables (macros, builtins, bound methods). Containers and strings are
// immutable and shared, so copying a Value is cheap; a namespace is the one mutable object, as in
// jinja2's ImmutableSandboxedEnvironment.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ls::jinja {

class Value;
class Interpreter;

enum class ValueKind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,       // list or tuple (is_tuple())
  kGenerator,  // what select/map/items/... return: iterable once computed, no len, always true
  kDict,
  kNamespace,
  kCallable,
};

using ValueList = std::vector<Value>;

class ValueDict;
struct Callable;
struct Namespace;
struct CallArgs;
struct Generator;

using NativeFunction = std::function<Result<Value>(Interpreter&, CallArgs&)>;

class Value {
 public:
  Value() = default;  // undefined, with jinja2's "is undefined" message for an unnamed value
  Value(bool b) : kind_(ValueKind::kBool), b_(b) {}     // NOLINT(implicit)
  Value(int64_t i) : kind_(ValueKind::kInt), i_(i) {}   // NOLINT(implicit)
  Value(int i) : kind_(ValueKind::kInt), i_(i) {}       // NOLINT(implicit)
  Value(double f) : kind_(ValueKind::kFloat), f_(f) {}  // NOLINT(implicit)
  Value(std::string s);                                 // NOLINT(implicit)
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT(implicit)
  Value(const char* s) : Value(std::string(s)) {}       // NOLINT(implicit)

  // message: what jinja2 reports when the undefined value is used ("'x' is undefined").
  static Value undefined(std::string message);
  static Value none();
  // A markupsafe.Markup string (from |safe, |escape): prints like a str, but its repr is
  // Markup('...') and `+` with a plain str escapes the plain side, as Python does.
  static Value markup(std::string s);
  static Value list(ValueList items);
  // A lazily-evaluated sequence in jinja2 (a Python generator). Its items are computed eagerly
  // here; an error computing them surfaces only when the generator is consumed, as in Python.
  static Value generator(ValueList items);
  static Value failed_generator(Status error);
  static Value tuple(ValueList items);
  static Value dict(ValueDict entries);
  static Value make_namespace(std::shared_ptr<Namespace> ns);
  static Value callable(std::string name, NativeFunction fn);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  // Python numbers.Number: bool counts, as True + 1 == 2.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_tuple() const { return kind_ == ValueKind::kList && flag_; }
  bool is_markup() const { return kind_ == ValueKind::kString && flag_; }
  bool is_generator() const { return kind_ == ValueKind::kGenerator; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }

  bool get_bool() const { return b_; }
  int64_t get_int() const { return kind_ == ValueKind::kBool ? (b_ ? 1 : 0) : i_; }
  double get_float() const { return f_; }
  // int, float or bool as a double.
  double as_double() const;
  const std::string& get_string() const;
  // The string, moved out when this Value is its only owner (a temporary), else copied.
  std::string release_string() &&;
  const ValueList& get_list() const;
  const Generator& get_generator() const;
  const ValueDict& get_dict() const;
  Namespace& get_namespace() const;
  const Callable& get_callable() const;
  const std::string& undefined_message() const;

  // Python truthiness; Undefined is false.
  bool truthy() const;
  // type(x).__name__ as Python error messages spell it: 'int', 'str', 'NoneType', ...
  std::string_view type_name() const;

 private:
  ValueKind kind_ = ValueKind::kUndefined;
  bool flag_ = false;  // kList: a tuple; kString: a Markup
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  // kString/kUndefined: std::string; kList: ValueList; kGenerator: Generator; kDict: ValueDict;
  // kNamespace: Namespace; kCallable: Callable.
  std::shared_ptr<const void> ptr_;
};

// Insertion-ordered map from string keys, like a Python dict built from JSON.
class ValueDict {
 public:
  using Entry = std::pair<std::string, Value>;

  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key in place, else appends.
  void set(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  static constexpr size_t kIndexThreshold = 16;  // below this a linear scan is faster
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;  // key -> position, once past the threshold
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  NativeFunction fn;
};

struct Namespace {
  ValueDict attrs;
};

struct Generator {
  ValueList items;
  Status error;  // non-ok: consuming the generator fails with it
};

// Dict keys. One string-keyed map holds both kinds a chat template builds: strings as they are,
// and integers (Seed-OSS's {0: 0, 512: 128, ...}) as "\x01" + their decimal, so that 512 and
// "512" stay different keys, as in Python. bool and integral float keys are the int (Python
// hashes True == 1 == 1.0 alike). nullopt: a key type templates do not use (None, list, ...).
std::optional<std::string> dict_key(const Value& key);
// The Value a stored key stands for (an int for an encoded int key).
Value dict_key_value(const std::string& stored);
// A stored key as JSON writes it (json.dumps turns int keys into their decimal).
std::string dict_key_text(const std::string& stored);

// str(x): what {{ x }} prints.
std::string to_str(const Value& v);
// repr(x): how x prints inside a container.
std::string to_repr(const Value& v);
// x == y with Python's rules (1 == 1.0 == True, (1,) != [1], dicts ignore order).
bool values_equal(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=, sort, min and max: negative, zero or positive; an error when
// the types do not order ("'<' not supported between instances of 'int' and 'str'").
Result<int> compare_values(const Value& a, const Value& b, std::string_view op);

}  // namespace ls::jinja
