#pragma once
// Unicode facts the tokenizer needs beyond what PCRE2 provides: character classes used by
// added-token matching (which Hugging Face implements with Rust's `regex` crate) and the
// normalization forms (through utf8proc).

#include <string>
#include <string_view>

namespace ls::tok {

// The Unicode White_Space property (Rust's char::is_whitespace, the regex crate's \s, and
// Oniguruma's \s in UTF-8 mode all use it).
bool is_white_space(char32_t cp);

// The Rust `regex` crate's Unicode \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation
// and Join_Control. Used by the single_word rule of added tokens.
bool is_regex_word_char(char32_t cp);

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// Applies a normalization form to valid UTF-8. ASCII text is returned unchanged without a copy
// through utf8proc (every form is the identity on ASCII).
std::string normalize_unicode(std::string_view s, NormalizationForm form);

// Lowercases valid UTF-8 per code point with Unicode's full (unconditional) lowercase mapping,
// as Rust's char::to_lowercase does: U+0130 becomes "i\u0307", everything else uses the simple
// mapping.
std::string lowercase_unicode(std::string_view s);

}  // namespace ls::tok
