// Load and lifecycle: many concurrent streams, client disconnects, /metrics, shutdown.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "test_server.h"

namespace ls::testing {
namespace {

// The value of one sample line of the Prometheus text ("name{labels} value"); NaN when absent.
double metric_value(const std::string& text, const std::string& series) {
  const size_t pos = text.find("\n" + series + " ");
  if (pos == std::string::npos) return std::nan("");
  const size_t start = pos + 1 + series.size() + 1;
  return std::stod(text.substr(start, text.find('\n', start) - start));
}

std::string scrape(httplib::Client& client) {
  auto res = client.Get("/metrics");
  EXPECT_TRUE(res);
  if (!res) return {};
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  return "\n" + res->body;
}

TEST(ServerStream, SixtyFourConcurrentStreamsAllCompleteWithCorrectUsage) {
  TestServerOptions options = default_test_options();
  options.engine.step_interval = std::chrono::milliseconds(1);
  TestServer server(options);
  const Json& cases = expected()["completions"];
  constexpr int kStreams = 64;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      const Json& c = cases[static_cast<size_t>(i) % cases.size()];
      const int max_tokens = 8 + i % 9;
      auto client = server.client();
      auto res = client->Post("/v1/completions",
                              Json{{"prompt", c["prompt"]},
                                   {"max_tokens", max_tokens},
                                   {"stream", true},
                                   {"ignore_eos", true},
                                   {"stream_options", {{"include_usage", true}}}}
                                  .dump(),
                              "application/json");
      if (!res || res->status != 200) {
        failures[static_cast<size_t>(i)] = res ? res->body : httplib::to_string(res.error());
        return;
      }
      const std::vector<std::string> events = split_sse(res->body);
      int token_chunks = 0;
      Json usage;
      for (const std::string& event : events) {
        if (event == "[DONE]") continue;
        const Json chunk = Json::parse(event);
        if (chunk["choices"].empty()) {
          usage = chunk["usage"];
        } else {
          ++token_chunks;
        }
      }
      const int64_t prompt_tokens = static_cast<int64_t>(c["prompt_ids"].size());
      if (token_chunks == max_tokens && events.back() == "[DONE]" &&
          usage["completion_tokens"] == max_tokens && usage["prompt_tokens"] == prompt_tokens &&
          usage["total_tokens"] == prompt_tokens + max_tokens) {
        ++ok;
      } else {
        failures[static_cast<size_t>(i)] = res->body;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kStreams);
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_TRUE(failures[static_cast<size_t>(i)].empty())
        << i << ": " << failures[static_cast<size_t>(i)];
  }
  EXPECT_EQ(server.engine().submitted().size(), static_cast<size_t>(kStreams));
  EXPECT_EQ(server.engine().num_live(), 0);
}

TEST(ServerStream, ClientDisconnectMidStreamAbortsTheRequest) {
  TestServerOptions options = default_test_options();
  options.engine.step_interval = std::chrono::milliseconds(20);
  TestServer server(options);
  {
    auto client = server.client();
    int chunks = 0;
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.headers = {{"Content-Type", "application/json"}};
    request.body = Json{{"prompt", "Paris"}, {"max_tokens", 200}, {"stream", true}}.dump();
    request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      return ++chunks < 3;  // hang up after a few chunks
    };
    client->send(request);
    EXPECT_GE(chunks, 3);
  }
  ASSERT_EQ(server.engine().submitted().size(), 1u);
  const std::string id = server.engine().submitted()[0].request_id;
  EXPECT_TRUE(server.engine().wait_until(
      [&] {
        const auto aborted = server.engine().aborted();
        return std::find(aborted.begin(), aborted.end(), id) != aborted.end();
      },
      std::chrono::seconds(5)))
      << "the engine was never told to abort " << id;
  EXPECT_TRUE(server.engine().wait_until([&] { return server.engine().num_live() == 0; },
                                         std::chrono::seconds(5)));
}

TEST(ServerStream, ClientDisconnectWhileNoTokensFlowAbortsTheRequest) {
  // While the engine produces nothing (a long prefill, or a full queue), only the idle
  // writability check can notice the client has gone.
  TestServer server;
  server.engine().set_paused(true);
  {
    auto client = server.client(/*read_timeout_s=*/1);
    auto res = client->Post("/v1/completions",
                            Json{{"prompt", "Paris"}, {"max_tokens", 5}, {"stream", true}}.dump(),
                            "application/json");
    EXPECT_FALSE(res);  // the read timed out: the client gives up and closes the connection
  }
  ASSERT_EQ(server.engine().submitted().size(), 1u);
  const std::string id = server.engine().submitted()[0].request_id;
  EXPECT_TRUE(server.engine().wait_until(
      [&] {
        const auto aborted = server.engine().aborted();
        return std::find(aborted.begin(), aborted.end(), id) != aborted.end();
      },
      std::chrono::seconds(5)))
      << "the engine was never told to abort " << id;
  server.engine().set_paused(false);
}

