// StopChecker tests: hand-written cases for each rule, and a randomized comparison against a
// naive oracle that works on the whole concatenated text (find every occurrence, pick the one that
// ends first), so the streaming logic is checked against the definition, not against itself.

#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ls {
namespace {

struct Token {
  int32_t id;
  std::string text;
};

struct Fed {
  std::vector<std::string> emits;  // one per on_token call
  std::string text;                // all emits concatenated
  StopResult last;
  int32_t num_calls = 0;
};

// Feeds tokens until the checker finishes (or the tokens run out).
Fed feed(StopChecker& checker, const std::vector<Token>& tokens) {
  Fed r;
  for (const Token& t : tokens) {
    r.last = checker.on_token(t.id, t.text);
    ++r.num_calls;
    r.emits.push_back(r.last.emit);
    r.text += r.last.emit;
    if (r.last.finished) break;
  }
  return r;
}

// Text tokens get ids >= 100 so they never collide with eos / stop ids in these tests.
std::vector<Token> text_tokens(const std::vector<std::string>& pieces) {
  std::vector<Token> out;
  for (const std::string& p : pieces) out.push_back({100 + static_cast<int32_t>(out.size()), p});
  return out;
}

StopParams stops(std::vector<std::string> strings, int32_t max_tokens = 100) {
  StopParams p;
  p.stop = std::move(strings);
  p.max_tokens = max_tokens;
  return p;
}

// A strict UTF-8 validity check, independent of the code under test.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

TEST(StopChecker, NoStopsEmitsImmediatelyAndEndsAtMaxTokens) {
  StopParams p;
  p.max_tokens = 3;
  StopChecker checker(p);
  const Fed r = feed(checker, text_tokens({"Hel", "lo", " there", " unused"}));
  EXPECT_EQ(r.emits, (std::vector<std::string>{"Hel", "lo", " there"}));
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.last.reason, FinishReason::kLength);
  EXPECT_EQ(r.last.stop_reason, "");
  EXPECT_EQ(checker.num_output_tokens(), 3);
}

TEST(StopChecker, StopStringSplitAcrossManyTokensIsNeverShown) {
  StopChecker checker(stops({"STOP"}));
  const Fed r = feed(checker, text_tokens({"Hello ", "S", "T", "O", "P", " world"}));
  EXPECT_EQ(r.emits, (std::vector<std::string>{"Hello ", "", "", "", ""}));
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.last.reason, FinishReason::kStop);
  EXPECT_EQ(r.last.stop_reason, "STOP");
  EXPECT_EQ(r.last.stop_token_id, -1);
}

TEST(StopChecker, HeldTextIsReleasedWhenItStopsLookingLikeAStop) {
  StopChecker checker(stops({"STOP"}));
  const Fed r = feed(checker, text_tokens({"ab", "ST", "x", "S"}));
  EXPECT_EQ(r.emits, (std::vector<std::string>{"ab", "", "STx", ""}));
  EXPECT_FALSE(r.last.finished);
  EXPECT_EQ(checker.num_held_bytes(), 1u);
  EXPECT_EQ(checker.flush(), "S");
  EXPECT_TRUE(checker.finished());
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopChecker, OnlyPossibleStopPrefixesAreHeld) {
  // vLLM would hold len("\n\nUser:") - 1 characters all the time; here only a real prefix is held.
  StopChecker checker(stops({"\n\nUser:"}));
  const Fed r = feed(checker, text_tokens({"Hi", " there", "\n", "\n", "Us", "ed"}));
  EXPECT_EQ(r.emits, (std::vector<std::string>{"Hi", " there", "", "", "", "\n\nUsed"}));
}

