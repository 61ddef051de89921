#include "structured/regex_grammar.h"

#include <algorithm>
#include <utility>

#include "structured/utf8_ranges.h"

namespace ls::grammar {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges, inclusive

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxNesting = 256;
constexpr int32_t kMaxRepeat = 1000;

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges negate(const Ranges& r) {
  Ranges n = normalize(r);
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, const ByteSet* forbidden)
      : b_(b), p_(p), forbidden_(forbidden) {}

  Result<Sym> parse() {
    if (!p_.empty() && p_[0] == '^') ++pos_;
    LS_ASSIGN_OR_RETURN(Sym s, alternation(0));
    if (pos_ < p_.size()) return error("unbalanced ')'");
    return s;
  }

 private:
  Status error(std::string_view what) const {
    return invalid_argument("regex: {} at offset {} of '{}'", what, pos_, p_);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }

  Result<Sym> alternation(int depth) {
    if (depth > kMaxNesting) return error("groups nest too deeply");
    std::vector<Seq> alts;
    while (true) {
      LS_ASSIGN_OR_RETURN(Seq seq, concatenation(depth));
      alts.push_back(std::move(seq));
      if (at_end() || peek() != '|') break;
      ++pos_;
    }
    return b_.rule(std::move(alts));
  }

  Result<Seq> concatenation(int depth) {
    Seq seq;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && pos_ + 1 == p_.size()) {
        ++pos_;
        break;
      }
      LS_ASSIGN_OR_RETURN(Seq atom_seq, atom(depth));
      LS_ASSIGN_OR_RETURN(Seq repeated, quantified(std::move(atom_seq)));
      append(seq, repeated);
    }
    return seq;
  }

  Result<int32_t> number() {
    size_t start = pos_;
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) return error("repetition count too large");
      ++pos_;
    }
    if (pos_ == start) return error("expected a number");
    return static_cast<int32_t>(v);
  }

  Result<Seq> quantified(Seq atom_seq) {
    if (at_end()) return atom_seq;
    int32_t min = 1;
    int32_t max = 1;
    const char c = peek();
    if (c == '*') {
      min = 0;
      max = -1;
      ++pos_;
    } else if (c == '+') {
      max = -1;
      ++pos_;
    } else if (c == '?') {
      min = 0;
      ++pos_;
    } else if (c == '{') {
      ++pos_;
      LS_ASSIGN_OR_RETURN(min, number());
      max = min;
      if (!at_end() && peek() == ',') {
        ++pos_;
        if (!at_end() && peek() == '}') {
          max = -1;
        } else {
          LS_ASSIGN_OR_RETURN(max, number());
        }
      }
      if (at_end() || peek() != '}') return error("expected '}'");
      ++pos_;
      if (max >= 0 && max < min) return error("{n,m} with m < n");
    } else {
      return atom_seq;
    }
    if (!at_end() && (peek() == '?' || peek() == '+')) ++pos_;  // lazy / possessive: same set
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      return error("nested quantifier");
    }
    return Seq{b_.repeat(std::move(atom_seq), min, max)};
  }

  Result<Seq> atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (!at_end() && peek() == '?') {
        ++pos_;
        if (!at_end() && peek() == ':') {
          ++pos_;
        } else if (!at_end() && (peek() == 'P' || peek() == '<')) {
          if (peek() == 'P') ++pos_;
          if (at_end() || peek() != '<') return error("unsupported group");
          const size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) return error("unterminated group name");
          pos_ = close + 1;
        } else {
          return error("lookaround and inline flags are not supported");
        }
      }
      LS_ASSIGN_OR_RETURN(Sym inner, alternation(depth + 1));
      if (at_end() || peek() != ')') return error("missing ')'");
      ++pos_;
      return Seq{inner};
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return Seq{class_sym(negate({{'\n', '\n'}}))};
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return error("quantifier without an atom");
    if (c == '^' || c == '$') return error("anchors are supported only at the ends");
    if (c == '\\') {
      ++pos_;
      if (at_end()) return error("trailing backslash");
      Ranges r;
      LS_ASSIGN_OR_RETURN(bool is_class, escape(r));
      (void)is_class;
      return Seq{class_sym(r)};
    }
    // A literal code point (UTF-8 in the pattern).
    LS_ASSIGN_OR_RETURN(uint32_t cp, literal_code_point());
    return Seq{class_sym({{cp, cp}})};
  }

  Result<uint32_t> literal_code_point() {
    const auto lead = static_cast<uint8_t>(p_[pos_]);
    int len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > p_.size()) return error("invalid UTF-8");
    uint32_t cp = len == 1 ? lead : len == 2 ? (lead & 0x1Fu) : len == 3 ? (lead & 0x0Fu) : (lead & 0x07u);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<uint8_t>(p_[pos_ + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) return error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3Fu);
    }
    pos_ += static_cast<size_t>(len);
    if (cp > kMaxCodePoint) return error("invalid UTF-8");
    return cp;
  }

  Result<uint32_t> hex_digits(int count) {
    uint32_t v = 0;
    for (int k = 0; k < count; ++k) {
      if (at_end()) return error("short hex escape");
      const char h = peek();
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return error("bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // After a backslash: adds the escape's code points to r. Returns whether it was a class.
  Result<bool> escape(Ranges& r) {
    const char e = peek();
    ++pos_;
    const Ranges digit = {{'0', '9'}};
    const Ranges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space = {{'\t', '\r'}, {' ', ' '}};
    switch (e) {
      case 'd': r.insert(r.end(), digit.begin(), digit.end()); return true;
      case 'w': r.insert(r.end(), word.begin(), word.end()); return true;
      case 's': r.insert(r.end(), space.begin(), space.end()); return true;
      case 'D': { Ranges n = negate(digit); r.insert(r.end(), n.begin(), n.end()); return true; }
      case 'W': { Ranges n = negate(word); r.insert(r.end(), n.begin(), n.end()); return true; }
      case 'S': { Ranges n = negate(space); r.insert(r.end(), n.begin(), n.end()); return true; }
      case 'n': r.emplace_back('\n', '\n'); return false;
      case 't': r.emplace_back('\t', '\t'); return false;
      case 'r': r.emplace_back('\r', '\r'); return false;
      case 'f': r.emplace_back('\f', '\f'); return false;
      case 'v': r.emplace_back('\v', '\v'); return false;
      case 'x': {
        LS_ASSIGN_OR_RETURN(uint32_t v, hex_digits(2));
        r.emplace_back(v, v);
        return false;
      }
      case 'u': {
        LS_ASSIGN_OR_RETURN(uint32_t v, hex_digits(4));
        r.emplace_back(v, v);
        return false;
      }
      default:
        break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
      --pos_;
      return error("unsupported escape (backreferences, \\b and the like)");
    }
    --pos_;
    LS_ASSIGN_OR_RETURN(uint32_t cp, literal_code_point());
    r.emplace_back(cp, cp);
    return false;
  }

  Result<Seq> char_class() {
    ++pos_;  // '['
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    while (true) {
      if (at_end()) return error("unterminated character class");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++pos_;
        if (at_end()) return error("trailing backslash");
        Ranges one;
        LS_ASSIGN_OR_RETURN(bool is_class, escape(one));
        if (is_class) {
          r.insert(r.end(), one.begin(), one.end());
          continue;
        }
        lo = one[0].first;
      } else {
        LS_ASSIGN_OR_RETURN(lo, literal_code_point());
      }
      uint32_t hi = lo;
      if (pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          if (at_end()) return error("trailing backslash");
          Ranges one;
          LS_ASSIGN_OR_RETURN(bool is_class, escape(one));
          if (is_class) return error("a class cannot end a range");
          hi = one[0].first;
        } else {
          LS_ASSIGN_OR_RETURN(hi, literal_code_point());
        }
        if (hi < lo) return error("range out of order");
      }
      r.emplace_back(lo, hi);
    }
    return Seq{class_sym(negated ? negate(r) : r)};
  }

  // The code points of r (minus forbidden bytes) as one symbol.
  Sym class_sym(const Ranges& r) {
    std::vector<Utf8Sequence> seqs;
    for (const auto& [lo, hi] : normalize(r)) utf8_sequences(lo, hi, seqs);
    ByteSet single{};
    std::vector<Seq> alts;
    for (const Utf8Sequence& s : seqs) {
      if (s.size() == 1) {
        byte_set_add_range(single, s[0].first, s[0].second);
        continue;
      }
      Seq seq;
      for (const auto& [lo, hi] : s) seq.push_back(b_.byte_range(lo, hi));
      alts.push_back(std::move(seq));
    }
    if (forbidden_ != nullptr) {
      for (size_t w = 0; w < 4; ++w) single[w] &= ~(*forbidden_)[w];
    }
    if (single != ByteSet{}) alts.insert(alts.begin(), Seq{b_.bytes(single)});
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    // An empty class matches nothing: a rule with no alternatives.
    return b_.rule(std::move(alts));
  }

  GrammarBuilder& b_;
  std::string_view p_;
  const ByteSet* forbidden_;
  size_t pos_ = 0;
};

}  // namespace

Result<Sym> add_regex(GrammarBuilder& b, std::string_view pattern, const ByteSet* forbidden) {
  RegexParser parser(b, pattern, forbidden);
  return parser.parse();
}

Result<Grammar> regex_grammar(std::string_view pattern) {
  GrammarBuilder b;
  LS_ASSIGN_OR_RETURN(Sym root, add_regex(b, pattern, nullptr));
  return std::move(b).build(root);
}

Result<Grammar> choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("guided_choice must not be empty");
  GrammarBuilder b;
  std::vector<Seq> alts;
  for (const std::string& c : choices) alts.push_back(b.literal(c));
  const Sym root = b.rule(std::move(alts));
  return std::move(b).build(root);
}

}  // namespace ls::grammar
