#include "tokenizer/pre_tokenizer.h"

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

// Cuts every piece at the spans a function produces; a sub-piece is at the start only when it
// begins where its parent began.
template <typename SplitFn>
void split_pieces(std::vector<Piece>& pieces, SplitFn&& split_fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  std::vector<Span> spans;
  for (Piece& piece : pieces) {
    spans.clear();
    split_fn(piece.text, spans);
    for (const Span& s : spans) {
      if (s.end <= s.start) continue;
      if (s.start == 0 && s.end == piece.text.size()) {
        out.push_back(std::move(piece));
        break;
      }
      out.push_back({piece.text.substr(s.start, s.end - s.start), piece.at_start && s.start == 0});
    }
  }
  pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<MatchPiece> matches;
    split_pieces(pieces, [&](const std::string& text, std::vector<Span>& spans) {
      pattern_.find_matches(text, matches);
      apply_split_behavior(matches, behavior_, invert_, spans);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// The GPT-2 pre-tokenization regex that ByteLevel applies when use_regex is true.
const Pattern& gpt2_pattern() {
  static const Pattern p = [] {
    auto r = Pattern::regex(
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
    return std::move(r).value();  // a constant pattern that is known to compile
  }();
  return p;
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        // HF prepends only to non-empty text.
        if (!p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
      }
    }
    if (use_regex_) {
      std::vector<MatchPiece> matches;
      split_pieces(pieces, [&](const std::string& text, std::vector<Span>& spans) {
        gpt2_pattern().find_matches(text, matches);
        apply_split_behavior(matches, SplitBehavior::kIsolated, false, spans);
      });
    }
    const ByteLevelMap& map = ByteLevelMap::get();
    for (Piece& p : pieces) p.text = map.encode(p.text);
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        space_(Pattern::literal(" ")) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      p.text = space_.replace_all(p.text, replacement_);
      const bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && !p.text.empty() &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        p.text.insert(0, replacement_);
      }
    }
    if (split_) {
      const Pattern rep = Pattern::literal(replacement_);
      std::vector<MatchPiece> matches;
      split_pieces(pieces, [&](const std::string& text, std::vector<Span>& spans) {
        rep.find_matches(text, matches);
        apply_split_behavior(matches, SplitBehavior::kMergedWithNext, false, spans);
      });
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Pattern space_;
};

// Splits on Unicode numeric characters (Rust's char::is_numeric: Nd, Nl, No), each digit alone
// or runs of digits together.
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<MatchPiece> matches;
    split_pieces(pieces, [&](const std::string& text, std::vector<Span>& spans) {
      matches.clear();
      size_t prev = 0;
      size_t i = 0;
      while (i < text.size()) {
        const Utf8Step st = decode_utf8(text, i);
        if (is_numeric(st.cp)) {
          if (prev != i) matches.push_back({prev, i, false});
          matches.push_back({i, i + st.len, true});
          prev = i + st.len;
        }
        i += st.len;
      }
      if (prev != text.size() || matches.empty()) matches.push_back({prev, text.size(), false});
      apply_split_behavior(matches,
                           individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                           false, spans);
    });
  }

 private:
  static bool is_numeric(char32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
           cat == UTF8PROC_CATEGORY_NO;
  }
  bool individual_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Result<std::unique_ptr<PreTokenizer>> parse_metaspace(const nlohmann::json& j) {
  constexpr std::string_view kWhere = "pre_tokenizer Metaspace";
  LS_ASSIGN_OR_RETURN(std::string replacement, json_string(j, "replacement", kWhere));
  if (replacement.empty() || count_code_points(replacement) != 1) {
    return invalid_argument("{}: replacement must be one character", kWhere);
  }
  PrependScheme scheme = PrependScheme::kAlways;
  LS_ASSIGN_OR_RETURN(auto scheme_name, json_opt_string(j, "prepend_scheme", kWhere));
  if (scheme_name) {
    if (*scheme_name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (*scheme_name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (*scheme_name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return invalid_argument("{}: unknown prepend_scheme '{}'", kWhere, *scheme_name);
    }
  }
  // The legacy field may stay beside prepend_scheme (default "always") but must agree with it.
  LS_ASSIGN_OR_RETURN(bool add_prefix_space, json_bool(j, "add_prefix_space", true, kWhere));
  if (!add_prefix_space && scheme != PrependScheme::kNever) {
    return invalid_argument("{}: add_prefix_space does not match prepend_scheme", kWhere);
  }
  LS_ASSIGN_OR_RETURN(bool split, json_bool(j, "split", true, kWhere));
  return std::unique_ptr<PreTokenizer>(
      std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split));
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const nlohmann::json& j, int depth) {
  if (depth > kMaxComponentDepth) return invalid_argument("pre_tokenizer: nested too deeply");
  LS_ASSIGN_OR_RETURN(std::string type, json_type(j, "pre_tokenizer"));
  if (type == "Split") {
    constexpr std::string_view kWhere = "pre_tokenizer Split";
    const nlohmann::json* pat = json_member(j, "pattern");
    if (pat == nullptr) return invalid_argument("{}: missing pattern", kWhere);
    LS_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(*pat, "pre_tokenizer Split.pattern"));
    LS_ASSIGN_OR_RETURN(std::string behavior_name, json_string(j, "behavior", kWhere));
    LS_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_split_behavior(behavior_name));
    LS_ASSIGN_OR_RETURN(bool invert, json_bool(j, "invert", false, kWhere));
    return std::unique_ptr<PreTokenizer>(
        std::make_unique<SplitPreTokenizer>(std::move(pattern), behavior, invert));
  }
  if (type == "ByteLevel") {
    constexpr std::string_view kWhere = "pre_tokenizer ByteLevel";
    LS_ASSIGN_OR_RETURN(bool add_prefix_space, json_bool(j, "add_prefix_space", true, kWhere));
    LS_ASSIGN_OR_RETURN(bool use_regex, json_bool(j, "use_regex", true, kWhere));
    return std::unique_ptr<PreTokenizer>(
        std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, use_regex));
  }
  if (type == "Metaspace") return parse_metaspace(j);
  if (type == "Digits") {
    LS_ASSIGN_OR_RETURN(bool individual,
                        json_bool(j, "individual_digits", false, "pre_tokenizer Digits"));
    return std::unique_ptr<PreTokenizer>(std::make_unique<DigitsPreTokenizer>(individual));
  }
  if (type == "Sequence") {
    const nlohmann::json* list = json_member(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return invalid_argument("pre_tokenizer Sequence: expected a pretokenizers array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& item : *list) {
      LS_ASSIGN_OR_RETURN(auto part, parse_pre_tokenizer(item, depth + 1));
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<PreTokenizer>(std::make_unique<SequencePreTokenizer>(std::move(parts)));
  }
  return unimplemented("pre_tokenizer type '{}' is not supported", type);
}

}  // namespace ls::tok
