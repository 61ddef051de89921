// The Jinja engine's own guarantees: syntax errors say where, malformed input never crashes,
// runaway templates stop at their limits, and strftime_now reads the clock.

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "tokenizer/chat_template.h"

namespace ls {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(std::string_view source, const ordered_json& context = nullptr,
                           const jinja::RenderLimits& limits = {}) {
  LS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source, limits));
  return t.render(ordered_json::array(), false, context);
}

// The position is read off the template text by eye: the token jinja2 stops at.
struct SyntaxCase {
  const char* source;
  int line;
  int column;
  const char* message_part;
};

// An unknown filter or test fails only when that code runs (jinja2 defers the check in
// if-bodies and inline ifs; the engine defers it everywhere, see parser.h).
TEST(JinjaSyntaxErrors, UnknownFiltersFailOnlyWhenRun) {
  auto t = ChatTemplate::parse(
      "{% if flag %}{{ x | nosuch }}{% endif %}{{ 'a' if flag else y is nosuchtest }}ok");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto skipped = t->render(ordered_json::array(), false, ordered_json{{"flag", false}});
  ASSERT_FALSE(skipped.ok());  // the inline if's else branch runs the unknown test
  EXPECT_NE(skipped.status().message().find("No test named 'nosuchtest' found."),
            std::string::npos);
  auto taken = t->render(ordered_json::array(), false, ordered_json{{"flag", true}});
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("No filter named 'nosuch' found."), std::string::npos);
  auto fine = ChatTemplate::parse("{% if false %}{{ x | nosuch }}{% endif %}ok");
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(*fine->render(ordered_json::array(), false, nullptr), "ok");
  auto looped = ChatTemplate::parse("{% for m in l %}\n{{ m | nosuch }}{% endfor %}");
  ASSERT_TRUE(looped.ok());
  EXPECT_EQ(*looped->render(ordered_json::array(), false, nullptr), "");
  auto ran = looped->render(ordered_json::array(), false, ordered_json{{"l", {1}}});
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().message(),
            "chat template error at line 2, column 8: No filter named 'nosuch' found.");
}