TEST(StopChecker, SelfOverlappingStopString) {
  StopChecker checker(stops({"aab"}));
  const Fed r = feed(checker, text_tokens({"a", "a", "a", "b"}));
  EXPECT_EQ(r.emits, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(r.last.reason, FinishReason::kStop);
}

TEST(StopChecker, OverlappingStopStringsTheOneEndingFirstWins) {
  {
    StopChecker checker(stops({"abcd", "bc"}));
    const Fed r = feed(checker, text_tokens({"a", "b", "c", "d"}));
    EXPECT_EQ(r.text, "a");
    EXPECT_EQ(r.last.stop_reason, "bc");
  }
  {
    // Both in one token: "abc" ends before "bcx" does, whatever the list order.
    StopChecker checker(stops({"bcx", "abc"}));
    const Fed r = feed(checker, text_tokens({"zabcx"}));
    EXPECT_EQ(r.text, "z");
    EXPECT_EQ(r.last.stop_reason, "abc");
  }
  {
    // Same end: the one that starts first (cuts more).
    StopChecker checker(stops({"cd", "abcd"}));
    const Fed r = feed(checker, text_tokens({"xabcdy"}));
    EXPECT_EQ(r.text, "x");
    EXPECT_EQ(r.last.stop_reason, "abcd");
  }
}

TEST(StopChecker, StopOnTheVeryFirstToken) {
  {
    StopChecker checker(stops({"STOP"}));
    const Fed r = feed(checker, text_tokens({"STOP"}));
    EXPECT_EQ(r.num_calls, 1);
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
  }
  {
    StopChecker checker(stops({"STOP"}));
    const Fed r = feed(checker, text_tokens({"abSTOPcd"}));
    EXPECT_EQ(r.text, "ab");
  }
  {
    StopParams p;
    p.eos_token_ids = {2};
    StopChecker checker(p);
    const Fed r = feed(checker, {{2, "</s>"}});
    EXPECT_TRUE(r.last.finished);
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(r.last.stop_reason, "");
  }
}

TEST(StopChecker, MultiByteTextAroundStopStrings) {
  {
    StopChecker checker(stops({"世界"}));
    const Fed r = feed(checker, text_tokens({"你好世", "界!"}));
    EXPECT_EQ(r.emits, (std::vector<std::string>{"你好", ""}));
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
  }
  {
    // "é" arrives split into its two bytes; the stop string starts with it.
    StopChecker checker(stops({"é!"}));
    const Fed r = feed(checker, text_tokens({"caf", "\xC3", "\xA9", "!"}));
    EXPECT_EQ(r.emits, (std::vector<std::string>{"caf", "", "", ""}));
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
  }
  {
    // A character split across tokens is never emitted in part, even with no stop strings.
    StopChecker checker(stops({}));
    const Fed r = feed(checker, text_tokens({"a\xE2\x82", "\xAC", "b\xF0\x9F", "\x98", "\x80"}));
    EXPECT_EQ(r.emits,
              (std::vector<std::string>{"a", "\xE2\x82\xAC", "b", "", "\xF0\x9F\x98\x80"}));
    for (const std::string& e : r.emits) EXPECT_TRUE(valid_utf8(e)) << e;
  }
  {
    // Held text next to a multi-byte character: "é" is released whole, the "<" is held.
    StopChecker checker(stops({"<|end|>"}));
    const Fed r = feed(checker, text_tokens({"é<", "|e", "x"}));
    EXPECT_EQ(r.emits, (std::vector<std::string>{"é", "", "<|ex"}));
  }
}

TEST(StopChecker, IncludeStopStringInOutput) {
  {
    StopParams p = stops({"STOP"});
    p.include_stop_str_in_output = true;
    StopChecker checker(p);
    const Fed r = feed(checker, text_tokens({"a", "ST", "OPb", "c"}));
    // Nothing needs holding: the stop string is shown anyway.
    EXPECT_EQ(r.emits, (std::vector<std::string>{"a", "ST", "OP"}));
    EXPECT_EQ(r.text, "aSTOP");
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
    EXPECT_EQ(r.last.stop_reason, "STOP");
  }
  {
    StopParams p;
    p.eos_token_ids = {2};
    p.stop_token_ids = {7};
    p.include_stop_str_in_output = true;
    StopChecker eos_checker(p);
    EXPECT_EQ(feed(eos_checker, {{100, "x"}, {2, "</s>"}}).text, "x</s>");
    StopChecker id_checker(p);
    EXPECT_EQ(feed(id_checker, {{100, "x"}, {7, "<|eot|>"}}).text, "x<|eot|>");
  }
}

TEST(StopChecker, MaxTokensReleasesHeldText) {
  StopChecker checker(stops({"xyz"}, 3));
  const Fed r = feed(checker, text_tokens({"a", "b", "xy"}));
  EXPECT_EQ(r.emits, (std::vector<std::string>{"a", "b", "xy"}));
  EXPECT_EQ(r.last.reason, FinishReason::kLength);
  EXPECT_EQ(checker.num_held_bytes(), 0u);
}

TEST(StopChecker, StopStringOnTheLastAllowedTokenIsAStop) {
  StopChecker checker(stops({"xyz"}, 2));
  const Fed r = feed(checker, text_tokens({"ax", "yzb"}));
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.last.reason, FinishReason::kStop);
}

TEST(StopChecker, ContextCapsMaxTokens) {
  StopChecker checker(stops({}, 10), /*max_output_tokens=*/2);
  const Fed r = feed(checker, text_tokens({"a", "b", "c"}));
  EXPECT_EQ(r.num_calls, 2);
  EXPECT_EQ(r.last.reason, FinishReason::kLength);
}

