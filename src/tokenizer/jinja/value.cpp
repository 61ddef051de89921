#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <system_error>

#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {

const Value* ValueDict::find(std::string_view key) const {
  if (!index_.empty()) {
    const auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {
constexpr char kIntKeyMark = '\x01';

// The int an encoded key holds, if it is one.
std::optional<int64_t> int_key(const std::string& stored) {
  if (stored.size() < 2 || stored[0] != kIntKeyMark) return std::nullopt;
  int64_t value = 0;
  const char* end = stored.data() + stored.size();
  const auto [ptr, ec] = std::from_chars(stored.data() + 1, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}
}  // namespace

std::optional<std::string> dict_key(const Value& key) {
  if (key.is_string()) return key.get_string();
  if (key.is_int() || key.is_bool()) return kIntKeyMark + std::to_string(key.get_int());
  if (key.is_float() && std::isfinite(key.get_float()) &&
      key.get_float() == std::trunc(key.get_float()) && std::fabs(key.get_float()) < 9.0e18) {
    return kIntKeyMark + std::to_string(static_cast<int64_t>(key.get_float()));
  }
  return std::nullopt;
}

Value dict_key_value(const std::string& stored) {
  if (const std::optional<int64_t> i = int_key(stored)) return Value(*i);
  return Value(stored);
}

std::string dict_key_text(const std::string& stored) {
  if (const std::optional<int64_t> i = int_key(stored)) return std::to_string(*i);
  return stored;
}

void ValueDict::set(std::string key, Value value) {
  if (!index_.empty()) {
    const auto it = index_.find(key);
    if (it != index_.end()) {
      entries_[it->second].second = std::move(value);
      return;
    }
    index_.emplace(key, entries_.size());
    entries_.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  if (entries_.size() > kIndexThreshold) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  }
}

// Strings are stored non-const so that release_string() may move out of a sole owner.
Value::Value(std::string s)
    : kind_(ValueKind::kString), ptr_(std::make_shared<std::string>(std::move(s))) {}

std::string Value::release_string() && {
  if (ptr_.use_count() == 1) {
    return std::move(*const_cast<std::string*>(static_cast<const std::string*>(ptr_.get())));
  }
  return get_string();
}

Value Value::undefined(std::string message) {
  Value v;
  v.ptr_ = std::make_shared<const std::string>(std::move(message));
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.flag_ = true;
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = ValueKind::kList;
  v.ptr_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::generator(ValueList items) {
  Value v;
  v.kind_ = ValueKind::kGenerator;
  v.ptr_ = std::make_shared<const Generator>(Generator{std::move(items), Status::ok_status()});
  return v;
}

Value Value::failed_generator(Status error) {
  Value v;
  v.kind_ = ValueKind::kGenerator;
  v.ptr_ = std::make_shared<const Generator>(Generator{{}, std::move(error)});
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.flag_ = true;
  return v;
}

Value Value::dict(ValueDict entries) {
  Value v;
  v.kind_ = ValueKind::kDict;
  v.ptr_ = std::make_shared<const ValueDict>(std::move(entries));
  return v;
}

Value Value::make_namespace(std::shared_ptr<Namespace> ns) {
  Value v;
  v.kind_ = ValueKind::kNamespace;
  v.ptr_ = std::move(ns);
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.ptr_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const {
  switch (kind_) {
    case ValueKind::kFloat:
      return f_;
    case ValueKind::kInt:
      return static_cast<double>(i_);
    case ValueKind::kBool:
      return b_ ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

const std::string& Value::get_string() const {
  return *static_cast<const std::string*>(ptr_.get());
}
const ValueList& Value::get_list() const {
  return *static_cast<const ValueList*>(ptr_.get());
}
const Generator& Value::get_generator() const {
  return *static_cast<const Generator*>(ptr_.get());
}
const ValueDict& Value::get_dict() const {
  return *static_cast<const ValueDict*>(ptr_.get());
}
Namespace& Value::get_namespace() const {
  // The one mutable object: a namespace is shared by every Value that refers to it.
  return *const_cast<Namespace*>(static_cast<const Namespace*>(ptr_.get()));
}
const Callable& Value::get_callable() const {
  return *static_cast<const Callable*>(ptr_.get());
}
const std::string& Value::undefined_message() const {
  static const std::string kDefault = "value is undefined";
  return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : kDefault;
}

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return b_;
    case ValueKind::kInt:
      return i_ != 0;
    case ValueKind::kFloat:
      return f_ != 0.0;
    case ValueKind::kString:
      return !get_string().empty();
    case ValueKind::kList:
      return !get_list().empty();
    case ValueKind::kDict:
      return !get_dict().empty();
    case ValueKind::kGenerator:
    case ValueKind::kNamespace:
    case ValueKind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return flag_ ? "Markup" : "str";
    case ValueKind::kList:
      return flag_ ? "tuple" : "list";
    case ValueKind::kGenerator:
      return "generator";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "Namespace";
    case ValueKind::kCallable:
      return "function";
  }
  return "object";
}

namespace {

void append_repr(std::string& out, const Value& v);

void append_items(std::string& out, const ValueList& items, bool tuple) {
  out += tuple ? '(' : '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    append_repr(out, items[i]);
  }
  if (tuple && items.size() == 1) out += ',';
  out += tuple ? ')' : ']';
}

void append_dict(std::string& out, const ValueDict& d) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    const Value key = dict_key_value(k);
    if (key.is_int()) {
      out += std::to_string(key.get_int());
    } else {
      out += py::repr_string(k);
    }
    out += ": ";
    append_repr(out, v);
  }
  out += '}';
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      out += "Undefined";
      return;
    case ValueKind::kString:
      if (v.is_markup()) {
        out += fmt::format("Markup({})", py::repr_string(v.get_string()));
      } else {
        out += py::repr_string(v.get_string());
      }
      return;
    case ValueKind::kList:
      append_items(out, v.get_list(), v.is_tuple());
      return;
    case ValueKind::kDict:
      append_dict(out, v.get_dict());
      return;
    default:
      out += to_str(v);
      return;
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return v.get_bool() ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(v.get_int());
    case ValueKind::kFloat:
      return py::repr_float(v.get_float());
    case ValueKind::kString:
      return v.get_string();
    case ValueKind::kList: {
      std::string out;
      append_items(out, v.get_list(), v.is_tuple());
      return out;
    }
    case ValueKind::kDict: {
      std::string out;
      append_dict(out, v.get_dict());
      return out;
    }
    case ValueKind::kNamespace: {
      std::string out = "<Namespace ";
      append_dict(out, v.get_namespace().attrs);
      out += '>';
      return out;
    }
    case ValueKind::kCallable:
      return fmt::format("<function {}>", v.get_callable().name);
    case ValueKind::kGenerator:
      return "<generator object>";
  }
  return "";
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.get_int() == b.get_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.get_string() == b.get_string();
    case ValueKind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.get_list();
      const auto& y = b.get_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const auto& x = a.get_dict();
      const auto& y = b.get_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.find(k);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace:
      return &a.get_namespace() == &b.get_namespace();
    case ValueKind::kGenerator:
      return &a.get_generator() == &b.get_generator();
    case ValueKind::kCallable:
      return &a.get_callable() == &b.get_callable();
    default:
      return false;
  }
}

Result<int> compare_values(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double();
      const double y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.get_int();
    const int64_t y = b.get_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code-point order, which is Python's.
    const int c = a.get_string().compare(b.get_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.get_list();
    const auto& y = b.get_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return invalid_argument("'{}' not supported between instances of '{}' and '{}'", op,
                          a.type_name(), b.type_name());
}

}  // namespace ls::jinja
