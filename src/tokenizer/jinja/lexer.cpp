#include "tokenizer/jinja/lexer.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "tokenizer/jinja/pystr.h"

namespace ls::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python whitespace (what jinja2's `\s` and str.rstrip() see) starting at pos; its byte length.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return py::is_space(c) ? 1 : 0;
  size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  if (pos + len > s.size()) return 0;
  const auto cps = py::decode_utf8(s.substr(pos, len));
  return cps.size() == 1 && py::is_space(cps[0]) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

bool all_spaces(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t n = space_at(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string rstrip_spaces(std::string_view s) {
  return py::strip(s, std::nullopt, false, true);
}

// `(\d+_)*\d+` from pos; returns the end (pos when there is no digit).
size_t scan_digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_digit(s[pos])) return pos;
  while (pos < s.size() && is_digit(s[pos])) ++pos;
  while (pos + 1 < s.size() && s[pos] == '_' && is_digit(s[pos + 1])) {
    ++pos;
    while (pos < s.size() && is_digit(s[pos])) ++pos;
  }
  return pos;
}

// `e[+-]?(\d+_)*\d+` from pos; returns its end or pos.
size_t scan_exponent(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != 'e' && s[pos] != 'E')) return pos;
  size_t p = pos + 1;
  if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
  const size_t end = scan_digits(s, p);
  return end == p ? pos : end;
}

// jinja2's float_re at pos (it never starts right after a '.'); returns the end or pos.
size_t scan_float(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return pos;
  const size_t int_end = scan_digits(s, pos);
  if (int_end == pos) return pos;
  if (int_end + 1 < s.size() && s[int_end] == '.' && is_digit(s[int_end + 1])) {
    const size_t frac_end = scan_digits(s, int_end + 1);
    const size_t exp_end = scan_exponent(s, frac_end);
    return exp_end;
  }
  const size_t exp_end = scan_exponent(s, int_end);
  return exp_end == int_end ? pos : exp_end;
}

// jinja2's integer_re at pos (0b / 0o / 0x prefixes, '_' separators); returns the end or pos.
size_t scan_integer(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_digit(s[pos])) return pos;
  if (s[pos] == '0' && pos + 1 < s.size()) {
    const char p = static_cast<char>(s[pos + 1] | 0x20);
    const int base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
    if (base != 0) {
      size_t q = pos + 2;
      size_t end = pos;
      while (q < s.size()) {
        size_t r = q;
        if (s[r] == '_') ++r;
        if (r < s.size()) {
          const int v = hex_value(s[r]);
          if (v >= 0 && v < base) {
            q = r + 1;
            end = q;
            continue;
          }
        }
        break;
      }
      if (end != pos) return end;
    }
  }
  if (s[pos] == '0') {
    size_t q = pos + 1;
    while (true) {
      size_t r = q;
      if (r < s.size() && s[r] == '_') ++r;
      if (r < s.size() && s[r] == '0') {
        q = r + 1;
        continue;
      }
      break;
    }
    return q;
  }
  size_t q = pos + 1;
  while (true) {
    size_t r = q;
    if (r < s.size() && s[r] == '_') ++r;
    if (r < s.size() && is_digit(s[r])) {
      q = r + 1;
      continue;
    }
    break;
  }
  return q;
}

struct OperatorSpelling {
  std::string_view text;
  TokenType type;
};
constexpr OperatorSpelling kOperators[] = {
    {"//", TokenType::kFloorDiv}, {"**", TokenType::kPow},      {"==", TokenType::kEq},
    {"!=", TokenType::kNe},       {">=", TokenType::kGe},       {"<=", TokenType::kLe},
    {"+", TokenType::kAdd},       {"-", TokenType::kSub},       {"/", TokenType::kDiv},
    {"*", TokenType::kMul},       {"%", TokenType::kMod},       {"~", TokenType::kTilde},
    {"[", TokenType::kLBracket},  {"]", TokenType::kRBracket},  {"(", TokenType::kLParen},
    {")", TokenType::kRParen},    {"{", TokenType::kLBrace},    {"}", TokenType::kRBrace},
    {">", TokenType::kGt},        {"<", TokenType::kLt},        {"=", TokenType::kAssign},
    {".", TokenType::kDot},       {":", TokenType::kColon},     {"|", TokenType::kPipe},
    {",", TokenType::kComma},     {";", TokenType::kSemicolon},
};