TEST(StopChecker, EosIgnoreEosAndMinTokens) {
  StopParams p;
  p.eos_token_ids = {2, 5};
  p.max_tokens = 10;
  {
    StopChecker checker(p);
    const Fed r = feed(checker, {{100, "a"}, {5, "<eot>"}, {101, "b"}});
    EXPECT_EQ(r.num_calls, 2);
    EXPECT_EQ(r.text, "a");  // the eos token's text is not shown
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
    EXPECT_EQ(r.last.stop_reason, "");
    EXPECT_EQ(r.last.stop_token_id, -1);
  }
  {
    StopParams q = p;
    q.ignore_eos = true;
    q.max_tokens = 3;
    StopChecker checker(q);
    const Fed r = feed(checker, {{100, "a"}, {2, "</s>"}, {101, "b"}});
    EXPECT_EQ(r.text, "a</s>b");  // an ordinary token now
    EXPECT_EQ(r.last.reason, FinishReason::kLength);
  }
  {
    StopParams q = p;
    q.min_tokens = 3;
    StopChecker checker(q);
    // Tokens 1..3 are protected: eos there is an ordinary token; the 4th token's eos stops.
    const Fed r = feed(checker, {{2, ""}, {100, "a"}, {5, ""}, {2, "</s>"}});
    EXPECT_EQ(r.num_calls, 4);
    EXPECT_EQ(r.text, "a");
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
  }
}

TEST(StopChecker, MinTokensProtectsStopStringsEndingInsideThem) {
  StopParams p = stops({"ab"});
  p.min_tokens = 2;
  {
    StopChecker checker(p);
    const Fed r = feed(checker, text_tokens({"xab", "c", "d"}));
    EXPECT_FALSE(r.last.finished);
    EXPECT_EQ(r.text, "xabcd");
  }
  {
    // Starts inside the protected tokens, ends after them: counts (as in vLLM).
    StopChecker checker(p);
    const Fed r = feed(checker, text_tokens({"x", "a", "bc"}));
    EXPECT_EQ(r.text, "x");
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
  }
}

TEST(StopChecker, StopTokenIds) {
  StopParams p;
  p.eos_token_ids = {2};
  p.stop_token_ids = {7, 2};
  {
    StopChecker checker(p);
    const Fed r = feed(checker, {{100, "a"}, {7, "<|im_end|>"}});
    EXPECT_EQ(r.text, "a");
    EXPECT_EQ(r.last.reason, FinishReason::kStop);
    EXPECT_EQ(r.last.stop_reason, "7");
    EXPECT_EQ(r.last.stop_token_id, 7);
  }
  {
    StopChecker checker(p);  // both eos and a stop id: eos wins, as in vLLM
    const Fed r = feed(checker, {{2, "</s>"}});
    EXPECT_EQ(r.last.stop_reason, "");
    EXPECT_EQ(r.last.stop_token_id, -1);
  }
  {
    StopParams q = p;
    q.ignore_eos = true;  // stop ids still stop
    StopChecker checker(q);
    const Fed r = feed(checker, {{100, "a"}, {2, "</s>"}});
    EXPECT_EQ(r.last.stop_token_id, 2);
  }
}

TEST(StopChecker, StopIdsAndStopStringsWhenHeldTextIsPending) {
  StopParams p = stops({"STOP"});
  p.eos_token_ids = {2};
  StopChecker checker(p);
  const Fed r = feed(checker, {{100, "a S"}, {2, "</s>"}});
  // The held "S" can no longer become a stop string: it is shown when the sequence ends.
  EXPECT_EQ(r.emits, (std::vector<std::string>{"a ", "S"}));
}

TEST(StopChecker, CallsAfterTheEndChangeNothing) {
  StopChecker checker(stops({"x"}));
  EXPECT_TRUE(checker.on_token(100, "axb").finished);
  const StopResult again = checker.on_token(101, "more");
  EXPECT_TRUE(again.finished);
  EXPECT_EQ(again.reason, FinishReason::kStop);
  EXPECT_EQ(again.stop_reason, "x");
  EXPECT_EQ(again.emit, "");
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopChecker, MinTokensForbiddenIds) {
  StopParams p;
  p.eos_token_ids = {9, 2};
  p.stop_token_ids = {4, 2};
  EXPECT_EQ(min_tokens_forbidden_ids(p), (std::vector<int32_t>{2, 4, 9}));
  p.ignore_eos = true;
  EXPECT_EQ(min_tokens_forbidden_ids(p), (std::vector<int32_t>{2, 4}));
}