TEST(JinjaSyntaxErrors, SayLineAndColumn) {
  const SyntaxCase cases[] = {
      {"{% if true %}\nno end", 2, 7, "Unexpected end of template"},
      {"a\nb\n  {% frobnicate %}", 3, 6, "Encountered unknown tag 'frobnicate'"},
      {"{% for x in y %}\n{% endif %}", 2, 4,
       "Jinja was looking for the following tags: 'endfor' or 'else'"},
      {"{{ 1 + }}", 1, 8, "unexpected 'end of print statement'"},
      {"ok\n\n{{ x ", 3, 6, "unexpected end of template"},
      {"x {# never closed", 1, 3, "Missing end of comment tag"},
      {"{{ 'abc }}", 1, 4, "unexpected char"},
      {"{{ (1 + 2 }}", 1, 11, "unexpected '}', expected ')'"},
      {"\n\n{% extends 'base' %}", 3, 4, "'extends' is not supported"},
      {"{% for x in y recursive %}{% endfor %}", 1, 15, "recursive loops are not supported"},
      {"{% break %}", 1, 4, "'break' outside of a loop"},
      {"{% set 1 = 2 %}", 1, 8, "can't assign to 'const'"},
      {"{{ é }}", 1, 4, "unexpected char 'é'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.source);
    auto t = ChatTemplate::parse(c.source);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    const std::string where = fmt::format("syntax error at line {}, column {}: ", c.line, c.column);
    EXPECT_EQ(t.status().message().rfind(where, 0), 0u) << t.status().message();
    EXPECT_NE(t.status().message().find(c.message_part), std::string::npos) << t.status().message();
  }
}

std::string read_fixture(const std::string& name) {
  std::ifstream in(fmt::format("{}/tests/fixtures/chat_templates/{}", LONGSERVE_SOURCE_DIR, name),
                   std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// Deterministic mutations of the real templates (byte deletions, insertions of Jinja
// punctuation, duplications, truncations): parse and render must come back with a value or an
// error, never crash or hang. The fuzzer does this at length; this keeps a fast version in CI.
TEST(JinjaRobustness, MutatedRealTemplatesNeverCrash) {
  const char* names[] = {"llama3.jinja", "llama3_1.jinja", "mistral_v0_3.jinja", "qwen2_5.jinja",
                         "qwen3.jinja"};
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
    {"role": "assistant", "content": "<think>r</think>a", "tool_calls": [
      {"id": "abcdefghi", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "tool_call_id": "abcdefghi", "content": "t"}, {"role": "user", "content": "v"}])");
  const ordered_json context = ordered_json::parse(
      R"({"bos_token": "<s>", "eos_token": "</s>", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  const std::string snippets[] = {"{{", "}}",     "{%", "%}",   "{#", "#}", "-",
                                  "'",  "\"",     "(",  ")",    "[",  "]",  "|",
                                  ".",  "endfor", "if", "loop", "*",  "\\", "\n"};
  jinja::RenderLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  std::mt19937 rng(1234);
  int num_parsed = 0;
  int num_rendered = 0;
  for (const char* name : names) {
    const std::string original = read_fixture(name);
    ASSERT_FALSE(original.empty()) << name;
    for (int iter = 0; iter < 300; ++iter) {
      std::string s = original;
      const int num_edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < num_edits && !s.empty(); ++e) {
        const size_t pos = rng() % s.size();
        switch (rng() % 4) {
          case 0:
            s.erase(pos, 1 + rng() % 8);
            break;
          case 1:
            s.insert(pos, snippets[rng() % std::size(snippets)]);
            break;
          case 2:
            s.insert(pos, s.substr(pos, std::min<size_t>(40, s.size() - pos)));
            break;
          default:
            s.resize(pos);
        }
      }
      auto t = ChatTemplate::parse(s, limits);
      if (!t.ok()) {
        EXPECT_FALSE(t.status().message().empty());
        continue;
      }
      ++num_parsed;
      auto out = t->render(messages, iter % 2 == 0, context);
      if (out.ok()) ++num_rendered;
    }
  }
  // Most mutations break the syntax; enough of them must get through to exercise rendering.
  EXPECT_GT(num_parsed, 100);
  EXPECT_GT(num_rendered, 50);
}

TEST(JinjaLimits, RunawayLoopsStop) {
  jinja::RenderLimits limits;
  limits.max_steps = 100000;
  auto out =
      render("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
             nullptr, limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, ExponentialStringsStop) {
  jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  auto out = render(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s | length }}",
      nullptr, limits);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  auto repeat = render("{{ 'x' * 100000000000 }}", nullptr, limits);
  ASSERT_FALSE(repeat.ok());
  auto lists = render(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}",
      nullptr, limits);
  ASSERT_FALSE(lists.ok());
  EXPECT_EQ(lists.status().code(), StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, RecursionStops) {
  auto out = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  // Deep nesting in the source is a syntax error, not a stack overflow.
  const std::string deep =
      fmt::format("{{{{ {}1{} }}}}", std::string(5000, '('), std::string(5000, ')'));
  auto parsed = ChatTemplate::parse(deep);
  ASSERT_FALSE(parsed.ok());
  std::string blocks;
  for (int i = 0; i < 2000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(blocks).ok());
  std::string nots = "{{ ";
  for (int i = 0; i < 3000; ++i) nots += "not ";
  nots += "1 }}";
  EXPECT_FALSE(ChatTemplate::parse(nots).ok());
}

TEST(JinjaLimits, SelfReferencingNamespaceRendersAndFrees) {
  // The cycle is broken at the end of the render (the sanitizer build checks for leaks).
  auto out = render(
      "{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.l = [ns] %}"
      "{{ ns.me.me.l | length }}");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "1");
}

TEST(JinjaGlobals, StrftimeNowReadsTheClock) {
  // Compared with the C library's own reading of the clock, taken around the render.
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[64];
    std::strftime(buf, sizeof(buf), "%d %b %Y", &local);
    return std::string(buf);
  };
  const std::string before = today();
  auto out =
      render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('') }}|{{ strftime_now('%%') }}");
  const std::string after = today();
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(*out == fmt::format("{}||%", before) || *out == fmt::format("{}||%", after)) << *out;
  // "DD Mon YYYY"
  const std::string date = out->substr(0, 11);
  ASSERT_EQ(date.size(), 11u);
  for (size_t i : {0, 1, 7, 8, 9, 10})
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(date[i]))) << date;
  EXPECT_TRUE(std::isupper(static_cast<unsigned char>(date[3]))) << date;
  EXPECT_EQ(date[2], ' ');
  EXPECT_EQ(date[6], ' ');
}

TEST(JinjaGlobals, Llama32DefaultsToTodaysDate) {
  auto t = ChatTemplate::parse(read_fixture("llama3_2.jinja"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[64];
  std::strftime(buf, sizeof(buf), "Today Date: %d %b %Y\n", &local);
  auto out = t->render(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), true,
                       ordered_json::parse(R"({"bos_token": "<|begin_of_text|>"})"));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_NE(out->find(buf), std::string::npos) << *out;
}

TEST(JinjaValues, InvalidUtf8InContentPassesThroughPrint) {
  // A message is printed byte for byte even when it is not valid UTF-8.
  const std::string bad(
      "a\xff"
      "b");
  ordered_json ctx = ordered_json::object();
  ctx["x"] = bad;
  auto t = ChatTemplate::parse("[{{ x }}]|{{ x | length }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render(ordered_json::array(), false, ctx);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, fmt::format("[{}]|3", bad));
  // trim: U+2028 and U+3000 are whitespace, a stray byte is not (it reads as U+FFFD), and a
  // truncated sequence at either end stays.
  ordered_json ws = ordered_json::object();
  ws["x"] = std::string("\xe2\x80\xa8 \xff a\xe3\x80\x80\t");
  ws["y"] = std::string("\xe3\x80 b \xe3\x80");
  auto trimmed = ChatTemplate::parse("[{{ x | trim }}][{{ y | trim }}][{{ x.lstrip() }}]");
  ASSERT_TRUE(trimmed.ok());
  auto t_out = trimmed->render(ordered_json::array(), false, ws);
  ASSERT_TRUE(t_out.ok());
  EXPECT_EQ(*t_out, std::string("[\xff a][\xe3\x80 b \xe3\x80][\xff a\xe3\x80\x80\t]"));
}

}  // namespace
}  // namespace ls
