// UTF-8 sanitizing against an independent oracle. The rule (Python's errors="replace", Rust's
// from_utf8_lossy): each maximal prefix of a well-formed sequence that cannot be completed
// becomes one U+FFFD. The oracle decides "prefix of some well-formed sequence" from the range
// of code points the prefix can still reach, not from the table of second-byte ranges that the
// implementation uses.

#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <random>

namespace ls::tok {
namespace {

// Number of bytes of the sequence a lead byte announces (0: cannot start one).
int announced_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC0 && b < 0xE0) return 2;
  if (b >= 0xE0 && b < 0xF0) return 3;
  if (b >= 0xF0 && b < 0xF8) return 4;
  return 0;
}

bool acceptable(uint32_t cp, int len) {
  const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  return cp >= min_cp[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

// Whether bytes p (a lead byte and continuation bytes) can be completed to a well-formed
// sequence: some code point between the all-0x80 and the all-0xBF completion is acceptable.
bool completable(const std::string& p) {
  const int len = announced_len(static_cast<unsigned char>(p[0]));
  if (len == 0 || static_cast<int>(p.size()) > len) return false;
  auto value = [&](unsigned char fill) {
    uint32_t cp = static_cast<unsigned char>(p[0]) & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
      const unsigned char b = k < static_cast<int>(p.size()) ? p[k] : fill;
      if ((b & 0xC0) != 0x80) return uint32_t{0xFFFFFFFF};
      cp = (cp << 6) | (b & 0x3F);
    }
    return cp;
  };
  const uint32_t lo = value(0x80);
  const uint32_t hi = value(0xBF);
  if (lo == 0xFFFFFFFF) return false;
  // Acceptable code points form [min, D7FF] and [E000, 10FFFF]; test the reachable interval's
  // ends and the two inner edges.
  for (uint32_t cp : {lo, hi, uint32_t{0xD7FF}, uint32_t{0xE000}}) {
    if (cp >= lo && cp <= hi && acceptable(cp, len)) return true;
  }
  return false;
}

std::string oracle(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t m = 1;  // longest completable prefix at i
    while (i + m < s.size() && m < 4 && completable(s.substr(i, m + 1))) ++m;
    const std::string head = s.substr(i, m);
    const int len = announced_len(static_cast<unsigned char>(head[0]));
    if (len == static_cast<int>(m) && completable(head)) {
      out += head;
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += m;
  }
  return out;
}

TEST(Utf8, SanitizeMatchesOracleOnRandomBytes) {
  std::mt19937 rng(5);
  // Bytes drawn mostly from the interesting places: ASCII, continuation, every lead range.
  const std::vector<std::pair<int, int>> ranges = {
      {0x00, 0x7F}, {0x80, 0xBF}, {0xC0, 0xC1}, {0xC2, 0xDF}, {0xE0, 0xEF},
      {0xF0, 0xF4}, {0xF5, 0xFF}, {0x80, 0x8F}, {0x90, 0x9F}, {0xA0, 0xBF}};
  for (int n = 0; n < 20000; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) {
      const auto& r = ranges[rng() % ranges.size()];
      s.push_back(static_cast<char>(r.first + static_cast<int>(rng() % (r.second - r.first + 1))));
    }
    const std::string want = oracle(s);
    ASSERT_EQ(sanitize_utf8(s), want) << testing::PrintToString(s);
    ASSERT_EQ(is_valid_utf8(s), want == s) << testing::PrintToString(s);
  }
}

TEST(Utf8, KnownCases) {
  // Expected values from Python 3.11: bytes.decode("utf-8", errors="replace").
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x99"), "\xEF\xBF\xBD");  // truncated: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("a\xC3"), "a\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_TRUE(is_valid_utf8(std::string("long ascii run with a \0 NUL in it", 32)));
}

}  // namespace
}  // namespace ls::tok
