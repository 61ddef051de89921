// Tool-call parsers on examples of each format, and streaming: the text split after every byte
// (and token-like chunks) gives deltas whose concatenation equals the whole-text parse.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/tool_call_parser.h"

namespace ls::grammar {
namespace {

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments (as JSON)
};

void expect_parse(const ToolCallParser& p, const std::string& text, const Expected& e) {
  const ToolParse r = p.parse(text, /*final=*/true);
  EXPECT_EQ(r.content, e.content) << text;
  ASSERT_EQ(r.calls.size(), e.calls.size()) << text;
  for (size_t i = 0; i < r.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, e.calls[i].first);
    EXPECT_EQ(nlohmann::json::parse(r.calls[i].arguments), nlohmann::json::parse(e.calls[i].second))
        << r.calls[i].arguments;
  }
}

// Streams text in pieces of `chunk` bytes (the last push final) and checks the deltas add up to
// the final parse.
void expect_stream(const ToolCallParser& p, const std::string& text, size_t chunk) {
  const ToolParse whole = p.parse(text, true);
  ToolCallStreamer s(p);
  std::string content;
  std::vector<std::string> names, args;
  for (size_t pos = 0; pos < text.size() || pos == 0; pos += chunk) {
    const bool final = pos + chunk >= text.size();
    const auto d = s.push(std::string_view(text).substr(pos, std::min(chunk, text.size() - pos)), final);
    content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) {
        ASSERT_EQ(static_cast<size_t>(c.index), names.size());
        names.push_back(c.name);
        args.emplace_back();
      }
      ASSERT_LT(static_cast<size_t>(c.index), args.size());
      args[static_cast<size_t>(c.index)] += c.arguments;
    }
    if (final) break;
  }
  if (whole.calls.empty()) return;  // fallback to content: streams cannot take deltas back
  EXPECT_EQ(content, whole.content) << "chunk " << chunk << ": " << text;
  ASSERT_EQ(names.size(), whole.calls.size()) << "chunk " << chunk << ": " << text;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], whole.calls[i].name);
    EXPECT_EQ(args[i], whole.calls[i].arguments) << "chunk " << chunk << ": " << text;
  }
}

void expect_all_splits(const ToolCallParser& p, const std::string& text) {
  for (size_t chunk : {1, 2, 3, 5, 7, 1000}) expect_stream(p, text, chunk);
}

TEST(HermesParser, ContentAndCalls) {
  auto p = make_tool_call_parser("hermes").value();
  const std::string two =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"now\"}\n</tool_call>";
  expect_parse(*p, two, {"Let me check.\n", {{"get_weather", R"({"city":"Paris","days":[1,2]})"}, {"now", "{}"}}});
  expect_all_splits(*p, two);
  expect_parse(*p, "no tools here <tool", {"no tools here <tool", {}});
  // Broken JSON: everything is content.
  const std::string bad = "x<tool_call>{\"name\": \"f\", \"arguments\": {]}</tool_call>";
  expect_parse(*p, bad, {bad, {}});
  // "}" inside a string does not end the arguments.
  const std::string tricky = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"}<\\\"/tool_call>\"}}</tool_call>";
  expect_parse(*p, tricky, {"", {{"f", R"({"s": "}<\"/tool_call>"})"}}});
  expect_all_splits(*p, tricky);
}

TEST(Llama3JsonParser, CallsOrContent) {
  auto p = make_tool_call_parser("llama3_json").value();
  const std::string calls =
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {\"y\": \"z\"}}";
  expect_parse(*p, calls, {"", {{"a", R"({"x":1})"}, {"b", R"({"y":"z"})"}}});
  expect_all_splits(*p, calls);
  const std::string bare = "  {\"name\": \"a\", \"arguments\": {\"q\": [true, null]}}";
  expect_parse(*p, bare, {"", {{"a", R"({"q":[true,null]})"}}});
  expect_all_splits(*p, bare);
  expect_parse(*p, "Hello {not a call}", {"Hello {not a call}", {}});
  expect_parse(*p, "{\"name\": \"a\"", {"{\"name\": \"a\"", {}});  // cut off: content
}

TEST(MistralParser, ListAndV11Forms) {
  auto p = make_tool_call_parser("mistral").value();
  const std::string list =
      "Sure[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {}}]";
  expect_parse(*p, list, {"Sure", {{"f", R"({"a":1})"}, {"g", "{}"}}});
  expect_all_splits(*p, list);
  const std::string v11 = "[TOOL_CALLS]get[ARGS]{\"k\": \"v\"}[TOOL_CALLS]put{\"n\": 2}";
  expect_parse(*p, v11, {"", {{"get", R"({"k":"v"})"}, {"put", R"({"n":2})"}}});
  expect_all_splits(*p, v11);
  expect_parse(*p, "plain [TOOL", {"plain [TOOL", {}});
}

TEST(RequiredAndNamedParsers, ConstrainedForms) {
  auto req = make_required_tool_parser();
  const std::string list = "[{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}]";
  expect_parse(*req, list, {"", {{"f", R"({"a":"b"})"}}});
  expect_all_splits(*req, list);
  auto named = make_named_tool_parser("f");
  expect_parse(*named, "{\"a\": 1}", {"", {{"f", R"({"a":1})"}}});
  expect_all_splits(*named, "{\"a\": 1}");
}

TEST(ToolParsers, UnknownParserIsAnError) {
  auto r = make_tool_call_parser("pythonic_v9");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hermes"), std::string::npos);
}

}  // namespace
}  // namespace ls::grammar
