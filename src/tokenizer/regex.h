#pragma once
// Regular expressions from tokenizer.json, run with PCRE2.
//
// Hugging Face compiles these patterns with Oniguruma (Ruby syntax, UTF-8). PCRE2 (UTF + UCP,
// JIT when available) agrees on the constructs tokenizers use once a few escapes are rewritten
// to the Oniguruma meaning (see translate_onig_pattern): \s is White_Space, \d is Nd, \h is a hex
// digit, ^ and $ match at line boundaries, long property names (\p{Letter}) become short ones.
// Known gaps: \W and \H inside a bracket class keep PCRE2's meaning; Oniguruma's nested classes
// and && intersections are rejected at load time.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::tok {

// A match [start, end) in bytes.
struct Span {
  size_t start;
  size_t end;
};

// Rewrites an Oniguruma (Ruby syntax) pattern into an equivalent PCRE2 pattern.
Result<std::string> translate_onig_pattern(std::string_view pattern);

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern; the error names the pattern and PCRE2's reason.
  static Result<std::shared_ptr<const Regex>> compile(std::string_view onig_pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All matches in text (valid UTF-8), left to right, as Oniguruma's find_iter reports them: an
  // empty match right where the previous match ended is skipped by advancing one character.
  // Thread-safe.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace ls::tok
