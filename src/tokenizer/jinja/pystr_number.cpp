// Python's number formatting and parsing for templates: float repr, round(), int() and float()
// of strings (pystr.h).

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tokenizer/jinja/pystr.h"

namespace ls::jinja::py {
namespace {

// Removes '_' digit separators the way Python's number parsers accept them (only between
// digits); false when one is misplaced.
template <typename IsDigit>
bool strip_underscores(std::string_view in, std::string& out, IsDigit is_digit_char) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '_') {
      if (i == 0 || i + 1 >= in.size() || !is_digit_char(in[i - 1]) || !is_digit_char(in[i + 1])) {
        return false;
      }
      continue;
    }
    out += in[i];
  }
  return true;
}

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

}  // namespace

std::string repr_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exp = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exp);
  const int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    const int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (point >= n) {
      out += digits;
      out.append(static_cast<size_t>(point - n), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point));
      out += '.';
      out += digits.substr(static_cast<size_t>(point));
    }
    return out;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += digits.substr(1);
  }
  std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out += buf;
  return out;
}

double round_half_even(double value, int64_t ndigits) {
  if (!std::isfinite(value) || value == 0.0) return value;
  if (ndigits > 340) return value;
  if (ndigits >= 0) {
    // glibc's printf rounds the exact binary value to nearest, ties to even: what CPython's
    // dtoa-based round() does.
    std::vector<char> buf(400 + static_cast<size_t>(ndigits));
    const int len = std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), value);
    double rounded = value;
    const char* begin = buf.data() + (buf[0] == '-' ? 1 : 0);
    std::from_chars(begin, buf.data() + len, rounded);
    return buf[0] == '-' ? -rounded : rounded;
  }
  if (ndigits < -330) return std::copysign(0.0, value);
  const double scale = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(value / scale) * scale;
}

std::optional<int64_t> parse_int(std::string_view text, int base) {
  const std::string trimmed = strip(text, std::nullopt, true, true);
  std::string_view s = trimmed;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  auto has_prefix = [&](char lower_c) {
    return s.size() >= 2 && s[0] == '0' && (s[1] == lower_c || s[1] == lower_c - 32);
  };
  bool prefixed = false;
  if (base == 0) {
    if (has_prefix('x')) {
      base = 16, prefixed = true;
    } else if (has_prefix('o')) {
      base = 8, prefixed = true;
    } else if (has_prefix('b')) {
      base = 2, prefixed = true;
    } else {
      base = 10;
      // Base 0 forbids leading zeros on non-zero decimals ("010").
      if (s.size() > 1 && s[0] == '0') {
        for (char c : s) {
          if (c != '0' && c != '_') return std::nullopt;
        }
      }
    }
  } else if ((base == 16 && has_prefix('x')) || (base == 8 && has_prefix('o')) ||
             (base == 2 && has_prefix('b'))) {
    prefixed = true;
  }
  if (base < 2 || base > 36) return std::nullopt;
  if (prefixed) {
    s.remove_prefix(2);
    if (!s.empty() && s[0] == '_') s.remove_prefix(1);  // "0x_1f" is valid
  }
  std::string digits;
  if (s.empty() ||
      !strip_underscores(s, digits, [base](char c) { return digit_value(c) < base; })) {
    return std::nullopt;
  }
  int64_t value = 0;
  for (char c : digits) {
    const int d = digit_value(c);
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, static_cast<int64_t>(base), &value) ||
        __builtin_add_overflow(value, static_cast<int64_t>(d), &value)) {
      return std::nullopt;
    }
  }
  return negative ? -value : value;
}

std::optional<double> parse_float(std::string_view text) {
  const std::string trimmed = strip(text, std::nullopt, true, true);
  std::string_view s = trimmed;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  std::string lowered;
  for (char c : s) lowered += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  if (lowered == "inf" || lowered == "infinity") {
    return negative ? -HUGE_VAL : HUGE_VAL;
  }
  if (lowered == "nan") return std::nan("");
  std::string cleaned;
  if (!strip_underscores(s, cleaned, [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  // Grammar: digits [. digits?] | . digits, then an optional exponent.
  size_t i = 0;
  size_t num_digits = 0;
  while (i < cleaned.size() && cleaned[i] >= '0' && cleaned[i] <= '9') ++i, ++num_digits;
  if (i < cleaned.size() && cleaned[i] == '.') {
    ++i;
    while (i < cleaned.size() && cleaned[i] >= '0' && cleaned[i] <= '9') ++i, ++num_digits;
  }
  if (num_digits == 0) return std::nullopt;
  if (i < cleaned.size() && (cleaned[i] == 'e' || cleaned[i] == 'E')) {
    ++i;
    if (i < cleaned.size() && (cleaned[i] == '+' || cleaned[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < cleaned.size() && cleaned[i] >= '0' && cleaned[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return std::nullopt;
  }
  if (i != cleaned.size()) return std::nullopt;
  double value = 0.0;
  const auto res = std::from_chars(cleaned.data(), cleaned.data() + cleaned.size(), value);
  if (res.ec == std::errc::result_out_of_range) {
    // Python: overflow gives inf, underflow gives 0, as strtod does (the text is plain ASCII
    // digits, so the locale's decimal point is the only thing strtod could disagree on).
    value = std::strtod(cleaned.c_str(), nullptr);
  }
  return negative ? -value : value;
}

}  // namespace ls::jinja::py