// Python's unicode-escape decoding of a string literal's body, as jinja2 applies it.
Result<std::string> decode_string_literal(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  size_t i = 0;
  auto hex_escape = [&](size_t num_digits, char32_t* cp) {
    if (i + num_digits > body.size()) return false;
    char32_t v = 0;
    for (size_t k = 0; k < num_digits; ++k) {
      const int h = hex_value(body[i + k]);
      if (h < 0) return false;
      v = v * 16 + static_cast<char32_t>(h);
    }
    *cp = v;
    i += num_digits;
    return true;
  };
  while (i < body.size()) {
    const char c = body[i++];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i >= body.size()) return invalid_argument("\\ at end of string");
    const char e = body[i++];
    char32_t cp = 0;
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        if (!hex_escape(2, &cp)) return invalid_argument("truncated \\xXX escape");
        py::append_utf8(out, cp);
        break;
      case 'u':
        if (!hex_escape(4, &cp)) return invalid_argument("truncated \\uXXXX escape");
        py::append_utf8(out, cp);
        break;
      case 'U':
        if (!hex_escape(8, &cp)) return invalid_argument("truncated \\UXXXXXXXX escape");
        if (cp > 0x10FFFF) return invalid_argument("illegal Unicode character");
        py::append_utf8(out, cp);
        break;
      case 'N':
        return unimplemented("{}", "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
            cp = cp * 8 + static_cast<char32_t>(body[i++] - '0');
          }
          py::append_utf8(out, cp);
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // jinja2 backslash-escapes non-ASCII text before unicode-escape decoding, so "\é"
          // keeps its backslash and becomes the six characters \xe9.
          --i;
          size_t n = 1;
          while (i + n < body.size() && (static_cast<unsigned char>(body[i + n]) & 0xC0) == 0x80) {
            ++n;
          }
          const auto cps = py::decode_utf8(body.substr(i, n));
          i += n;
          char buf[16];
          const auto v = static_cast<unsigned>(cps.empty() ? 0xFFFD : cps[0]);
          std::snprintf(buf, sizeof(buf),
                        v < 0x100     ? "\\x%02x"
                        : v < 0x10000 ? "\\u%04x"
                                      : "\\U%08x",
                        v);
          out += buf;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(source) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      LS_RETURN_IF_ERROR(lex_root());
    }
    push(TokenType::kEof, static_cast<uint32_t>(src_.size()));
    return std::move(tokens_);
  }

 private:
  Status error_at(size_t offset, std::string_view message) {
    const SourcePosition p = position_of(src_, static_cast<uint32_t>(offset));
    return invalid_argument("syntax error at line {}, column {}: {}", p.line, p.column, message);
  }

  Token& push(TokenType type, uint32_t offset) {
    tokens_.push_back(Token{type, offset, {}, 0, 0.0});
    return tokens_.back();
  }

  void push_data(std::string text, size_t offset) {
    if (text.empty()) return;
    push(TokenType::kData, static_cast<uint32_t>(offset)).text = std::move(text);
  }

  // Data before a tag, with the tag's whitespace control applied: `-` strips all whitespace,
  // lstrip_blocks strips a block or comment tag's indentation when only whitespace precedes it
  // on its line.
  std::string strip_before_tag(std::string_view text, char sign, bool lstrip_applies) const {
    if (sign == '-') return rstrip_spaces(text);
    if (sign != '+' && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() && all_spaces(text.substr(l_pos))) {
        return std::string(text.substr(0, l_pos));
      }
    }
    return std::string(text);
  }

  // One piece of the root state: the data up to the next tag, then the tag.
  Status lex_root() {
    size_t tag = pos_;
    char kind = 0;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string_view::npos || tag + 1 >= src_.size()) {
        push_data(std::string(src_.substr(pos_)), pos_);
        pos_ = src_.size();
        return Status::ok_status();
      }
      const char next = src_[tag + 1];
      if (next == '{' || next == '%' || next == '#') {
        kind = next;
        break;
      }
      ++tag;
    }
    char sign = 0;
    size_t after = tag + 2;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    const size_t raw_end = kind == '%' ? match_raw_begin(after) : 0;
    const std::string_view text = src_.substr(pos_, tag - pos_);
    push_data(strip_before_tag(text, sign, kind != '{'), pos_);
    line_starting_ = false;
    if (raw_end != 0) {
      pos_ = raw_end;
      line_starting_ = src_[raw_end - 1] == '\n';
      return lex_raw_body(tag);
    }
    pos_ = after;
    if (kind == '#') return lex_comment(tag);
    push(kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin,
         static_cast<uint32_t>(tag));
    return lex_tag(kind == '{');
  }

  // `\s*raw\s*(-%}\s*|%})` after "{%" and its sign; the end of the match, or 0.
  size_t match_raw_begin(size_t p) const {
    p = skip_spaces(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return 0;
    p = skip_spaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return skip_spaces(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  Status lex_raw_body(size_t begin_offset) {
    size_t search = pos_;
    while (true) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string_view::npos) {
        return error_at(begin_offset, "Missing end of raw directive");
      }
      size_t p = tag + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_spaces(src_, p);
      if (src_.compare(p, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      p = skip_spaces(src_, p + 6);
      size_t end = 0;
      if (src_.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (src_.compare(p, 3, "-%}") == 0) {
        end = skip_spaces(src_, p + 3);
      } else if (src_.compare(p, 2, "%}") == 0) {
        end = p + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = tag + 2;
        continue;
      }
      push_data(strip_before_tag(src_.substr(pos_, tag - pos_), sign, true), pos_);
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return Status::ok_status();
    }
  }

  Status lex_comment(size_t begin_offset) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string_view::npos)
      return error_at(begin_offset, "Missing end of comment tag");
    const char sign = close > pos_ ? src_[close - 1] : 0;
    size_t end = close + 2;
    if (sign == '-') {
      end = skip_spaces(src_, end);
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    pos_ = end;
    line_starting_ = src_[end - 1] == '\n';
    return Status::ok_status();
  }

  // Tokens inside {{ }} or {% %} up to the end tag; the end tag only counts outside brackets.
  Status lex_tag(bool is_variable) {
    std::vector<char> brackets;  // expected closers
    while (pos_ < src_.size()) {
      if (brackets.empty()) {
        if (const size_t end = match_tag_end(is_variable)) {
          push(is_variable ? TokenType::kVariableEnd : TokenType::kBlockEnd,
               static_cast<uint32_t>(pos_));
          pos_ = end;
          line_starting_ = src_[end - 1] == '\n';
          return Status::ok_status();
        }
      }
      if (const size_t ws = skip_spaces(src_, pos_); ws != pos_) {
        pos_ = ws;
        continue;
      }
      LS_RETURN_IF_ERROR(lex_operand_or_operator(brackets));
    }
    return Status::ok_status();  // the parser reports the unexpected end of template
  }

  // The end of the tag-closing match at pos_ (with trim_blocks / `-` trimming), or 0.
  size_t match_tag_end(bool is_variable) const {
    const std::string_view close = is_variable ? "}}" : "%}";
    if (src_.compare(pos_, 1, "-") == 0 && src_.compare(pos_ + 1, 2, close) == 0) {
      return skip_spaces(src_, pos_ + 3);
    }
    if (is_variable) return src_.compare(pos_, 2, close) == 0 ? pos_ + 2 : 0;
    if (src_.compare(pos_, 3, "+%}") == 0) return pos_ + 3;
    if (src_.compare(pos_, 2, close) == 0) {
      return pos_ + 2 + ((pos_ + 2 < src_.size() && src_[pos_ + 2] == '\n') ? 1 : 0);
    }
    return 0;
  }

  Status lex_operand_or_operator(std::vector<char>& brackets) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (is_digit(c)) {
      if (const size_t end = scan_float(src_, pos_); end != pos_) {
        std::string digits;
        for (char d : src_.substr(pos_, end - pos_)) {
          if (d != '_') digits += d;
        }
        Token& t = push(TokenType::kFloat, static_cast<uint32_t>(start));
        const auto res =
            std::from_chars(digits.data(), digits.data() + digits.size(), t.float_value);
        if (res.ec == std::errc::result_out_of_range) {
          t.float_value = std::strtod(digits.c_str(), nullptr);  // inf or 0, as Python parses it
        }
        pos_ = end;
        return Status::ok_status();
      }
      const size_t end = scan_integer(src_, pos_);
      const auto value = py::parse_int(src_.substr(pos_, end - pos_), 0);
      if (!value) return error_at(start, "integer literal out of range");
      push(TokenType::kInteger, static_cast<uint32_t>(start)).int_value = *value;
      pos_ = end;
      return Status::ok_status();
    }
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      push(TokenType::kName, static_cast<uint32_t>(start)).text =
          std::string(src_.substr(pos_, end - pos_));
      pos_ = end;
      return Status::ok_status();
    }
    if (c == '\'' || c == '"') {
      size_t end = pos_ + 1;
      while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
      if (end >= src_.size())
        return error_at(start,
                        fmt::format("unexpected char {}", py::repr_string(std::string(1, c))));
      auto decoded = decode_string_literal(src_.substr(pos_ + 1, end - pos_ - 1));
      if (!decoded.ok()) return error_at(start, decoded.status().message());
      push(TokenType::kString, static_cast<uint32_t>(start)).text = std::move(decoded).value();
      pos_ = end + 1;
      return Status::ok_status();
    }
    for (const auto& op : kOperators) {
      if (src_.compare(pos_, op.text.size(), op.text) != 0) continue;
      if (op.type == TokenType::kLParen) brackets.push_back(')');
      if (op.type == TokenType::kLBracket) brackets.push_back(']');
      if (op.type == TokenType::kLBrace) brackets.push_back('}');
      if (op.type == TokenType::kRParen || op.type == TokenType::kRBracket ||
          op.type == TokenType::kRBrace) {
        if (brackets.empty()) return error_at(start, fmt::format("unexpected '{}'", op.text));
        if (brackets.back() != op.text[0]) {
          return error_at(start,
                          fmt::format("unexpected '{}', expected '{}'", op.text, brackets.back()));
        }
        brackets.pop_back();
      }
      push(op.type, static_cast<uint32_t>(start));
      pos_ += op.text.size();
      return Status::ok_status();
    }
    const auto cps = py::decode_utf8(src_.substr(pos_, 4));
    std::string ch;
    py::append_utf8(ch, cps.empty() ? 0xFFFD : cps[0]);
    return error_at(start, fmt::format("unexpected char {}", py::repr_string(ch)));
  }

  std::string_view src_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last match ended with a newline (lstrip_blocks needs it)
  std::vector<Token> tokens_;
};

}  // namespace

std::string describe_token(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data / text";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kName:
      return token.text;
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
      return "integer";
    case TokenType::kFloat:
      return "float";
    case TokenType::kEof:
      return "end of template";
    default:
      for (const auto& op : kOperators) {
        if (op.type == token.type) return std::string(op.text);
      }
      return "operator";
  }
}

SourcePosition position_of(std::string_view source, uint32_t offset) {
  SourcePosition p;
  const size_t end = std::min<size_t>(offset, source.size());
  size_t line_start = 0;
  for (size_t i = 0; i < end; ++i) {
    if (source[i] == '\n') {
      ++p.line;
      line_start = i + 1;
    }
  }
  p.column = static_cast<int>(py::length(source.substr(line_start, end - line_start))) + 1;
  return p;
}

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

Result<std::vector<Token>> tokenize(std::string_view normalized_source) {
  Lexer lexer(normalized_source);
  return lexer.run();
}

}  // namespace ls::jinja
