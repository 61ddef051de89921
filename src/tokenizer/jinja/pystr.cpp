#include "tokenizer/jinja/pystr.h"

#include <utf8proc.h>

#include <cstdio>

namespace ls::jinja::py {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Decodes one code point at s[pos]; *num_bytes gets its length (1 for an invalid byte).
char32_t decode_one(std::string_view s, size_t pos, size_t* num_bytes) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  *num_bytes = 1;
  if (b0 < 0x80) return b0;
  int need = 0;
  char32_t cp = 0;
  char32_t min_cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    need = 1, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3, cp = b0 & 0x07, min_cp = 0x10000;
  } else {
    return kReplacement;
  }
  for (int i = 1; i <= need; ++i) {
    if (pos + i >= s.size()) return kReplacement;
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return kReplacement;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kReplacement;
  *num_bytes = static_cast<size_t>(need) + 1;
  return cp;
}

// Code points with the byte offset each starts at; offsets has one extra entry (the size), so
// a code-point range [i, j) is the byte range [offsets[i], offsets[j]) of the original text.
struct Decoded {
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
};

Decoded decode_with_offsets(std::string_view s) {
  Decoded d;
  d.cps.reserve(s.size());
  d.offsets.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = 0;
    d.offsets.push_back(pos);
    d.cps.push_back(decode_one(s, pos, &n));
    pos += n;
  }
  d.offsets.push_back(s.size());
  return d;
}

utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
bool is_upper_cp(char32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_LU;
}
bool is_lower_cp(char32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_LL;
}
bool is_title_cp(char32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_LT;
}
bool is_cased(char32_t cp) {
  return is_upper_cp(cp) || is_lower_cp(cp) || is_title_cp(cp);
}
bool is_alpha_cp(char32_t cp) {
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_numeric_cp(char32_t cp) {
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

// Unicode SpecialCasing.txt's unconditional multi-code-point mappings that Python applies and
// the simple (one-to-one) tables of utf8proc do not.
struct SpecialCase {
  char32_t cp;
  const char* upper;
  const char* title;
};
constexpr SpecialCase kSpecialCases[] = {
    {0x00DF, "SS", "Ss"},           {0x0149, "\u02BCN", "\u02BCN"},
    {0x01F0, "J\u030C", "J\u030C"}, {0x0587, "\u0535\u0552", "\u0535\u0582"},
    {0xFB00, "FF", "Ff"},           {0xFB01, "FI", "Fi"},
    {0xFB02, "FL", "Fl"},           {0xFB03, "FFI", "Ffi"},
    {0xFB04, "FFL", "Ffl"},         {0xFB05, "ST", "St"},
    {0xFB06, "ST", "St"},
};

const SpecialCase* special_case(char32_t cp) {
  for (const auto& sc : kSpecialCases) {
    if (sc.cp == cp) return &sc;
  }
  return nullptr;
}

void append_upper(std::string& out, char32_t cp) {
  if (const auto* sc = special_case(cp)) {
    out += sc->upper;
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))));
}
void append_title(std::string& out, char32_t cp) {
  if (const auto* sc = special_case(cp)) {
    out += sc->title;
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))));
}
void append_lower(std::string& out, char32_t cp) {
  if (cp == 0x0130) {  // İ lowercases to i + combining dot above
    out += "i\u0307";
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool contains_cp(const std::vector<char32_t>& set, char32_t cp) {
  for (char32_t c : set) {
    if (c == cp) return true;
  }
  return false;
}

template <typename Pred>
bool all_nonempty(std::string_view s, Pred pred) {
  const auto cps = decode_utf8(s);
  if (cps.empty()) return false;
  for (char32_t cp : cps) {
    if (!pred(cp)) return false;
  }
  return true;
}

}  // namespace

std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = 0;
    out.push_back(decode_one(s, pos, &n));
    pos += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacement;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

int64_t length(std::string_view s) {
  int64_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t step = 0;
    decode_one(s, pos, &step);
    pos += step;
    ++n;
  }
  return n;
}

