#include "structured/utf8_ranges.h"

#include <algorithm>
#include <string>

namespace ls::grammar {

namespace {

std::string encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// lo and hi encode to the same length n.
void same_length(uint32_t lo, uint32_t hi, int n, std::vector<Utf8Sequence>& out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        same_length(lo, lo | m, n, out);
        same_length((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        same_length(lo, (hi & ~m) - 1, n, out);
        same_length(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  const std::string a = encode(lo);
  const std::string b = encode(hi);
  Utf8Sequence seq;
  for (size_t k = 0; k < a.size(); ++k) {
    seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  }
  out.push_back(std::move(seq));
}

}  // namespace

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  if (lo > hi) return;
  // Surrogates are not scalar values.
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  const uint32_t limits[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  uint32_t start = lo;
  for (int n = 1; n <= 4 && start <= hi; ++n) {
    const uint32_t end = std::min(hi, limits[n - 1]);
    if (start <= end) {
      same_length(start, end, n, out);
      start = end + 1;
    }
  }
}

}  // namespace ls::grammar
