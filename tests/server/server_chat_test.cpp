// Black-box tests of POST /v1/chat/completions: the prompt is the chat template rendered and
// tokenized as transformers + vLLM do it (fixture), and responses / chunks have vLLM's shapes.

#include <gtest/gtest.h>

#include "test_server.h"

namespace ls::testing {
namespace {

std::string token_text(int32_t id) {
  return expected()["token_texts"][std::to_string(id)].get<std::string>();
}

// FakeEngine's text for choice c of a prompt (prompt_ids[(k + c) % len] for k < num_tokens).
std::string fake_text(const std::vector<int32_t>& prompt, int c, int num_tokens) {
  std::string text;
  for (int k = 0; k < num_tokens; ++k) text += token_text(prompt[(k + c) % prompt.size()]);
  return text;
}

TEST(ServerChat, PromptIsTheHfRenderedTemplate) {
  TestServer server;
  auto client = server.client();
  for (const Json& c : expected()["chat"]) {
    const Json body = {{"model", "fake-model"}, {"messages", c["messages"]}, {"max_tokens", 6}};
    auto [status, text] = post_json(*client, "/v1/chat/completions", body.dump());
    ASSERT_EQ(status, 200) << text;
    const std::vector<int32_t> prompt = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(server.engine().submitted().back().prompt_ids, prompt);

    const Json response = Json::parse(text);
    EXPECT_EQ(response["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(response["object"], "chat.completion");
    EXPECT_EQ(response["model"], "fake-model");
    ASSERT_EQ(response["choices"].size(), 1u);
    const Json& choice = response["choices"][0];
    EXPECT_EQ(choice["index"], 0);
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_EQ(choice["message"]["content"], fake_text(prompt, 0, 6));
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_TRUE(choice["logprobs"].is_null());
    EXPECT_EQ(response["usage"]["prompt_tokens"], prompt.size());
    EXPECT_EQ(response["usage"]["completion_tokens"], 6);
  }
}

TEST(ServerChat, ContentPartsAreJoinedAndMaxTokensDefaultsToTheRestOfTheContext) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["chat"][0];
  const std::string content = c["messages"][0]["content"];
  // A single text part renders like the plain string.
  const Json body = {
      {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", content}}}}}}}};
  auto [status, text] = post_json(*client, "/v1/chat/completions", body.dump());
  ASSERT_EQ(status, 200) << text;
  const GenerateRequest sent = server.engine().submitted().back();
  EXPECT_EQ(sent.prompt_ids, c["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(sent.stop.max_tokens, 256 - static_cast<int32_t>(c["ids"].size()));

  // max_completion_tokens wins over max_tokens.
  const Json both = {{"messages", c["messages"]}, {"max_tokens", 9}, {"max_completion_tokens", 4}};
  auto [status2, text2] = post_json(*client, "/v1/chat/completions", both.dump());
  ASSERT_EQ(status2, 200) << text2;
  EXPECT_EQ(server.engine().submitted().back().stop.max_tokens, 4);
}

TEST(ServerChat, StreamFramingIsByteExact) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["chat"][0];
  const std::vector<int32_t> prompt = c["ids"].get<std::vector<int32_t>>();
  const Json body = {{"messages", c["messages"]},
                     {"max_tokens", 5},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  auto res = client->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_EQ(events.size(), 1u + 5u + 2u);  // role, one per token, usage, [DONE]
  const Json first = Json::parse(events[0]);
  const std::string id = first["id"];
  const std::string head = R"({"id":")" + id + R"(","object":"chat.completion.chunk","created":)" +
                           first["created"].dump() + R"(,"model":"fake-model","choices":[)";
  EXPECT_EQ(events[0], head + R"({"index":0,"delta":{"role":"assistant","content":""},)"
                              R"("logprobs":null,"finish_reason":null}]})");
  for (int k = 0; k < 5; ++k) {
    const std::string content = Json(token_text(prompt[static_cast<size_t>(k)])).dump();
    const std::string tail =
        k == 4 ? R"("finish_reason":"length","stop_reason":null}]})" : R"("finish_reason":null}]})";
    EXPECT_EQ(events[static_cast<size_t>(1 + k)],
              head + R"({"index":0,"delta":{"content":)" + content + R"(},"logprobs":null,)" + tail)
        << "token " << k;
  }
  EXPECT_EQ(events[6], R"({"id":")" + id + R"(","object":"chat.completion.chunk","created":)" +
                           first["created"].dump() +
                           R"(,"model":"fake-model","choices":[],"usage":{"prompt_tokens":)" +
                           std::to_string(prompt.size()) +
                           R"(,"completion_tokens":5,"total_tokens":)" +
                           std::to_string(prompt.size() + 5) + "}}");
  EXPECT_EQ(events[7], "[DONE]");
}

TEST(ServerChat, StreamWithNChoicesSendsARoleChunkPerChoice) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["chat"][1];
  const std::vector<int32_t> prompt = c["ids"].get<std::vector<int32_t>>();
  const Json body = {{"messages", c["messages"]}, {"max_tokens", 4}, {"stream", true}, {"n", 3}};
  auto res = client->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_EQ(events.size(), 3u + 3u * 4u + 1u);
  std::vector<std::string> texts(3);
  for (size_t i = 0; i < 3; ++i) {
    const Json chunk = Json::parse(events[i]);
    EXPECT_EQ(chunk["choices"][0]["index"], i);
    EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  }
  for (size_t i = 3; i + 1 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    const Json& choice = chunk["choices"][0];
    EXPECT_FALSE(choice["delta"].contains("role"));
    texts[choice["index"].get<size_t>()] += choice["delta"]["content"].get<std::string>();
  }
  for (int choice = 0; choice < 3; ++choice) {
    EXPECT_EQ(texts[static_cast<size_t>(choice)], fake_text(prompt, choice, 4)) << choice;
  }
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST(ServerChat, LogprobsInChatFormat) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["chat"][0];
  const std::vector<int32_t> prompt = c["ids"].get<std::vector<int32_t>>();
  const Json body = {
      {"messages", c["messages"]}, {"max_tokens", 3}, {"logprobs", true}, {"top_logprobs", 2}};
  auto [status, text] = post_json(*client, "/v1/chat/completions", body.dump());
  ASSERT_EQ(status, 200) << text;
  EXPECT_EQ(server.engine().submitted().back().sampling.logprobs, 2);
  const Json response = Json::parse(text);
  const Json& content = response["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const std::string token = expected()["token_strings"][std::to_string(prompt[k])];
    EXPECT_EQ(content[k]["token"].get<std::string>(), token);
    EXPECT_DOUBLE_EQ(content[k]["logprob"].get<double>(), -0.25 * static_cast<double>(k + 1));
    std::vector<int> bytes(token.begin(), token.end());
    for (int& b : bytes) b &= 0xFF;
    EXPECT_EQ(content[k]["bytes"].get<std::vector<int>>(), bytes);
    ASSERT_EQ(content[k]["top_logprobs"].size(), 2u);
    EXPECT_DOUBLE_EQ(content[k]["top_logprobs"][1]["logprob"].get<double>(), -9999.0);
  }
}

TEST(ServerChat, TokenizeMessagesUsesTheTemplate) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["chat"][1];
  auto [status, text] = post_json(
      *client, "/tokenize", Json{{"messages", c["messages"]}, {"return_token_strs", true}}.dump());
  ASSERT_EQ(status, 200) << text;
  const Json response = Json::parse(text);
  EXPECT_EQ(response["tokens"], c["ids"]);
  ASSERT_EQ(response["token_strs"].size(), c["ids"].size());
  EXPECT_EQ(response["token_strs"][0], "<|begin_of_text|>");
}

TEST(ServerChat, WithoutATemplateChatIsABadRequest) {
  TestServerOptions options = default_test_options();
  options.chat_template = false;
  TestServer server(options);
  auto client = server.client();
  auto [status, text] =
      post_json(*client, "/v1/chat/completions",
                Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump());
  EXPECT_EQ(status, 400) << text;
  EXPECT_EQ(Json::parse(text)["error"]["type"], "BadRequestError");
}

}  // namespace
}  // namespace ls::testing