bool is_space(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  // Works from both ends without decoding the middle: contents can be long and strip() runs on
  // every message of some templates.
  std::vector<char32_t> set;
  if (chars) set = decode_utf8(*chars);
  auto strippable = [&](char32_t cp) { return chars ? contains_cp(set, cp) : is_space(cp); };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t n = 0;
      const char32_t cp = decode_one(s, begin, &n);
      if (!strippable(cp)) break;
      begin += n;
    }
  }
  if (right) {
    while (end > begin) {
      // The last code point: step back over continuation bytes to a lead byte whose sequence
      // ends exactly at `end`; anything else is one invalid byte (U+FFFD).
      size_t start = end - 1;
      while (start > begin && end - start < 4 &&
             (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
        --start;
      }
      size_t n = 0;
      char32_t cp = decode_one(s, start, &n);
      if (start + n != end) {
        start = end - 1;
        cp = kReplacement;
      }
      if (!strippable(cp)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    const std::string_view sp = *sep;
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t hit = s.find(sp, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sp.size();
      }
      parts.emplace_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sp.size()) break;
      const size_t hit = s.rfind(sp, end - sp.size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sp.size(), end - hit - sp.size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    return {parts.rbegin(), parts.rend()};
  }
  // Whitespace runs; leading and trailing whitespace never makes empty parts.
  const Decoded d = decode_with_offsets(s);
  const int64_t n = static_cast<int64_t>(d.cps.size());
  auto byte_range = [&](int64_t a, int64_t b) {
    return std::string(s.substr(d.offsets[a], d.offsets[b] - d.offsets[a]));
  };
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && is_space(d.cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        int64_t end = n;
        while (end > i && is_space(d.cps[end - 1])) --end;
        parts.push_back(byte_range(i, end));
        break;
      }
      int64_t j = i;
      while (j < n && !is_space(d.cps[j])) ++j;
      parts.push_back(byte_range(i, j));
      i = j;
    }
    return parts;
  }
  int64_t j = n;
  while (true) {
    while (j > 0 && is_space(d.cps[j - 1])) --j;
    if (j <= 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      int64_t begin = 0;
      while (begin < j && is_space(d.cps[begin])) ++begin;
      parts.push_back(byte_range(begin, j));
      break;
    }
    int64_t i = j;
    while (i > 0 && !is_space(d.cps[i - 1])) --i;
    parts.push_back(byte_range(i, j));
    j = i;
  }
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> lines;
  const Decoded d = decode_with_offsets(s);
  const size_t n = d.cps.size();
  size_t start = 0;
  size_t i = 0;
  while (i < n) {
    const char32_t cp = d.cps[i];
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
                          (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    lines.emplace_back(s.substr(d.offsets[start], d.offsets[i] - d.offsets[start]));
    i += (cp == '\r' && i + 1 < n && d.cps[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < n) lines.emplace_back(s.substr(d.offsets[start]));
  return lines;
}

std::string replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                    int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    const Decoded d = decode_with_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i <= d.cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_sub;
        ++done;
      }
      if (i < d.cps.size()) out += s.substr(d.offsets[i], d.offsets[i + 1] - d.offsets[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old_sub, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += new_sub;
    pos = hit + old_sub.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return length(s) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

int64_t find(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return length(s.substr(0, hit));
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : decode_utf8(s)) append_upper(out, cp);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : decode_utf8(s)) append_lower(out, cp);
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_is_cased = false;
  for (char32_t cp : decode_utf8(s)) {
    if (previous_is_cased) {
      append_lower(out, cp);
    } else {
      append_title(out, cp);
    }
    previous_is_cased = is_cased(cp);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (char32_t cp : decode_utf8(s)) {
    if (first) {
      append_title(out, cp);
      first = false;
    } else {
      append_lower(out, cp);
    }
  }
  return out;
}

std::string center(std::string_view s, int64_t width) {
  const int64_t len = length(s);
  const int64_t marg = width - len;
  if (marg <= 0) return std::string(s);
  const int64_t left = marg / 2 + (marg & width & 1);
  std::string out(static_cast<size_t>(left), ' ');
  out += s;
  out.append(static_cast<size_t>(marg - left), ' ');
  return out;
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (char32_t cp : decode_utf8(s)) {
    if (is_upper_cp(cp) || is_title_cp(cp)) return false;
    if (is_lower_cp(cp)) cased = true;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (char32_t cp : decode_utf8(s)) {
    if (is_lower_cp(cp) || is_title_cp(cp)) return false;
    if (is_upper_cp(cp)) cased = true;
  }
  return cased;
}

bool is_digit(std::string_view s) {
  return all_nonempty(s, [](char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; });
}
bool is_alpha(std::string_view s) {
  return all_nonempty(s, is_alpha_cp);
}
bool is_alnum(std::string_view s) {
  return all_nonempty(s, [](char32_t cp) { return is_alpha_cp(cp) || is_numeric_cp(cp); });
}
bool is_space_str(std::string_view s) {
  return all_nonempty(s, is_space);
}
bool is_word_char(char32_t cp) {
  return cp == '_' || is_alpha_cp(cp) || is_numeric_cp(cp);
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string repr_string(std::string_view s) {
  const auto cps = decode_utf8(s);
  bool has_single = false;
  bool has_double = false;
  for (char32_t cp : cps) {
    has_single |= cp == '\'';
    has_double |= cp == '"';
  }
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t cp : cps) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (is_printable(cp)) {
      append_utf8(out, cp);
    } else if (cp < 0x100) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    }
  }
  out += quote;
  return out;
}

}  // namespace ls::jinja::py
