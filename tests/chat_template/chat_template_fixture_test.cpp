// Renders the real chat templates (Llama 3 / 3.1 / 3.2, Mistral v0.3, Qwen2.5, Qwen3) and the
// per-construct templates exactly as the fixtures say Hugging Face renders them: the expected
// text, byte for byte, or the exception the template raises.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/chat_template.h"

namespace ls {
namespace {

using nlohmann::ordered_json;

const std::string kFixtureDir =
    fmt::format("{}/tests/fixtures/chat_templates/", LONGSERVE_SOURCE_DIR);

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

ordered_json load_json(const std::string& name) {
  return ordered_json::parse(read_file(fmt::format("{}{}", kFixtureDir, name)));
}

// What an error recorded from Python must look like here: raise_exception messages come back
// verbatim; Undefined errors carry jinja2's message; syntax errors name jinja2's line; other
// Python exceptions only need to be errors.
void expect_matching_error(const Status& status, const ordered_json& error) {
  ASSERT_FALSE(status.ok());
  const std::string type = error["type"].get<std::string>();
  const std::string message = error["message"].get<std::string>();
  if (type == "TemplateError") {
    EXPECT_EQ(status.message(), message);
  } else if (type == "UndefinedError" || type == "TemplateRuntimeError" ||
             type == "OverflowError") {
    EXPECT_NE(status.message().find(message), std::string::npos)
        << "got: " << status.message() << "\nwant it to contain: " << message;
  } else if (type == "TemplateSyntaxError" || type == "TemplateAssertionError") {
    const std::string line = fmt::format("line {},", error["lineno"].get<int>());
    EXPECT_NE(status.message().find(line), std::string::npos)
        << "got: " << status.message() << "\nwant: " << line << " (" << message << ")";
  }
}

class RealTemplateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTemplateTest, RendersLikeHuggingFace) {
  const std::string name = GetParam();
  auto tmpl = ChatTemplate::parse(read_file(fmt::format("{}{}.jinja", kFixtureDir, name)));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  const ordered_json fixtures = load_json("conversations.json");
  int num_cases = 0;
  for (const auto& c : fixtures["cases"]) {
    if (c["template"] != name) continue;
    ++num_cases;
    SCOPED_TRACE(fmt::format("{} {}", c["name"].get<std::string>(),
                             c["add_generation_prompt"].get<bool>() ? "+gen" : "-gen"));
    const auto out =
        tmpl->render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra_context"]);
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      expect_matching_error(out.status(), c["error"]);
    }
  }
  EXPECT_GE(num_cases, 20) << "fixtures for " << name << " are missing";
}

INSTANTIATE_TEST_SUITE_P(Families, RealTemplateTest,
                         ::testing::Values("llama3", "llama3_1", "llama3_2", "mistral_v0_3",
                                           "qwen2_5", "qwen3"));

// The small templates of constructs.json are rendered with the raw context (no messages), so
// they go through the engine directly via an empty message list plus the context as kwargs.
TEST(JinjaConstructs, RenderLikeJinja2) {
  const ordered_json fixtures = load_json("constructs.json");
  int num_cases = 0;
  for (const auto& c : fixtures["cases"]) {
    ++num_cases;
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(fmt::format("{}: {}", name, c["template"].get<std::string>()));
    auto tmpl = ChatTemplate::parse(c["template"].get<std::string>());
    Result<std::string> out =
        tmpl.ok() ? tmpl->render(c["context"].contains("messages") ? c["context"]["messages"]
                                                                   : ordered_json::array(),
                                 false, c["context"])
                  : Result<std::string>(tmpl.status());
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      expect_matching_error(out.status(), c["error"]);
    }
  }
  EXPECT_GE(num_cases, 150);
}

// Dict literals with integer keys (Seed-OSS's thinking-budget table), against jinja2's own
// rendering (scripts/fixtures/make_jinja_int_key_fixtures.py).
TEST(JinjaConstructs, IntKeysLikeJinja2) {
  const ordered_json fixtures = load_json("int_keys.json");
  int num_cases = 0;
  for (const auto& c : fixtures["cases"]) {
    ++num_cases;
    SCOPED_TRACE(fmt::format("{}: {}", c["name"].get<std::string>(),
                             c["template"].get<std::string>()));
    auto tmpl = ChatTemplate::parse(c["template"].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    Result<std::string> out = tmpl->render(ordered_json::array(), false, c["context"]);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, c["expected"].get<std::string>());
  }
  EXPECT_GE(num_cases, 20);
}

}  // namespace
}  // namespace ls
