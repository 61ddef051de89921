#include "io/json_util.h"

#include <fstream>
#include <limits>
#include <new>
#include <unordered_set>

namespace ls::io_json {
namespace {

// A first, DOM-free pass over the text: syntax and UTF-8 (nlohmann's lexer), nesting depth, and
// optionally duplicate keys, which the DOM parser would silently collapse.
class SyntaxChecker : public nlohmann::json_sax<Json> {
 public:
  explicit SyntaxChecker(const ParseOptions& options) : options_(options) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }

  bool start_object(std::size_t) override { return push(true); }
  bool end_object() override { return pop(); }
  bool start_array(std::size_t) override { return push(false); }
  bool end_array() override { return pop(); }

  bool key(string_t& key) override {
    Frame& frame = frames_.back();
    if (options_.reject_duplicate_keys && !frame.keys.insert(key).second) {
      error_ = "duplicate key \"" + key + "\"";
      // Name the enclosing key too (for safetensors: the tensor whose entry repeats a field).
      for (size_t i = frames_.size() - 1; i-- > 0;) {
        if (frames_[i].is_object) {
          error_ += " inside \"" + frames_[i].last_key + "\"";
          break;
        }
      }
      return false;
    }
    frame.last_key = key;
    return true;
  }

  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_ = ex.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool is_object = false;
    std::unordered_set<std::string> keys;  // only filled when duplicates are rejected
    std::string last_key;
  };

  bool push(bool is_object) {
    if (static_cast<int>(frames_.size()) >= options_.max_depth) {
      error_ = "JSON nests deeper than " + std::to_string(options_.max_depth) + " levels";
      return false;
    }
    frames_.push_back(Frame{is_object, {}, {}});
    return true;
  }
  bool pop() {
    frames_.pop_back();
    return true;
  }

  ParseOptions options_;
  std::vector<Frame> frames_;
  std::string error_;
};

Status wrong_type(std::string_view source, std::string_view path, std::string_view kind,
                  const Json& value) {
  return invalid_argument("{}: field \"{}\" must be {}, got {}", source, path, kind,
                          type_name(value));
}

// nullptr when the key is absent or null.
const Json* lookup(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<int64_t> to_int(const Json& v, std::string_view source, std::string_view path) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument("{}: field \"{}\" is out of range ({})", source, path, u);
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return wrong_type(source, path, "an integer", v);
}

}  // namespace

Result<Json> parse(std::string_view text, const ParseOptions& options) {
  // nlohmann's lexer takes a NUL byte for the end of input, which would silently accept anything
  // after it; JSON text can never contain a raw NUL, so refuse it up front.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return data_loss("invalid JSON: NUL byte at offset {}", nul);
  }
  try {
    SyntaxChecker checker(options);
    if (!Json::sax_parse(text.begin(), text.end(), &checker)) {
      return data_loss("{}", checker.error().empty() ? "invalid JSON" : checker.error());
    }
    Json doc = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return data_loss("invalid JSON");
    return doc;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while parsing JSON");
  } catch (const std::exception& e) {
    return data_loss("invalid JSON: {}", e.what());
  }
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("{}: no such file", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("{}: cannot open", path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return io_error("{}: read failed", path.string());
  return text;
}

std::string type_name(const Json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number_float()) return "a non-integer number";
  if (value.is_boolean()) return "a boolean";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  if (value.is_null()) return "null";
  return "an unsupported value";
}

Result<std::optional<int64_t>> opt_int(const Json& obj, std::string_view key,
                                       std::string_view source, std::string_view path) {
  const Json* v = lookup(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  LS_ASSIGN_OR_RETURN(int64_t x, to_int(*v, source, path));
  return std::optional<int64_t>(x);
}

Result<std::optional<double>> opt_number(const Json& obj, std::string_view key,
                                         std::string_view source, std::string_view path) {
  const Json* v = lookup(obj, key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return wrong_type(source, path, "a number", *v);
  return std::optional<double>(v->get<double>());
}

Result<std::optional<bool>> opt_bool(const Json& obj, std::string_view key, std::string_view source,
                                     std::string_view path) {
  const Json* v = lookup(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return wrong_type(source, path, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<std::string>> opt_string(const Json& obj, std::string_view key,
                                              std::string_view source, std::string_view path) {
  const Json* v = lookup(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return wrong_type(source, path, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::vector<int64_t>> int_or_int_list(const Json& obj, std::string_view key,
                                             std::string_view source, std::string_view path) {
  std::vector<int64_t> out;
  const Json* v = lookup(obj, key);
  if (v == nullptr) return out;
  if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string item_path = fmt::format("{}[{}]", path, i);
      LS_ASSIGN_OR_RETURN(int64_t x, to_int((*v)[i], source, item_path));
      out.push_back(x);
    }
    return out;
  }
  if (!v->is_number_integer()) {
    return wrong_type(source, path, "an integer or a list of integers", *v);
  }
  LS_ASSIGN_OR_RETURN(int64_t x, to_int(*v, source, path));
  out.push_back(x);
  return out;
}

}  // namespace ls::io_json
