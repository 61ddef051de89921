// ChatTemplate's contract beyond rendering: where templates are loaded from, argument checks,
// what the context holds, and that renders may run concurrently.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/chat_template.h"

namespace ls {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / fmt::format("ls_chat_template_{}", rd());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

TEST(LoadChatTemplate, NoneWhenTheModelHasNoTemplate) {
  TempDir dir;
  auto none = load_chat_template(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  auto still_none = load_chat_template(dir.path());
  ASSERT_TRUE(still_none.ok());
  EXPECT_FALSE(still_none->has_value());
  dir.write("tokenizer_config.json", R"({"chat_template": null})");
  ASSERT_TRUE(load_chat_template(dir.path()).ok());
  EXPECT_FALSE(load_chat_template(dir.path())->has_value());
}

TEST(LoadChatTemplate, StringFromTokenizerConfig) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": "{{ bos_token }}\n{% for m in messages %}x{% endfor %}"})");
  auto t = load_chat_template(dir.path());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ(**t, "{{ bos_token }}\n{% for m in messages %}x{% endfor %}");
}

TEST(LoadChatTemplate, NamedListTakesDefault) {
  TempDir dir;
  dir.write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto t = load_chat_template(dir.path());
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ(**t, "D");
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  auto missing = load_chat_template(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("tool_use"), std::string::npos);
}

TEST(LoadChatTemplate, JinjaFileWinsOverTokenizerConfig) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "from config"})");
  dir.write("chat_template.jinja", "from jinja file\n");
  auto t = load_chat_template(dir.path());
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ(**t, "from jinja file\n");
}

TEST(LoadChatTemplate, MalformedConfigIsDataLoss) {
  TempDir dir;
  dir.write("tokenizer_config.json", "{not json");
  auto t = load_chat_template(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  dir.write("tokenizer_config.json", R"({"chat_template": 42})");
  EXPECT_EQ(load_chat_template(dir.path()).status().code(), StatusCode::kDataLoss);
}

TEST(ChatTemplateRender, RejectsNonArrayMessagesAndNonObjectContext) {
  auto t = ChatTemplate::parse("{{ messages | length }}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(ordered_json::object(), false, nullptr).ok());
  EXPECT_FALSE(t->render(ordered_json::array(), false, ordered_json::array()).ok());
  auto ok = t->render(ordered_json::array(), false, nullptr);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "0");
}

TEST(ChatTemplateRender, ContextDefaultsAndOverrides) {
  auto t = ChatTemplate::parse(
      "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ messages | length }}|{{ enable_thinking is defined }}|{{ bos_token }}");
  ASSERT_TRUE(t.ok());
  const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  auto plain = t->render(messages, true, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "True|True|True|1|False|");
  // The explicit arguments win over same-named context keys; tools and kwargs come through.
  const ordered_json extra = ordered_json::parse(
      R"({"tools": [{"type": "function"}], "messages": [], "add_generation_prompt": false,
          "enable_thinking": false, "bos_token": "<s>"})");
  auto merged = t->render(messages, true, extra);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(*merged, "False|True|True|1|True|<s>");
}