TEST(StopParamsValidate, RejectsEachBadField) {
  EXPECT_TRUE(StopParams{}.validate().ok());
  auto bad = [](auto mutate, const std::string& field) {
    StopParams p;
    mutate(p);
    const Status s = p.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  bad([](StopParams& p) { p.max_tokens = 0; }, "max_tokens");
  bad([](StopParams& p) { p.min_tokens = -1; }, "min_tokens");
  bad([](StopParams& p) { p.min_tokens = 17; }, "min_tokens");
  bad([](StopParams& p) { p.stop = {"ok", ""}; }, "stop");
  bad([](StopParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids");
  bad([](StopParams& p) { p.eos_token_ids = {-5}; }, "eos_token_ids");
  EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::kAbort), "abort");
  EXPECT_STREQ(finish_reason_name(FinishReason::kError), "error");
}

// ---- randomized comparison with an oracle over the whole text ----

// What the output must be, from the definition: the first stop occurrence by end (then start)
// that ends after the protected text, cut at its start (or end with include); else all text.
struct Expected {
  std::string text;
  bool stopped = false;
};

Expected oracle(const std::vector<std::string>& pieces, const std::vector<std::string>& stop_list,
                size_t protected_bytes, bool include) {
  std::string all;
  for (const std::string& p : pieces) all += p;
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  for (const std::string& s : stop_list) {
    for (size_t pos = 0; pos + s.size() <= all.size(); ++pos) {
      if (all.compare(pos, s.size(), s) != 0 || pos + s.size() <= protected_bytes) continue;
      const size_t end = pos + s.size();
      if (best_end == std::string::npos || end < best_end ||
          (end == best_end && pos < best_start)) {
        best_start = pos;
        best_end = end;
      }
    }
  }
  if (best_end == std::string::npos) return {all, false};
  return {all.substr(0, include ? best_end : best_start), true};
}

// The longest tail of `text` that is a proper prefix of some stop string.
size_t naive_held(const std::string& text, const std::vector<std::string>& stop_list) {
  size_t best = 0;
  for (const std::string& s : stop_list) {
    for (size_t len = 1; len < s.size() && len <= text.size(); ++len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) best = std::max(best, len);
    }
  }
  return best;
}

TEST(StopCheckerRandomized, MatchesTheWholeTextOracle) {
  std::mt19937 gen(2024);
  const std::string alphabet = "abc";
  auto random_string = [&](size_t min_len, size_t max_len) {
    std::uniform_int_distribution<size_t> len_dist(min_len, max_len);
    std::uniform_int_distribution<size_t> ch(0, alphabet.size() - 1);
    std::string s(len_dist(gen), ' ');
    for (char& c : s) c = alphabet[ch(gen)];
    return s;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stop_list;
    const int num_stops = std::uniform_int_distribution<int>(0, 3)(gen);
    for (int i = 0; i < num_stops; ++i) stop_list.push_back(random_string(1, 5));
    std::vector<std::string> pieces;
    const int num_tokens = std::uniform_int_distribution<int>(1, 12)(gen);
    for (int i = 0; i < num_tokens; ++i) pieces.push_back(random_string(0, 4));
    const bool include = trial % 3 == 0;
    const int32_t min_tokens = trial % 4 == 0 ? std::uniform_int_distribution<int>(0, 3)(gen) : 0;

    StopParams p = stops(stop_list, 1000);
    p.include_stop_str_in_output = include;
    p.min_tokens = min_tokens;
    StopChecker checker(p);
    std::string so_far;  // all text fed
    std::string shown;
    size_t protected_bytes = 0;
    bool finished = false;
    for (size_t i = 0; i < pieces.size() && !finished; ++i) {
      const StopResult r = checker.on_token(100, pieces[i]);
      so_far += pieces[i];
      if (static_cast<int32_t>(i + 1) <= min_tokens) protected_bytes = so_far.size();
      shown += r.emit;
      finished = r.finished;
      if (!finished && !include) {
        // Exactly the text that cannot be the start of a stop string has been shown.
        ASSERT_EQ(shown, so_far.substr(0, so_far.size() - naive_held(so_far, stop_list)))
            << "trial " << trial;
      }
    }
    if (!finished) shown += checker.flush();
    std::vector<std::string> fed(pieces.begin(), pieces.end());
    const Expected want = oracle(fed, stop_list, protected_bytes, include);
    ASSERT_EQ(shown, want.text) << "trial " << trial;
    ASSERT_EQ(finished, want.stopped) << "trial " << trial;
  }
}

}  // namespace
}  // namespace ls