TEST(ServerStream, MetricsFollowRequests) {
  TestServerOptions options = default_test_options();
  options.engine.step_interval = std::chrono::milliseconds(1);
  TestServer server(options);
  auto client = server.client();
  const std::string labels = R"({model_name="fake-model",engine="0")";
  std::string text = scrape(*client);
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
        "vllm:request_success_total", "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  EXPECT_EQ(
      metric_value(text, "vllm:request_success_total" + labels + R"(,finished_reason="length"})"),
      0.0);
  EXPECT_EQ(metric_value(text, "vllm:time_to_first_token_seconds_count" + labels + "}"), 0.0);

  const Json& c = expected()["completions"][0];
  const int64_t prompt_tokens = static_cast<int64_t>(c["prompt_ids"].size());
  for (int i = 0; i < 3; ++i) {
    auto [status, body] = post_json(*client, "/v1/completions",
                                    Json{{"prompt", c["prompt"]}, {"max_tokens", 4}}.dump());
    ASSERT_EQ(status, 200) << body;
  }
  text = scrape(*client);
  const std::string success_length =
      "vllm:request_success_total" + labels + R"(,finished_reason="length"})";
  EXPECT_EQ(metric_value(text, success_length), 3.0);
  EXPECT_EQ(metric_value(text, "vllm:time_to_first_token_seconds_count" + labels + "}"), 3.0);
  EXPECT_EQ(metric_value(text, "vllm:e2e_request_latency_seconds_count" + labels + "}"), 3.0);
  EXPECT_EQ(metric_value(text, "vllm:inter_token_latency_seconds_count" + labels + "}"), 9.0);
  EXPECT_EQ(metric_value(text, "vllm:request_time_per_output_token_seconds_count" + labels + "}"),
            3.0);
  EXPECT_EQ(metric_value(text, "vllm:request_generation_tokens_sum" + labels + "}"), 12.0);
  EXPECT_EQ(metric_value(text, "vllm:request_prompt_tokens_sum" + labels + "}"),
            3.0 * static_cast<double>(prompt_tokens));
  EXPECT_EQ(metric_value(text, "vllm:prompt_tokens_total" + labels + "}"),
            3.0 * static_cast<double>(prompt_tokens));
  EXPECT_EQ(metric_value(text, "vllm:generation_tokens_total" + labels + "}"), 12.0);
  // 4 generated tokens fall in the le="5.0" bucket of the 1-2-5 series, not in le="2.0".
  EXPECT_EQ(metric_value(text, "vllm:request_generation_tokens_bucket" + labels + R"(,le="2.0"})"),
            0.0);
  EXPECT_EQ(metric_value(text, "vllm:request_generation_tokens_bucket" + labels + R"(,le="5.0"})"),
            3.0);
  EXPECT_EQ(metric_value(text, "vllm:request_generation_tokens_bucket" + labels + R"(,le="+Inf"})"),
            3.0);
  EXPECT_EQ(metric_value(text, "vllm:num_requests_running" + labels + "}"), 0.0);

  // Requests the engine holds show up in the engine-backed gauges.
  server.engine().set_paused(true);
  std::thread waiting([&] {
    auto other = server.client();
    post_json(*other, "/v1/completions", Json{{"prompt", "Paris"}, {"max_tokens", 2}}.dump());
  });
  ASSERT_TRUE(server.engine().wait_until([&] { return server.engine().num_live() == 1; },
                                         std::chrono::seconds(5)));
  text = scrape(*client);
  EXPECT_EQ(metric_value(text, "vllm:num_requests_waiting" + labels + "}"), 1.0);
  server.engine().set_paused(false);
  waiting.join();
}

TEST(ServerStream, StopAbortsLiveStreamsAndReturns) {
  TestServerOptions options = default_test_options();
  options.engine.step_interval = std::chrono::milliseconds(10);
  TestServer server(options);
  std::string body;
  std::thread streamer([&] {
    auto client = server.client();
    auto res = client->Post("/v1/completions",
                            Json{{"prompt", "Paris"}, {"max_tokens", 240}, {"stream", true}}.dump(),
                            "application/json");
    if (res) body = res->body;
  });
  ASSERT_TRUE(server.engine().wait_until([&] { return server.engine().num_live() == 1; },
                                         std::chrono::seconds(5)));
  const std::string id = server.engine().submitted()[0].request_id;
  // stop() aborts the stream rather than waiting for its 240 tokens.
  server.stop();
  streamer.join();
  const auto aborted = server.engine().aborted();
  EXPECT_NE(std::find(aborted.begin(), aborted.end(), id), aborted.end());
  size_t chunks = 0;
  for (size_t pos = body.find("\"text\""); pos != std::string::npos;
       pos = body.find("\"text\"", pos + 1)) {
    ++chunks;
  }
  EXPECT_LT(chunks, 240u);
}

}  // namespace
}  // namespace ls::testing