TEST(ChatTemplateRender, RaiseExceptionMessageIsVerbatim) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}{% if m.role == 'user' and not loop.first %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
      "{% endif %}{% endfor %}ok");
  ASSERT_TRUE(t.ok());
  const ordered_json bad = ordered_json::parse(
      R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  auto out = t->render(bad, false, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(),
            "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplateRender, RuntimeErrorsNameTheLine) {
  auto t = ChatTemplate::parse("line one\n{% set x = 1 %}\n  {{ missing.attr }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render(ordered_json::array(), false, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "chat template error at line 3, column 13: 'missing' is undefined");
}

TEST(ChatTemplateRender, ConcurrentRendersAgree) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "[{{ loop.index }}:{{ m.role }}:{{ m.content | upper }}]{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<ordered_json> inputs;
  std::vector<std::string> expected;
  for (int i = 0; i < 8; ++i) {
    ordered_json msgs = ordered_json::array();
    std::string want;
    for (int j = 0; j <= i; ++j) {
      const std::string content = fmt::format("m{}_{}", i, j);
      msgs.push_back({{"role", "user"}, {"content", content}});
      want += fmt::format("[{}:user:M{}_{}]", j + 1, i, j);
    }
    inputs.push_back(msgs);
    expected.push_back(fmt::format("{}{}", want, i + 1));
  }
  const ChatTemplate shared = *t;  // copies share the parsed template
  std::vector<std::thread> threads;
  std::vector<int> failures(inputs.size(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 200; ++rep) {
        auto out = shared.render(inputs[i], false, nullptr);
        if (!out.ok() || *out != expected[i]) ++failures[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(failures[i], 0) << "input " << i;
}

}  // namespace
}  // namespace ls

namespace ls {
namespace {

using nlohmann::ordered_json;

std::string read_template(const std::string& name) {
  std::ifstream in(
      fmt::format("{}/tests/fixtures/chat_templates/{}.jinja", LONGSERVE_SOURCE_DIR, name),
      std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// The expectations follow vLLM's rule: a loop over a message's content (reached through
// `messages`, a variable assigned from it, filters, tests or slices) means OpenAI parts.
TEST(ChatContentFormat, DetectedAsVllmDoes) {
  for (const char* name : {"llama3", "llama3_1", "mistral_v0_3", "qwen2_5", "qwen3"}) {
    auto t = ChatTemplate::parse(read_template(name));
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(t->content_format(), ChatContentFormat::kString) << name;
  }
  const char* openai[] = {
      "{% for m in messages %}{% for part in m['content'] %}{{ part.text }}{% endfor %}{% endfor "
      "%}",
      "{% for m in messages %}{% for part in m.content | selectattr('type', 'equalto', 'text') %}"
      "{{ part.text }}{% endfor %}{% endfor %}",
      "{% set loop_messages = messages[1:] %}{% set rest = loop_messages %}{% for m in rest %}"
      "{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}"
      "{% endfor %}{% endif %}{% endfor %}",
  };
  for (const char* src : openai) {
    auto t = ChatTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << src;
    EXPECT_EQ(t->content_format(), ChatContentFormat::kOpenAi) << src;
  }
  // Looping over something else, or over content of something that is not a message.
  const char* string_like[] = {
      "{% for m in messages %}{{ m.content }}{% endfor %}",
      "{% for part in other.content %}{{ part }}{% endfor %}",
      "{% for m in tools %}{% for p in m.content %}{% endfor %}{% endfor %}",
  };
  for (const char* src : string_like) {
    auto t = ChatTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << src;
    EXPECT_EQ(t->content_format(), ChatContentFormat::kString) << src;
  }
}

TEST(ChatContentFormat, NormalizeJoinsOrWrapsText) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "x"}]},
    {"role": "user", "content": "plain"}])");
  auto as_string = normalize_message_content(messages, ChatContentFormat::kString);
  ASSERT_TRUE(as_string.ok()) << as_string.status().to_string();
  EXPECT_EQ((*as_string)[0]["content"], "Hello\nworld");
  EXPECT_TRUE((*as_string)[1]["content"].is_null());
  EXPECT_EQ((*as_string)[1]["tool_calls"][0]["id"], "x");
  EXPECT_EQ((*as_string)[2]["content"], "plain");
  auto as_parts = normalize_message_content(messages, ChatContentFormat::kOpenAi);
  ASSERT_TRUE(as_parts.ok());
  EXPECT_EQ((*as_parts)[0]["content"], messages[0]["content"]);
  EXPECT_EQ((*as_parts)[2]["content"],
            ordered_json::parse(R"([{"type": "text", "text": "plain"}])"));
  const ordered_json image = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  EXPECT_FALSE(normalize_message_content(image, ChatContentFormat::kString).ok());
  EXPECT_FALSE(normalize_message_content(ordered_json::parse(R"([{"role": "user", "content": 5}])"),
                                         ChatContentFormat::kString)
                   .ok());
  EXPECT_FALSE(normalize_message_content(ordered_json::object(), ChatContentFormat::kString).ok());
}

}  // namespace
}  // namespace ls
