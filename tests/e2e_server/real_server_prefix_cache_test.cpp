// The real `longserve serve` with --enable-prefix-caching (CPU backend, bundled model): a repeated
// prompt is answered as the first time while its whole pages come from the cache, and
// usage.prompt_tokens_details.cached_tokens (completions, chat, the streamed usage chunk) and
// vLLM's prefix-cache counters in /metrics say how many tokens were found.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "server_process.h"

namespace ls::testing {
namespace {

using Json = nlohmann::json;

const std::string kDocument =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "them. I will quiz you about the numbers afterwards.\n The special magic number for "
    "bright-lantern is 4829137. Peter washed the letter because it was gray. Every simple book "
    "cleaned that window around the barn. The special magic number for quiet-river is 5512093. "
    "A tall man carried the red box across the field while the dog slept under the old tree.\n";
const std::string kQuestion =
    "What is the special magic number for bright-lantern mentioned in the provided text?\nAnswer: "
    "The special magic number for bright-lantern is";

Json post(int port, const std::string& path, const Json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto res = c.Post(path, body.dump(), "application/json");
  if (!res || res->status != 200) return Json();
  return Json::parse(res->body);
}

// The usage object of the last data chunk of an SSE stream that asked for usage.
Json streamed_usage(int port, const Json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!res || res->status != 200) return Json();
  Json usage;
  size_t at = 0;
  while ((at = res->body.find("data: {", at)) != std::string::npos) {
    const size_t end = res->body.find("\n\n", at);
    const Json chunk = Json::parse(res->body.substr(at + 6, end - at - 6));
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    at = end;
  }
  return usage;
}

double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  const size_t space = text.find("} ", at);
  return std::stod(text.substr(space + 2, text.find('\n', space) - space - 2));
}

int64_t cached(const Json& usage) {
  if (!usage.is_object() || !usage["prompt_tokens_details"].is_object()) return -1;
  return usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

TEST(RealServerPrefixCache, RepeatedPromptsHitAndSayHowMuch) {
  ServerProcess server({"--max-model-len", "2048", "--max-num-seqs", "4",
                        "--enable-prefix-caching"});
  ASSERT_GT(server.port(), 0);
  const int port = server.port();
  const Json body = {{"prompt", kDocument + kQuestion}, {"max_tokens", 8}, {"temperature", 0}};
  const Json first = post(port, "/v1/completions", body);
  ASSERT_TRUE(first.is_object());
  const int64_t prompt_tokens = first["usage"]["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(cached(first["usage"]), 0);
  const Json second = post(port, "/v1/completions", body);
  ASSERT_TRUE(second.is_object());
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  const int64_t hit = cached(second["usage"]);
  EXPECT_GT(hit, 0);
  EXPECT_LT(hit, prompt_tokens);  // the last token is always computed
  EXPECT_GT(hit + 64, prompt_tokens - 1);  // whole pages of at most 64 tokens

  // Chat: the document as a system message; the second turn's usage chunk reports the hit.
  const Json chat = {{"messages", Json::array({{{"role", "system"}, {"content", kDocument}},
                                               {{"role", "user"}, {"content", kQuestion}}})},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  const Json chat_first = streamed_usage(port, chat);
  const Json chat_second = streamed_usage(port, chat);
  ASSERT_TRUE(chat_second.is_object());
  EXPECT_GE(cached(chat_first), 0);
  EXPECT_GT(cached(chat_second), 0);
  EXPECT_LT(cached(chat_second), chat_second["prompt_tokens"].get<int64_t>());
  Json plain_chat = chat;
  plain_chat["stream"] = false;
  plain_chat.erase("stream_options");
  const Json chat_third = post(port, "/v1/chat/completions", plain_chat);
  ASSERT_TRUE(chat_third.is_object());
  EXPECT_EQ(cached(chat_third["usage"]), cached(chat_second));

  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const std::string text = "\n" + res->body;
  const int64_t prompts = 2 * prompt_tokens + 3 * chat_second["prompt_tokens"].get<int64_t>();
  const int64_t hits = hit + cached(chat_first) + 2 * cached(chat_second);
  EXPECT_EQ(metric(text, "vllm:prefix_cache_queries_total"), static_cast<double>(prompts));
  EXPECT_EQ(metric(text, "vllm:prefix_cache_hits_total"), static_cast<double>(hits));
  EXPECT_EQ(metric(text, "vllm:prompt_tokens_cached_total"), static_cast<double>(hits));
}

TEST(RealServerPrefixCache, OffReportsNoDetails) {
  ServerProcess server({"--max-model-len", "2048", "--max-num-seqs", "4",
                        "--no-enable-prefix-caching"});
  ASSERT_GT(server.port(), 0);
  const Json body = {{"prompt", kQuestion}, {"max_tokens", 2}, {"temperature", 0}};
  const Json first = post(server.port(), "/v1/completions", body);
  ASSERT_TRUE(first.is_object());
  EXPECT_TRUE(first["usage"]["prompt_tokens_details"].is_null());
}

}  // namespace
}  // namespace ls::testing
