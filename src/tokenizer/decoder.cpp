#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Maps every token to bytes (a token with a character outside the byte-level alphabet keeps its
// own UTF-8 bytes) and decodes the concatenation lossily into one string.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const ByteLevelMap& map = ByteLevelMap::get();
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool mapped = true;
      size_t i = 0;
      while (i < t.size()) {
        const Utf8Step st = decode_utf8(t, i);
        const auto b = map.char_to_byte(st.cp);
        if (!st.valid || !b) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(*b));
        i += st.len;
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    tokens.assign(1, sanitize_utf8(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Turns runs of <0xNN> tokens into text: the run's bytes when they are valid UTF-8, otherwise
// one U+FFFD per byte token.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(std::move(pending));
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(kReplacementUtf8);
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      if (auto b = parse_byte_token(t)) {
        pending.push_back(static_cast<char>(*b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
  bool groups_byte_tokens() const override { return true; }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of one character per token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<size_t> starts;  // byte offset of every character, plus the end
    for (std::string& t : tokens) {
      starts.clear();
      std::vector<char32_t> chars;
      size_t i = 0;
      while (i < t.size()) {
        const Utf8Step st = decode_utf8(t, i);
        starts.push_back(i);
        chars.push_back(st.cp);
        i += st.len;
      }
      starts.push_back(t.size());
      size_t begin = 0;
      while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
      size_t end = chars.size();
      // HF indexes past the front when stop exceeds the token's length (a panic there); here
      // stripping simply stops at the first character.
      for (size_t k = 0; k < stop_ && end > 0 && chars[end - 1] == content_; ++k) --end;
      if (end < begin) end = begin;
      t = t.substr(starts[begin], starts[end] - starts[begin]);
    }
  }

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

// Metaspace: the replacement character becomes a space, except in the first token when a
// prefix was prepended at encode time (prepend_scheme always/first), where it is dropped.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::string out;
      out.reserve(t.size());
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && drop_first_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }
  bool groups_byte_tokens() const override {
    for (const auto& p : parts_) {
      if (p->groups_byte_tokens()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

Result<char32_t> single_char(const nlohmann::json& j, std::string_view key,
                             std::string_view where) {
  LS_ASSIGN_OR_RETURN(std::string s, json_string(j, key, where));
  if (s.empty() || count_code_points(s) != 1) {
    return invalid_argument("{}.{}: expected one character", where, key);
  }
  return decode_utf8(s, 0).cp;
}

Result<std::unique_ptr<Decoder>> parse_metaspace_decoder(const nlohmann::json& j) {
  constexpr std::string_view kWhere = "decoder Metaspace";
  LS_ASSIGN_OR_RETURN(std::string replacement, json_string(j, "replacement", kWhere));
  if (replacement.empty() || count_code_points(replacement) != 1) {
    return invalid_argument("{}: replacement must be one character", kWhere);
  }
  bool drop_first = true;
  LS_ASSIGN_OR_RETURN(auto scheme, json_opt_string(j, "prepend_scheme", kWhere));
  if (scheme) {
    if (*scheme == "never") {
      drop_first = false;
    } else if (*scheme != "always" && *scheme != "first") {
      return invalid_argument("{}: unknown prepend_scheme '{}'", kWhere, *scheme);
    }
  }
  // The legacy field may stay beside prepend_scheme (default "always") but must agree with it.
  LS_ASSIGN_OR_RETURN(bool add_prefix_space, json_bool(j, "add_prefix_space", true, kWhere));
  if (!add_prefix_space && drop_first) {
    return invalid_argument("{}: add_prefix_space does not match prepend_scheme", kWhere);
  }
  return std::unique_ptr<Decoder>(
      std::make_unique<MetaspaceDecoder>(std::move(replacement), drop_first));
}

}  // namespace

std::optional<uint8_t> parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  // Rust's u8::from_str_radix accepts a leading '+', so "<0x+F>" is byte 0x0F.
  if (t[3] == '+') {
    const int v = hex_value(t[4]);
    if (v < 0) return std::nullopt;
    return static_cast<uint8_t>(v);
  }
  const int hi = hex_value(t[3]);
  const int lo = hex_value(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

Result<std::unique_ptr<Decoder>> parse_decoder(const nlohmann::json& j, int depth) {
  if (depth > kMaxComponentDepth) return invalid_argument("decoder: nested too deeply");
  LS_ASSIGN_OR_RETURN(std::string type, json_type(j, "decoder"));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(std::make_unique<ByteLevelDecoder>());
  if (type == "ByteFallback") {
    return std::unique_ptr<Decoder>(std::make_unique<ByteFallbackDecoder>());
  }
  if (type == "Fuse") return std::unique_ptr<Decoder>(std::make_unique<FuseDecoder>());
  if (type == "Replace") {
    const nlohmann::json* pat = json_member(j, "pattern");
    if (pat == nullptr) return invalid_argument("decoder Replace: missing pattern");
    LS_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(*pat, "decoder Replace.pattern"));
    LS_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", "decoder Replace"));
    return std::unique_ptr<Decoder>(
        std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content)));
  }
  if (type == "Strip") {
    constexpr std::string_view kWhere = "decoder Strip";
    LS_ASSIGN_OR_RETURN(char32_t content, single_char(j, "content", kWhere));
    LS_ASSIGN_OR_RETURN(int64_t start, json_int(j, "start", 0, kWhere));
    LS_ASSIGN_OR_RETURN(int64_t stop, json_int(j, "stop", 0, kWhere));
    if (start < 0 || stop < 0) return invalid_argument("{}: negative start/stop", kWhere);
    return std::unique_ptr<Decoder>(std::make_unique<StripDecoder>(
        content, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Metaspace") return parse_metaspace_decoder(j);
  if (type == "Sequence") {
    const nlohmann::json* list = json_member(j, "decoders");
    if (list == nullptr || !list->is_array()) {
      return invalid_argument("decoder Sequence: expected a decoders array");
    }
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& item : *list) {
      LS_ASSIGN_OR_RETURN(auto part, parse_decoder(item, depth + 1));
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(std::make_unique<SequenceDecoder>(std::move(parts)));
  }
  return unimplemented("decoder type '{}' is not supported", type);
}

}  // namespace ls::tok
