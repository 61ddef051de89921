#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

// Allowed range of the second byte after a given lead byte (Unicode Table 3-7); later
// continuation bytes are always 0x80..0xBF.
struct LeadInfo {
  uint32_t len;  // 0: not a lead byte
  unsigned char lo;
  unsigned char hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Utf8Step decode_utf8(std::string_view s, size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {b0, 1, true, false};
  const LeadInfo info = lead_info(b0);
  if (info.len == 0) return {kReplacementChar, 1, false, false};
  char32_t cp = b0 & (info.len == 2 ? 0x1F : info.len == 3 ? 0x0F : 0x07);
  for (uint32_t i = 1; i < info.len; ++i) {
    if (pos + i >= s.size()) return {kReplacementChar, i, false, true};
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? info.lo : 0x80;
    const unsigned char hi = i == 1 ? info.hi : 0xBF;
    if (b < lo || b > hi) return {kReplacementChar, i, false, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, info.len, true, false};
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w = 0;
      for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(static_cast<unsigned char>(s[i + k]));
      if (w & 0x80) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const Utf8Step st = decode_utf8(s, i);
    if (!st.valid) return false;
    i += st.len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step st = decode_utf8(s, i);
    if (st.valid) {
      out.append(s.substr(i, st.len));
    } else {
      out.append(kReplacementUtf8);
    }
    i += st.len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace ls::tok
