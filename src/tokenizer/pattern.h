#pragma once
// Patterns and split behaviours shared by the Split pre-tokenizer, the Metaspace pre-tokenizer
// and the Replace normalizer/decoder, with Hugging Face's exact semantics.

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace ls::tok {

// One piece of a text cut by a pattern: the pieces cover the text in order; is_match marks the
// pattern's matches (possibly empty ones, which a regex may produce).
struct MatchPiece {
  size_t start;
  size_t end;
  bool is_match;
};

// A literal string (tokenizer.json {"String": ...}) or a regex ({"Regex": ...}).
class Pattern {
 public:
  static Pattern literal(std::string text);
  static Result<Pattern> regex(std::string_view onig_pattern);
  // {"String": s} or {"Regex": r}; `where` names the field for error messages.
  static Result<Pattern> from_json(const nlohmann::json& j, std::string_view where);

  // HF's Pattern::find_matches: the pieces covering text; an empty text gives one empty
  // non-match. HF compiles a literal into an escaped regex, so an empty literal matches the
  // empty string at every character boundary.
  void find_matches(std::string_view text, std::vector<MatchPiece>& out) const;

  // Replaces every match with `content` (HF's NormalizedString::replace and the Replace decoder).
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" (HF also accepts
// the snake_case spellings).
Result<SplitBehavior> parse_split_behavior(std::string_view name);

// HF's NormalizedString::split: turns the pieces of find_matches (after an optional invert) into
// the spans that survive `behavior`, in order. Empty spans are kept; callers drop them.
void apply_split_behavior(std::vector<MatchPiece>& pieces, SplitBehavior behavior, bool invert,
                          std::vector<Span>& out);

}  // namespace ls::tok
