#pragma once
// UTF-8 helpers shared by the tokenizer pipeline.
//
// Invalid input is defined the way Python's bytes.decode("utf-8", errors="replace") and Rust's
// String::from_utf8_lossy define it (the Unicode "maximal subpart" practice): every maximal
// prefix of a would-be sequence that cannot be completed becomes one U+FFFD, and decoding resumes
// at the first byte that broke it. Encode and decode both use this, so a tokenizer never sees
// invalid UTF-8 and never emits it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ls::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// What the byte sequence starting at s[pos] is.
struct Utf8Step {
  char32_t cp;     // the code point, or kReplacementChar when invalid
  uint32_t len;    // bytes consumed (>= 1)
  bool valid;      // a complete, well-formed sequence
  bool truncated;  // invalid only because the input ended inside a well-formed prefix
};
Utf8Step decode_utf8(std::string_view s, size_t pos);

// Length in bytes of the (valid) UTF-8 sequence whose lead byte is `lead`; 1 for ASCII and for
// bytes that are not lead bytes. Only meaningful on text already known to be valid.
inline uint32_t utf8_len_of_lead(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

bool is_valid_utf8(std::string_view s);

// Returns s with every invalid sequence replaced by U+FFFD (see the header comment).
std::string sanitize_utf8(std::string_view s);

// Appends the UTF-8 encoding of cp (cp must be a Unicode scalar value).
void append_utf8(std::string& out, char32_t cp);

// Number of code points in valid UTF-8 text.
size_t count_code_points(std::string_view s);

}  // namespace ls::tok
