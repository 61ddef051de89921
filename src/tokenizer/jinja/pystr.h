#pragma once
// Python `str` semantics over UTF-8 bytes, as chat templates observe them through jinja2: lengths,
// indices and slices count code points; whitespace is Python's str.isspace() set; case mapping is
// Unicode's (utf8proc) plus the unconditional special cases (ß -> SS, ligatures); number
// formatting is Python's repr(). Invalid UTF-8 never fails: a bad byte decodes as U+FFFD.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ls::jinja::py {

// Decodes to code points; one U+FFFD per invalid byte.
std::vector<char32_t> decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(const std::vector<char32_t>& cps);
// Number of code points (len(s)).
int64_t length(std::string_view s);

// str.isspace() for one code point (also what `\s` matches in Python's re).
bool is_space(char32_t cp);

// str.strip/lstrip/rstrip: with chars unset, Python whitespace; else any code point of *chars.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split(sep, maxsplit) / str.rsplit: sep unset splits on whitespace runs and drops empties.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);
// str.splitlines() (no keepends): \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029.
std::vector<std::string> splitlines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all (an empty `old` inserts between code
// points).
std::string replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                    int64_t count);
// Number of non-overlapping occurrences (str.count).
int64_t count(std::string_view s, std::string_view sub);
// str.find: code-point index, or -1.
int64_t find(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string center(std::string_view s, int64_t width);

bool is_lower(std::string_view s);  // str.islower(): has a cased char and no uppercase ones
bool is_upper(std::string_view s);
bool is_digit(std::string_view s);
bool is_alpha(std::string_view s);
bool is_alnum(std::string_view s);
bool is_space_str(std::string_view s);
bool is_word_char(char32_t cp);  // what `\w` matches

// markupsafe.escape: & < > ' " as HTML entities (&amp; &lt; &gt; &#39; &#34;).
std::string html_escape(std::string_view s);

// repr() of a str: single quotes unless the text has ' and no ", escapes for non-printables.
std::string repr_string(std::string_view s);
// repr() of a float: shortest round-trip digits, exponent form when exp < -4 or >= 16.
std::string repr_float(double value);
// Python's round(value, ndigits) for floats: correctly rounded, half to even on the binary value.
double round_half_even(double value, int64_t ndigits);

// int(s, base) / float(s) as Python parses them (surrounding whitespace, '_' separators, base
// prefixes for base 0/16/8/2); nullopt when Python raises ValueError.
std::optional<int64_t> parse_int(std::string_view s, int base);
std::optional<double> parse_float(std::string_view s);

}  // namespace ls::jinja::py
