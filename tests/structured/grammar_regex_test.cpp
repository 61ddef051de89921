// Regex and choice grammars against std::regex (ECMAScript, full match) over every string of a
// small alphabet, and the UTF-8 range split against direct encoding of every code point.

#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "structured/matcher.h"
#include "structured/regex_grammar.h"
#include "structured/utf8_ranges.h"

namespace ls::grammar {
namespace {

bool grammar_accepts(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  return m.accept(s) && m.can_end();
}

void all_strings(const std::string& alphabet, size_t max_len, std::vector<std::string>& out) {
  out.push_back("");
  size_t begin = 0;
  for (size_t len = 1; len <= max_len; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
}

TEST(RegexGrammar, MatchesStdRegexOnEveryShortString) {
  const std::vector<std::string> patterns = {
      "a",          "ab|c",      "a*",        "(ab)+",     "a?b{2}",   "[a-c]{1,3}",
      "[^a]b*",     "(a|b)*c",   "a{2,}",     "(?:a|)b",   "\\d+",     "[ab]*a[ab]",
      ".c",         "(a*)*b",    "^a|b$",     "x{0,2}y?",  "[\\-a]+",  "(a|ab)(c|bcd)",
      "\\.",        "[0-9]{2}-[a-c]"};
  std::vector<std::string> strings;
  all_strings("abc1-.xy\n", 4, strings);
  for (const std::string& p : patterns) {
    Result<Grammar> g = regex_grammar(p);
    ASSERT_TRUE(g.ok()) << p << ": " << g.status().message();
    auto shared = std::make_shared<const Grammar>(std::move(g).value());
    const std::regex re(p, std::regex::ECMAScript);
    for (const std::string& s : strings) {
      EXPECT_EQ(grammar_accepts(shared, s), std::regex_match(s, re)) << p << " on '" << s << "'";
    }
  }
}

TEST(RegexGrammar, PrefixesStayAliveExactlyWhenSomeCompletionExists) {
  // A state is dead iff no string in the (finite) search space extends the prefix to a match.
  Result<Grammar> g = regex_grammar("(ab|ba){1,2}c?");
  ASSERT_TRUE(g.ok());
  auto shared = std::make_shared<const Grammar>(std::move(g).value());
  std::vector<std::string> strings;
  all_strings("abc", 5, strings);
  const std::regex re("(ab|ba){1,2}c?");
  for (const std::string& prefix : strings) {
    if (prefix.size() > 3) continue;
    bool extendable = false;
    for (const std::string& s : strings) {
      if (s.compare(0, prefix.size(), prefix) == 0 && std::regex_match(s, re)) extendable = true;
    }
    Matcher m(shared);
    EXPECT_EQ(m.accept(prefix), extendable) << prefix;
  }
}

TEST(RegexGrammar, UnicodeClassesAndDot) {
  Result<Grammar> g = regex_grammar("[é-ê]x.");
  ASSERT_TRUE(g.ok());
  auto shared = std::make_shared<const Grammar>(std::move(g).value());
  EXPECT_TRUE(grammar_accepts(shared, "éx€"));
  EXPECT_TRUE(grammar_accepts(shared, "êxa"));
  EXPECT_FALSE(grammar_accepts(shared, "ëxa"));
  EXPECT_FALSE(grammar_accepts(shared, "éx\n"));
  EXPECT_FALSE(grammar_accepts(shared, "éx\xC3"));  // an incomplete character
}

TEST(RegexGrammar, RefusesWhatItCannotDo) {
  for (const char* p : {"(a", "a)", "[a", "a{2,1}", "\\1", "(?=a)", "a**", "\\b", "a^b"}) {
    EXPECT_FALSE(regex_grammar(p).ok()) << p;
  }
}

TEST(ChoiceGrammar, ExactlyTheChoices) {
  Result<Grammar> g = choice_grammar({"yes", "no", "yes!"});
  ASSERT_TRUE(g.ok());
  auto shared = std::make_shared<const Grammar>(std::move(g).value());
  std::vector<std::string> strings;
  all_strings("yesno!", 4, strings);
  for (const std::string& s : strings) {
    EXPECT_EQ(grammar_accepts(shared, s), s == "yes" || s == "no" || s == "yes!") << s;
  }
}

std::string encode_cp(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

TEST(Utf8Ranges, EveryCodePointMatchedByExactlyOneSequenceIffInRange) {
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0, 0x10FFFF}, {0x41, 0x7FF}, {0x7F, 0x80}, {0x3A0, 0x1F600}, {0xD700, 0xE100}, {0xFFFF, 0x10000}};
  for (const auto& [lo, hi] : ranges) {
    std::vector<Utf8Sequence> seqs;
    utf8_sequences(lo, hi, seqs);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const std::string e = encode_cp(cp);
      int matches = 0;
      for (const Utf8Sequence& s : seqs) {
        if (s.size() != e.size()) continue;
        bool ok = true;
        for (size_t k = 0; k < s.size(); ++k) {
          const auto b = static_cast<uint8_t>(e[k]);
          ok = ok && b >= s[k].first && b <= s[k].second;
        }
        matches += ok;
      }
      ASSERT_EQ(matches, (cp >= lo && cp <= hi) ? 1 : 0) << std::hex << cp << " in " << lo << "-" << hi;
    }
  }
}

}  // namespace
}  // namespace ls::grammar
