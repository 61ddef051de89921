// Chat messages prepared as vLLM prepares them (src/server/chat_messages.cpp), then rendered by
// the Jinja engine, must give exactly what transformers renders from vLLM's preparation
// (tests/fixtures/chat_templates/vllm_messages.json, made by
// scripts/fixtures/make_vllm_message_fixtures.py): developer messages, content parts, tool-call
// round trips with null content and JSON-string arguments, continue_final_message, over the six
// templates of make_chat_template_fixtures.py and the public Qwen3-0.6B, Phi-3.5-mini-instruct,
// gpt-oss and SmolLM2 ones (SOURCES.md). Equal text gives equal tokens under the model's
// tokenizer.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "server/chat_messages.h"
#include "tokenizer/chat_template.h"

namespace ls {
namespace {

const std::string kFixtureDir =
    fmt::format("{}/tests/fixtures/chat_templates/", LONGSERVE_SOURCE_DIR);

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// What strftime_now(format) gives now (local time, as transformers' datetime.now()).
std::string strftime_today(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256, '\0');
  buf.resize(std::strftime(buf.data(), buf.size(), format.c_str(), &local));
  return buf;
}

// The fixture rendered strftime_now() at a pinned instant (case "strftime_now": format -> text);
// the engine reads the clock, so the pinned texts become today's.
std::string with_today(std::string expected, const Json& c) {
  if (!c.contains("strftime_now")) return expected;
  for (const auto& [format, pinned] : c["strftime_now"].items()) {
    const std::string from = pinned.get<std::string>();
    const std::string to = strftime_today(format);
    if (from.empty()) continue;
    for (size_t pos = expected.find(from); pos != std::string::npos;
         pos = expected.find(from, pos + to.size())) {
      expected.replace(pos, from.size(), to);
    }
  }
  return expected;
}

TEST(ChatMessages, PreparedAsVllmRenderLikeTransformers) {
  const Json fixtures = Json::parse(read_text(kFixtureDir + "vllm_messages.json"));
  std::map<std::string, ChatTemplate> templates;
  int num_expected = 0;
  for (const Json& c : fixtures["cases"]) {
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE(fmt::format("{} {} {}", name, c["name"].get<std::string>(),
                             c["add_generation_prompt"].get<bool>() ? "+gen" : "-gen"));
    if (!templates.count(name)) {
      auto parsed = ChatTemplate::parse(read_text(kFixtureDir + name + ".jinja"));
      ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
      templates.emplace(name, std::move(parsed).value());
    }
    const ChatTemplate& tmpl = templates.at(name);
    Result<Json> prepared = prepare_chat_messages(c["messages"], tmpl);
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    Result<std::string> out =
        tmpl.render(*prepared, c["add_generation_prompt"].get<bool>(), c["extra_context"]);
    if (out.ok() && c["continue_final_message"].get<bool>()) {
      out = cut_after_final_message(*out, *prepared);
    }
    if (c.contains("expected")) {
      ++num_expected;
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(*out, with_today(c["expected"].get<std::string>(), c));
    } else {
      EXPECT_FALSE(out.ok()) << "transformers raised " << c["error"].dump();
    }
  }
  EXPECT_GE(num_expected, 80);
}

TEST(ChatMessages, RejectsBadArgumentsAndParts) {
  auto tmpl = ChatTemplate::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(tmpl.ok());
  const Json bad_args = Json::parse(R"([{"role": "assistant", "content": null, "tool_calls":
      [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}])");
  EXPECT_FALSE(prepare_chat_messages(bad_args, *tmpl).ok());
  const Json image = Json::parse(
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  EXPECT_FALSE(prepare_chat_messages(image, *tmpl).ok());
  EXPECT_FALSE(prepare_chat_messages(Json::array(), *tmpl).ok());
  EXPECT_FALSE(cut_after_final_message("abc", Json::parse(R"([{"role": "assistant",
      "content": "zzz"}])")).ok());
}

}  // namespace
}  // namespace ls
