// Chat messages prepared as vLLM prepares them (src/server/chat_messages.cpp), then rendered by
// the Jinja engine, must give exactly what transformers renders from vLLM's preparation
// (tests/fixtures/chat_templates/vllm_messages.json, made by
// scripts/fixtures/make_vllm_message_fixtures.py): developer messages, content parts, tool-call
// round trips with null content and JSON-string arguments, continue_final_message. Equal text
// gives equal tokens under the model's tokenizer.

#include <fmt/format.h>
#include <gtest/gtest.h>

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
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      EXPECT_FALSE(out.ok()) << "transformers raised " << c["error"].dump();
    }
  }
  EXPECT_GE(num_expected, 40);
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
