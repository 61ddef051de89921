// Black-box tests of POST /v1/completions over loopback: the prompt the engine receives equals
// HF's tokenization (fixture), the response text equals FakeEngine's rule applied with HF's
// decoder (fixture), and the response shapes follow vLLM.

#include <gtest/gtest.h>

#include "server/server.h"
#include "test_server.h"
#include "tokenizer/tokenizer.h"

namespace ls::testing {
namespace {

std::vector<int32_t> ids_of(const Json& list) {
  return list.get<std::vector<int32_t>>();
}

std::string token_text(int32_t id) {
  return expected()["token_texts"][std::to_string(id)].get<std::string>();
}

Json completion(httplib::Client& client, Json body, int expected_status = 200) {
  auto [status, text] = post_json(client, "/v1/completions", body.dump());
  EXPECT_EQ(status, expected_status) << text;
  return Json::parse(text, nullptr, false);
}

TEST(ServerCompletions, TextPromptsMatchHfTokensAndFakeRule) {
  TestServer server;
  auto client = server.client();
  int request_index = 0;
  for (const Json& c : expected()["completions"]) {
    const Json response = completion(*client, {{"model", "fake-model"},
                                               {"prompt", c["prompt"]},
                                               {"max_tokens", c["max_tokens"]},
                                               {"temperature", 0}});
    const std::vector<GenerateRequest> submitted = server.engine().submitted();
    ASSERT_EQ(submitted.size(), static_cast<size_t>(request_index + 1));
    const GenerateRequest& sent = submitted.back();
    EXPECT_EQ(sent.prompt_ids, ids_of(c["prompt_ids"]));
    EXPECT_EQ(sent.stop.max_tokens, c["max_tokens"].get<int32_t>());
    EXPECT_TRUE(sent.sampling.greedy());
    EXPECT_EQ(sent.n, 1);
    ++request_index;

    ASSERT_TRUE(response.is_object());
    EXPECT_EQ(response["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    EXPECT_EQ(response["object"], "text_completion");
    EXPECT_TRUE(response["created"].is_number_integer());
    EXPECT_EQ(response["model"], "fake-model");
    ASSERT_EQ(response["choices"].size(), 1u);
    const Json& choice = response["choices"][0];
    EXPECT_EQ(choice["index"], 0);
    EXPECT_EQ(choice["text"], c["choices"][0]["text"]);
    EXPECT_TRUE(choice["logprobs"].is_null());
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_TRUE(choice["stop_reason"].is_null());
    const int64_t prompt_tokens = static_cast<int64_t>(c["prompt_ids"].size());
    EXPECT_EQ(response["usage"]["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(response["usage"]["completion_tokens"], c["max_tokens"]);
    EXPECT_EQ(response["usage"]["total_tokens"], prompt_tokens + c["max_tokens"].get<int64_t>());
  }
}

TEST(ServerCompletions, TokenIdPromptsAreSentAsGiven) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["completions"][1];
  const Json response =
      completion(*client, {{"prompt", c["prompt_ids"]}, {"max_tokens", 12}, {"echo", false}});
  EXPECT_EQ(server.engine().submitted().back().prompt_ids, ids_of(c["prompt_ids"]));
  EXPECT_EQ(response["choices"][0]["text"], c["choices"][0]["text"]);
  // Unknown fields and explicit nulls are accepted (the vLLM bench sends "logprobs": null).
  const Json again = completion(*client, {{"prompt", c["prompt_ids"]},
                                          {"max_tokens", 3},
                                          {"logprobs", nullptr},
                                          {"top_p", nullptr},
                                          {"some_future_field", {{"x", 1}}}});
  EXPECT_EQ(again["usage"]["completion_tokens"], 3);
}

TEST(ServerCompletions, SamplingAndStopFieldsReachTheEngine) {
  TestServer server;
  auto client = server.client();
  completion(*client, {{"prompt", "Paris"},
                       {"max_tokens", 7},
                       {"temperature", 0.5},
                       {"top_p", 0.75},
                       {"top_k", 40},
                       {"min_p", 0.125},
                       {"repetition_penalty", 1.25},
                       {"presence_penalty", 0.5},
                       {"frequency_penalty", -0.5},
                       {"seed", 1234},
                       {"stop", "zzz"},
                       {"stop_token_ids", {5, 6}},
                       {"ignore_eos", true},
                       {"min_tokens", 2},
                       {"include_stop_str_in_output", true},
                       {"skip_special_tokens", false},
                       {"n", 2},
                       {"logprobs", 3}});
  const GenerateRequest sent = server.engine().submitted().back();
  EXPECT_FLOAT_EQ(sent.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(sent.sampling.top_p, 0.75f);
  EXPECT_EQ(sent.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(sent.sampling.min_p, 0.125f);
  EXPECT_FLOAT_EQ(sent.sampling.repetition_penalty, 1.25f);
  EXPECT_FLOAT_EQ(sent.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(sent.sampling.frequency_penalty, -0.5f);
  ASSERT_TRUE(sent.sampling.seed.has_value());
  EXPECT_EQ(*sent.sampling.seed, 1234u);
  EXPECT_EQ(sent.sampling.logprobs, 3);
  EXPECT_EQ(sent.stop.max_tokens, 7);
  EXPECT_EQ(sent.stop.stop, std::vector<std::string>{"zzz"});
  EXPECT_EQ(sent.stop.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(sent.stop.ignore_eos);
  EXPECT_EQ(sent.stop.min_tokens, 2);
  EXPECT_TRUE(sent.stop.include_stop_str_in_output);
  EXPECT_FALSE(sent.stop.skip_special_tokens);
  EXPECT_EQ(sent.n, 2);
}

TEST(ServerCompletions, MissingFieldsComeFromEngineDefaults) {
  TestServerOptions options = default_test_options();
  options.engine.default_sampling.temperature = 0.7f;
  options.engine.default_sampling.top_p = 0.9f;
  options.engine.default_sampling.top_k = 20;
  options.engine.default_stop.eos_token_ids = {7, 8};
  TestServer server(options);
  auto client = server.client();
  completion(*client, {{"prompt", "Paris"}});
  const GenerateRequest sent = server.engine().submitted().back();
  EXPECT_FLOAT_EQ(sent.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(sent.sampling.top_p, 0.9f);
  EXPECT_EQ(sent.sampling.top_k, 20);
  EXPECT_EQ(sent.sampling.logprobs, -1);
  EXPECT_EQ(sent.stop.max_tokens, 16);  // vLLM's completions default
  EXPECT_EQ(sent.stop.eos_token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(sent.stop.skip_special_tokens);
}

TEST(ServerCompletions, PromptListsAndNNumberChoicesLikeVllm) {
  TestServer server;
  auto client = server.client();
  const Json& cases = expected()["completions"];
  const Json response = completion(
      *client,
      {{"prompt", {cases[0]["prompt"], cases[2]["prompt"]}}, {"max_tokens", 12}, {"n", 2}});
  ASSERT_EQ(response["choices"].size(), 4u);
  const Json* prompt_cases[] = {&cases[0], &cases[2]};
  for (int p = 0; p < 2; ++p) {
    for (int c = 0; c < 2; ++c) {
      const Json& choice = response["choices"][p * 2 + c];
      EXPECT_EQ(choice["index"], p * 2 + c);
      EXPECT_EQ(choice["text"], (*prompt_cases[p])["choices"][c]["text"]) << p << "," << c;
    }
  }
  const int64_t prompt_tokens =
      static_cast<int64_t>(cases[0]["prompt_ids"].size() + cases[2]["prompt_ids"].size());
  EXPECT_EQ(response["usage"]["prompt_tokens"], prompt_tokens);  // each prompt counted once
  EXPECT_EQ(response["usage"]["completion_tokens"], 4 * 12);
}

TEST(ServerCompletions, StopStringsCutTheTextAndNameTheReason) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["completions"][0];
  const std::string full = c["choices"][0]["text"];
  const std::string stop = "this";
  ASSERT_NE(full.find(stop), std::string::npos);
  Json response =
      completion(*client, {{"prompt", c["prompt"]}, {"max_tokens", 12}, {"stop", {"zz", stop}}});
  EXPECT_EQ(response["choices"][0]["text"].get<std::string>(), full.substr(0, full.find(stop)));
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(response["choices"][0]["stop_reason"].get<std::string>(), stop);

  response = completion(*client, {{"prompt", c["prompt"]},
                                  {"max_tokens", 12},
                                  {"stop", stop},
                                  {"include_stop_str_in_output", true}});
  EXPECT_EQ(response["choices"][0]["text"].get<std::string>(),
            full.substr(0, full.find(stop) + stop.size()));
}

TEST(ServerCompletions, StopTokenIdsAndEosReportVllmStopReasons) {
  TestServerOptions options = default_test_options();
  const Json& c = expected()["completions"][2];
  const std::vector<int32_t> tokens = ids_of(c["choices"][0]["tokens"]);
  options.engine.default_stop.eos_token_ids = {tokens[5]};
  TestServer server(options);
  auto client = server.client();

  // A stop_token_ids hit: stop_reason is the id as an integer; the id itself is not shown.
  Json response = completion(
      *client, {{"prompt", c["prompt"]}, {"max_tokens", 12}, {"stop_token_ids", {tokens[3]}}});
  std::string text;
  for (int k = 0; k < 3; ++k) text += token_text(tokens[k]);
  EXPECT_EQ(response["choices"][0]["text"].get<std::string>(), text);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(response["choices"][0]["stop_reason"], tokens[3]);
  EXPECT_EQ(response["usage"]["completion_tokens"], 4);

  // EOS: finish_reason stop with a null stop_reason.
  response = completion(*client, {{"prompt", c["prompt"]}, {"max_tokens", 12}});
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(response["choices"][0]["stop_reason"].is_null());
  EXPECT_EQ(response["usage"]["completion_tokens"], 6);

  // ignore_eos runs to max_tokens.
  response =
      completion(*client, {{"prompt", c["prompt"]}, {"max_tokens", 12}, {"ignore_eos", true}});
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["choices"][0]["text"], c["choices"][0]["text"]);
}

TEST(ServerCompletions, LogprobsInCompletionsFormat) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["completions"][0];
  const std::vector<int32_t> tokens = ids_of(c["choices"][0]["tokens"]);
  const Json response =
      completion(*client, {{"prompt", c["prompt"]}, {"max_tokens", 5}, {"logprobs", 2}});
  const Json& logprobs = response["choices"][0]["logprobs"];
  ASSERT_TRUE(logprobs.is_object()) << response.dump();
  ASSERT_EQ(logprobs["tokens"].size(), 5u);
  int64_t offset = 0;
  for (size_t k = 0; k < 5; ++k) {
    const std::string token = expected()["token_strings"][std::to_string(tokens[k])];
    EXPECT_EQ(logprobs["tokens"][k].get<std::string>(), token);
    EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][k].get<double>(), -0.25 * (k + 1));
    EXPECT_EQ(logprobs["text_offset"][k], offset);
    for (unsigned char ch : token) offset += (ch & 0xC0) != 0x80;  // code points, as Python
    const Json& top = logprobs["top_logprobs"][k];
    ASSERT_TRUE(top.is_object());
    EXPECT_LE(top.size(), 3u);  // the sampled token plus the top 2
    ASSERT_TRUE(top.contains(token));
    // FakeEngine's second alternative is -inf, which vLLM sends as -9999.0.
    bool has_floor = false;
    for (const auto& [key, value] : top.items()) has_floor |= value.get<double>() == -9999.0;
    EXPECT_TRUE(has_floor) << top.dump();
  }
}

TEST(ServerCompletions, EchoPrependsThePrompt) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["completions"][3];
  const Json response =
      completion(*client, {{"prompt", c["prompt"]}, {"max_tokens", 12}, {"echo", true}});
  EXPECT_EQ(response["choices"][0]["text"].get<std::string>(),
            c["prompt"].get<std::string>() + c["choices"][0]["text"].get<std::string>());
}

TEST(ServerCompletions, StreamFramingIsByteExact) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["completions"][0];
  const std::vector<int32_t> tokens = ids_of(c["choices"][0]["tokens"]);
  const Json body = {{"model", "fake-model"},
                     {"prompt", c["prompt"]},
                     {"max_tokens", 12},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  auto res = client->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_EQ(events.size(), 12u + 2u);  // one per token, the usage chunk, [DONE]
  const Json first = Json::parse(events[0]);
  const std::string id = first["id"];
  const std::string created = first["created"].dump();
  EXPECT_EQ(id.rfind("cmpl-", 0), 0u);
  std::string streamed;
  for (size_t k = 0; k < 12; ++k) {
    const std::string text = token_text(tokens[k]);
    const std::string finish = k == 11 ? "\"length\"" : "null";
    const std::string expected_event =
        R"({"id":")" + id + R"(","object":"text_completion","created":)" + created +
        R"(,"model":"fake-model","choices":[{"index":0,"text":)" + Json(text).dump() +
        R"(,"logprobs":null,"finish_reason":)" + finish + R"(,"stop_reason":null}],"usage":null})";
    EXPECT_EQ(events[k], expected_event) << "token " << k;
    streamed += text;
  }
  EXPECT_EQ(streamed, c["choices"][0]["text"].get<std::string>());
  const size_t prompt_tokens = c["prompt_ids"].size();
  const std::string usage_event =
      R"({"id":")" + id + R"(","object":"text_completion","created":)" + created +
      R"(,"model":"fake-model","choices":[],"usage":{"prompt_tokens":)" +
      std::to_string(prompt_tokens) + R"(,"completion_tokens":12,"total_tokens":)" +
      std::to_string(prompt_tokens + 12) + "}}";
  EXPECT_EQ(events[12], usage_event);
  EXPECT_EQ(events[13], "[DONE]");
}

TEST(ServerCompletions, StreamWithoutUsageAndWithStopAndLogprobs) {
  TestServer server;
  auto client = server.client();
  const Json& c = expected()["completions"][0];
  const std::string full = c["choices"][0]["text"];
  const Json body = {{"prompt", c["prompt"]}, {"max_tokens", 12}, {"stream", true},
                     {"stop", "this"},        {"logprobs", 1},    {"n", 2}};
  auto res = client->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text0;
  int finished = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    ASSERT_EQ(chunk["choices"].size(), 1u) << "no empty-choices chunks without include_usage";
    EXPECT_TRUE(chunk["usage"].is_null());
    const Json& choice = chunk["choices"][0];
    if (choice["index"] == 0) text0 += choice["text"].get<std::string>();
    if (!choice["finish_reason"].is_null()) ++finished;
    // Each chunk carries the logprobs of exactly its own tokens.
    EXPECT_EQ(choice["logprobs"]["tokens"].size(), 1u);
  }
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(text0, full.substr(0, full.find("this")));
}

TEST(ServerCompletions, TokenizeAndDetokenizeMatchHf) {
  TestServer server;
  auto client = server.client();
  for (const Json& c : expected()["encode"]) {
    auto [status, text] = post_json(*client, "/tokenize", Json{{"prompt", c["text"]}}.dump());
    ASSERT_EQ(status, 200) << text;
    const Json response = Json::parse(text);
    EXPECT_EQ(response["tokens"], c["ids"]);
    EXPECT_EQ(response["count"], c["ids"].size());
    EXPECT_EQ(response["max_model_len"], 256);
    EXPECT_TRUE(response["token_strs"].is_null());
  }
  const Json& c = expected()["completions"][0];
  auto [status, text] = post_json(*client, "/detokenize", Json{{"tokens", c["prompt_ids"]}}.dump());
  ASSERT_EQ(status, 200) << text;
  // decode keeps special tokens: the BOS string, then the prompt.
  std::string expected_text;
  for (const Json& id : c["prompt_ids"]) {
    expected_text +=
        expected()["token_strings"][std::to_string(id.get<int32_t>())].get<std::string>();
  }
  EXPECT_EQ(Json::parse(text)["prompt"].get<std::string>(), expected_text);
}

TEST(ServerCompletions, ModelsAndHealth) {
  TestServerOptions options = default_test_options();
  options.config.served_model_name = "served-name";
  TestServer server(options);
  auto client = server.client();
  auto health = client->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(health->body.empty());
  auto models = client->Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  const Json list = Json::parse(models->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], "served-name");
  EXPECT_EQ(list["data"][0]["object"], "model");
  EXPECT_EQ(list["data"][0]["root"], "fake-model");
  EXPECT_EQ(list["data"][0]["max_model_len"], 256);
  // The served name is the one requests must use.
  auto [status, text] = post_json(*client, "/v1/completions",
                                  Json{{"model", "served-name"}, {"prompt", "Paris"}}.dump());
  EXPECT_EQ(status, 200) << text;
  EXPECT_EQ(Json::parse(text)["model"], "served-name");
}

}  // namespace
}  // namespace ls::testing
