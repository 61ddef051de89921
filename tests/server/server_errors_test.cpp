// Bad input gets vLLM's nested error body with the right status, and the server keeps serving.

#include <gtest/gtest.h>

#include <algorithm>

#include "test_server.h"

namespace ls::testing {
namespace {

struct ErrorCase {
  std::string name;
  std::string path;
  std::string body;
  int status;
  std::string type;
  std::string message_prefix;  // "" when any message will do
};

// The body must be {"error":{"message","type","param","code"}} with code == status.
void expect_error_body(const std::string& text, int status, const std::string& type,
                       const std::string& message_prefix, const std::string& name) {
  const Json body = Json::parse(text, nullptr, false);
  ASSERT_TRUE(body.is_object()) << name << ": " << text;
  ASSERT_TRUE(body.contains("error")) << name << ": " << text;
  const Json& error = body["error"];
  EXPECT_EQ(error["type"].get<std::string>(), type) << name;
  EXPECT_EQ(error["code"], status) << name;
  EXPECT_TRUE(error.contains("param")) << name;
  ASSERT_TRUE(error["message"].is_string()) << name;
  EXPECT_EQ(error["message"].get<std::string>().rfind(message_prefix, 0), 0u)
      << name << ": " << error["message"];
}

void expect_still_serving(httplib::Client& client) {
  auto [status, text] =
      post_json(client, "/v1/completions", Json{{"prompt", "Paris"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(status, 200) << text;
}

std::string ids_prompt(int num_tokens, int max_tokens) {
  return Json{{"prompt", std::vector<int32_t>(static_cast<size_t>(num_tokens), 42)},
              {"max_tokens", max_tokens}}
      .dump();
}

TEST(ServerErrors, BadRequestsGetTheRightStatusAndTheServerKeepsServing) {
  TestServer server;
  auto client = server.client();
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<ErrorCase> cases = {
      {"malformed json", "/v1/completions", R"({"prompt": "a",)", 400, "BadRequestError", ""},
      {"not an object", "/v1/completions", R"([1, 2])", 400, "BadRequestError", ""},
      {"invalid utf-8", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, "BadRequestError",
       ""},
      {"deep nesting", "/v1/completions", std::string(10000, '[') + std::string(10000, ']'), 400,
       "BadRequestError", ""},
      {"empty body", "/v1/completions", "", 400, "BadRequestError", ""},
      {"max_tokens type", "/v1/completions", R"({"prompt":"a","max_tokens":"ten"})", 400,
       "BadRequestError", "'max_tokens' must be an integer"},
      {"temperature type", "/v1/completions", R"({"prompt":"a","temperature":"hot"})", 400,
       "BadRequestError", "'temperature' must be a number"},
      {"stream type", "/v1/completions", R"({"prompt":"a","stream":"yes"})", 400, "BadRequestError",
       ""},
      {"missing prompt", "/v1/completions", R"({"max_tokens":3})", 400, "BadRequestError", ""},
      {"prompt number", "/v1/completions", R"({"prompt":5})", 400, "BadRequestError", ""},
      {"prompt empty list", "/v1/completions", R"({"prompt":[]})", 400, "BadRequestError", ""},
      {"prompt mixed", "/v1/completions", R"({"prompt":[1,"a"]})", 400, "BadRequestError", ""},
      {"prompt bool ids", "/v1/completions", R"({"prompt":[true]})", 400, "BadRequestError", ""},
      {"out of vocabulary", "/v1/completions", R"({"prompt":[1,100000]})", 400, "BadRequestError",
       "Token id 100000 is out of vocabulary"},
      {"negative temperature", "/v1/completions", R"({"prompt":"a","temperature":-1})", 400,
       "BadRequestError", "temperature must be non-negative"},
      {"top_p zero", "/v1/completions", R"({"prompt":"a","top_p":0})", 400, "BadRequestError",
       "top_p must be in (0, 1]"},
      {"max_tokens zero", "/v1/completions", R"({"prompt":"a","max_tokens":0})", 400,
       "BadRequestError", "max_tokens must be at least 1"},
      {"n zero", "/v1/completions", R"({"prompt":"a","n":0})", 400, "BadRequestError",
       "n must be at least 1"},
      {"n huge", "/v1/completions", R"({"prompt":"a","n":1000000})", 400, "BadRequestError",
       "n must be at most"},
      {"prompts times n", "/v1/completions", R"({"prompt":["a","b","c"],"n":60})", 400,
       "BadRequestError", "A request may ask for at most 128 choices (prompts x n), got 180."},
      {"logprobs too many", "/v1/completions", R"({"prompt":"a","logprobs":21})", 400,
       "BadRequestError", "Requested sample logprobs of 21"},
      {"stream_options without stream", "/v1/completions",
       R"({"prompt":"a","stream_options":{"include_usage":true}})", 400, "BadRequestError",
       "Stream options can only be defined when `stream=True`."},
      {"stop type", "/v1/completions", R"({"prompt":"a","stop":3})", 400, "BadRequestError", ""},
      {"unknown model", "/v1/completions", R"({"model":"gpt-5","prompt":"a"})", 404,
       "NotFoundError", "The model `gpt-5` does not exist."},
      {"too long prompt", "/v1/completions", ids_prompt(256, 1), 400, "BadRequestError",
       "This model's maximum context length is 256 tokens. However, your request has 256 input "
       "tokens. Please reduce the length of the input messages."},
      {"too long completion", "/v1/completions", ids_prompt(250, 10), 400, "BadRequestError",
       "'max_tokens' or 'max_completion_tokens' is too large: 10. This model's maximum context "
       "length is 256 tokens and your request has 250 input tokens (10 > 256 - 250)."},
      {"too long streaming", "/v1/completions",
       Json{{"prompt", std::vector<int32_t>(300, 42)}, {"stream", true}}.dump(), 400,
       "BadRequestError", "This model's maximum context length is 256 tokens."},
      {"chat missing messages", "/v1/chat/completions", R"({"max_tokens":3})", 400,
       "BadRequestError", ""},
      {"chat messages not list", "/v1/chat/completions", R"({"messages":"hi"})", 400,
       "BadRequestError", ""},
      {"chat image part", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       400, "BadRequestError", ""},
      {"chat top_logprobs without logprobs", "/v1/chat/completions",
       "{" + msgs + R"(,"top_logprobs":2})", 400, "BadRequestError",
       "when using `top_logprobs`, `logprobs` must be set to true."},
      {"chat unknown model", "/v1/chat/completions", "{" + msgs + R"(,"model":"nope"})", 404,
       "NotFoundError", "The model `nope` does not exist."},
      {"chat too long", "/v1/chat/completions", "{" + msgs + R"(,"max_tokens":100000})", 400,
       "BadRequestError", "'max_tokens' or 'max_completion_tokens' is too large: 100000."},
      {"detokenize bad id", "/detokenize", R"({"tokens":[-1]})", 400, "BadRequestError", ""},
      {"tokenize nothing", "/tokenize", R"({})", 400, "BadRequestError", ""},
      {"unknown route", "/v1/embeddings", R"({})", 404, "NotFoundError", ""},
  };
  for (const ErrorCase& c : cases) {
    auto [status, text] = post_json(*client, c.path, c.body);
    EXPECT_EQ(status, c.status) << c.name << ": " << text;
    expect_error_body(text, c.status, c.type, c.message_prefix, c.name);
    expect_still_serving(*client);
  }
  EXPECT_EQ(server.engine().num_live(), 0);
}

TEST(ServerErrors, OversizedBodiesGet413) {
  TestServerOptions options = default_test_options();
  options.config.max_payload_bytes = 1024;
  TestServer server(options);
  auto client = server.client();
  const std::string big = Json{{"prompt", std::string(4096, 'a')}}.dump();
  auto [status, text] = post_json(*client, "/v1/completions", big);
  EXPECT_EQ(status, 413) << text;
  expect_error_body(text, 413, "PayloadTooLargeError", "", "413");
  auto fresh = server.client();
  expect_still_serving(*fresh);
}

TEST(ServerErrors, ApiKeyProtectsV1Routes) {
  TestServerOptions options = default_test_options();
  options.config.api_key = "sk-test-key";
  TestServer server(options);
  auto client = server.client();
  const std::string body = Json{{"prompt", "Paris"}, {"max_tokens", 2}}.dump();

  auto [status, text] = post_json(*client, "/v1/completions", body);
  EXPECT_EQ(status, 401);
  expect_error_body(text, 401, "AuthenticationError", "Unauthorized", "no key");

  httplib::Headers wrong = {{"Authorization", "Bearer sk-test-kez"}};
  auto res = client->Post("/v1/completions", wrong, body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  auto models = client->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);

  httplib::Headers right = {{"Authorization", "Bearer sk-test-key"}};
  res = client->Post("/v1/completions", right, body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;

  // A keep-alive client is told to drop the connection after a 401 (its body was never read),
  // so its next request starts clean.
  auto keep_alive = server.client();
  keep_alive->set_keep_alive(true);
  res = keep_alive->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(res->get_header_value("Connection"), "close");
  res = keep_alive->Post("/v1/completions", right, body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;

  // Like vLLM, only /v1/* is protected.
  auto health = client->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = client->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(server.engine().submitted().size(), 2u);
}

TEST(ServerErrors, EngineErrorsAre500OrInBand) {
  TestServerOptions options = default_test_options();
  options.engine.fail_token = 77;
  options.engine.fail_after_tokens = 2;
  TestServer server(options);
  auto client = server.client();

  auto [status, text] =
      post_json(*client, "/v1/completions", Json{{"prompt", {77, 5, 6}}, {"max_tokens", 8}}.dump());
  EXPECT_EQ(status, 500);
  expect_error_body(text, 500, "InternalServerError", "injected failure", "non-stream");

  // After the headers went out, the error comes in-band, then [DONE].
  auto res = client->Post("/v1/completions",
                          Json{{"prompt", {77, 5, 6}}, {"max_tokens", 8}, {"stream", true}}.dump(),
                          "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_EQ(events.size(), 2u + 2u) << res->body;  // two tokens, the error, [DONE]
  expect_error_body(events[2], 500, "InternalServerError", "injected failure", "in-band");
  EXPECT_EQ(events[3], "[DONE]");
  expect_still_serving(*client);
}

TEST(ServerErrors, EngineRefusalsBeforeHeadersArePlainErrors) {
  TestServerOptions options = default_test_options();
  options.engine.refuse_token = 88;
  options.engine.step_interval = std::chrono::milliseconds(5);
  TestServer server(options);
  auto client = server.client();
  // Even a streaming request gets a plain JSON error: submit fails before any header is sent.
  auto [status, text] =
      post_json(*client, "/v1/completions",
                Json{{"prompt", {88, 5}}, {"max_tokens", 2}, {"stream", true}}.dump());
  EXPECT_EQ(status, 503) << text;
  expect_error_body(text, 503, "ServiceUnavailableError", "the engine is full", "refused");

  // When the second prompt of a batch is refused, the first one is aborted, not left running.
  std::tie(status, text) =
      post_json(*client, "/v1/completions",
                Json{{"prompt", {{5, 6, 7}, {88, 5}}}, {"max_tokens", 200}}.dump());
  EXPECT_EQ(status, 503) << text;
  const auto submitted = server.engine().submitted();
  ASSERT_FALSE(submitted.empty());
  const std::string first_id = submitted.back().request_id;
  EXPECT_TRUE(server.engine().wait_until(
      [&] {
        const auto aborted = server.engine().aborted();
        return std::find(aborted.begin(), aborted.end(), first_id) != aborted.end();
      },
      std::chrono::seconds(5)));
  EXPECT_TRUE(server.engine().wait_until([&] { return server.engine().num_live() == 0; },
                                         std::chrono::seconds(5)));
  expect_still_serving(*client);
}

}  // namespace
}  // namespace ls::testing
