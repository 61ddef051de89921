#include "structured/json_scan.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace ls::grammar {

namespace {

constexpr size_t kMaxNesting = 512;

bool is_scalar_byte(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' ||
         c == '-' || c == '.';
}

}  // namespace

size_t skip_json_ws(std::string_view text, size_t pos) {
  while (pos < text.size() &&
         (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r')) {
    ++pos;
  }
  return pos;
}

ScanResult scan_json_value(std::string_view text, size_t pos) {
  ScanResult r;
  pos = skip_json_ws(text, pos);
  r.begin = pos;
  r.end = text.size();
  if (pos >= text.size()) {
    r.kind = ScanKind::kIncomplete;
    return r;
  }
  std::string brackets;
  size_t i = pos;
  bool done = false;
  while (i < text.size() && !done) {
    const char c = text[i];
    if (c == '"') {
      ++i;
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\') ++i;
        ++i;
      }
      if (i >= text.size()) {
        r.kind = ScanKind::kIncomplete;
        return r;
      }
      ++i;  // closing quote
      done = brackets.empty();
    } else if (c == '{' || c == '[') {
      if (brackets.size() >= kMaxNesting) {
        r.end = i;
        return r;  // invalid
      }
      brackets.push_back(c == '{' ? '}' : ']');
      ++i;
    } else if (c == '}' || c == ']') {
      if (brackets.empty() || brackets.back() != c) {
        r.end = i;
        return r;  // invalid
      }
      brackets.pop_back();
      ++i;
      done = brackets.empty();
    } else if (is_scalar_byte(c)) {
      while (i < text.size() && is_scalar_byte(text[i])) ++i;
      if (brackets.empty()) {
        if (i >= text.size()) {
          r.kind = ScanKind::kIncomplete;
          return r;
        }
        done = true;
      }
    } else if (!brackets.empty() && (c == ',' || c == ':' || c == ' ' || c == '\t' ||
                                     c == '\n' || c == '\r')) {
      ++i;
    } else {
      r.end = i;
      return r;  // invalid
    }
  }
  if (!done) {
    r.kind = ScanKind::kIncomplete;
    return r;
  }
  r.end = i;
  r.kind = nlohmann::json::accept(text.substr(pos, i - pos)) ? ScanKind::kComplete
                                                             : ScanKind::kInvalid;
  return r;
}

std::optional<std::string> decode_json_string(std::string_view token) {
  if (token.size() < 2 || token.front() != '"') return std::nullopt;
  nlohmann::json v = nlohmann::json::parse(token, nullptr, /*allow_exceptions=*/false);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

CallScan scan_call_object(std::string_view text, size_t pos,
                          const std::vector<std::string_view>& args_keys) {
  CallScan out;
  pos = skip_json_ws(text, pos);
  if (pos >= text.size()) {
    out.kind = ScanKind::kIncomplete;
    return out;
  }
  if (text[pos] != '{') return out;
  ++pos;
  bool first = true;
  while (true) {
    pos = skip_json_ws(text, pos);
    if (pos >= text.size()) {
      out.kind = ScanKind::kIncomplete;
      return out;
    }
    if (text[pos] == '}' && first) {
      out.kind = ScanKind::kComplete;
      out.end = pos + 1;
      return out;
    }
    const ScanResult key = scan_json_value(text, pos);
    if (key.kind != ScanKind::kComplete) {
      out.kind = key.kind;
      return out;
    }
    const std::optional<std::string> key_text =
        decode_json_string(text.substr(key.begin, key.end - key.begin));
    if (!key_text) return out;  // invalid: a key that is not a string
    pos = skip_json_ws(text, key.end);
    if (pos >= text.size()) {
      out.kind = ScanKind::kIncomplete;
      return out;
    }
    if (text[pos] != ':') return out;
    const ScanResult value = scan_json_value(text, pos + 1);
    const bool is_args =
        std::find(args_keys.begin(), args_keys.end(), std::string_view(*key_text)) !=
        args_keys.end();
    // The first arguments key counts (a repeated key must not change what was streamed); an
    // invalid value still yields its text up to the offending byte, so that partial results
    // only ever grow.
    if (is_args && !out.arguments) {
      out.arguments = std::string(text.substr(value.begin, value.end - value.begin));
      out.arguments_complete = value.kind == ScanKind::kComplete;
    }
    if (value.kind == ScanKind::kInvalid) return out;
    if (value.kind == ScanKind::kIncomplete) {
      out.kind = ScanKind::kIncomplete;
      return out;
    }
    if (*key_text == "name" && !out.name) {
      out.name = decode_json_string(text.substr(value.begin, value.end - value.begin));
      if (!out.name) return out;  // invalid: the name must be a string
    }
    first = false;
    pos = skip_json_ws(text, value.end);
    if (pos >= text.size()) {
      out.kind = ScanKind::kIncomplete;
      return out;
    }
    if (text[pos] == ',') {
      ++pos;
      continue;
    }
    if (text[pos] == '}') {
      out.kind = ScanKind::kComplete;
      out.end = pos + 1;
      return out;
    }
    return out;
  }
}

}  // namespace ls::grammar
