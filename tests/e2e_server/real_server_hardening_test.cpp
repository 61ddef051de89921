// Black-box tests of the real `longserve serve` binary on the bundled model, each with its own
// server process: SIGTERM and SIGINT drain a live stream to [DONE] and exit 0, and a bounded
// soak of hostile and careless traffic (large prompts and /tokenize bodies, small requests,
// streams and non-streaming requests abandoned by their clients) leaves RSS near its baseline,
// the thread and fd counts at their baseline and the KV gauges at zero.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "../server/raw_http.h"
#include "server_process.h"

namespace ls::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string long_stream_body() {
  return Json{{"model", "tiny-longctx"}, {"prompt", "Once upon a time"}, {"max_tokens", 3000},
              {"ignore_eos", true},      {"temperature", 0},                {"stream", true}}
      .dump();
}

double metric(int port, const std::string& name) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  if (!res) return std::nan("");
  const std::string series = name + "{model_name=\"tiny-longctx\",engine=\"0\"}";
  const std::string text = "\n" + res->body;
  const size_t pos = text.find("\n" + series + " ");
  if (pos == std::string::npos) return std::nan("");
  return std::stod(text.substr(pos + 1 + series.size() + 1));
}

TEST(RealServerSignals, SigtermAndSigintDrainALiveStreamAndExitZero) {
  for (const int sig : {SIGTERM, SIGINT}) {
    ServerProcess server({"--max-model-len", "4096", "--shutdown-timeout", "1"});
    ASSERT_GT(server.port(), 0);
    RawClient c(server.port());
    ASSERT_TRUE(c.send(post("/v1/completions", long_stream_body())));
    ASSERT_TRUE(c.readable(30s)) << "the stream did not start";
    std::optional<RawResponse> res;
    std::thread reader([&] { res = c.read_response(30s); });
    const int status = server.signal_and_wait(sig, 30);
    reader.join();
    ASSERT_NE(status, -1) << "signal " << sig << ": the server did not exit within 30 s";
    EXPECT_TRUE(WIFEXITED(status)) << "signal " << sig << " killed the server";
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0) << "signal " << sig;
    }
    ASSERT_TRUE(res) << "signal " << sig << ": the stream did not end with its last chunk";
    EXPECT_EQ(res->status, 200);
    const std::string tail = res->body.substr(res->body.size() - std::min<size_t>(
                                                                    res->body.size(), 14));
    EXPECT_EQ(tail, "data: [DONE]\n\n") << "signal " << sig;
  }
}

// One round of traffic; every client finishes or walks away before it returns.
void hostile_round(int port) {
  std::vector<std::thread> clients;
  // Large /tokenize bodies on separate connections, so on separate workers.
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([port] {
      RawClient c(port);
      std::string prompt(2u << 20, 'a');
      for (size_t j = 0; j < prompt.size(); j += 7) prompt[j] = ' ';
      ASSERT_TRUE(c.send(post("/tokenize", Json{{"prompt", prompt}}.dump())));
      auto res = c.read_response(120s);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200);
    });
  }
  // Prompts far past the context: refused (400) before they cost memory.
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([port] {
      RawClient c(port);
      std::string prompt(25u << 20, 'b');
      for (size_t j = 0; j < prompt.size(); j += 5) prompt[j] = ' ';
      ASSERT_TRUE(c.send(post("/v1/completions",
                              Json{{"model", "tiny-longctx"}, {"prompt", prompt}}.dump())));
      auto res = c.read_response(120s);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 400);
    });
  }
  // Small requests, streams cut after their first chunk, non-streaming requests abandoned.
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([port] {
      RawClient c(port);
      ASSERT_TRUE(c.send(post("/v1/completions",
                              Json{{"model", "tiny-longctx"}, {"prompt", "Hello"},
                                   {"max_tokens", 4}}.dump())));
      auto res = c.read_response(60s);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200);
    });
    clients.emplace_back([port] {
      RawClient c(port);
      ASSERT_TRUE(c.send(post("/v1/completions", long_stream_body())));
      EXPECT_TRUE(c.readable(30s));
    });
    clients.emplace_back([port] {
      RawClient c(port);
      Json body = Json::parse(long_stream_body());
      body["stream"] = false;
      ASSERT_TRUE(c.send(post("/v1/completions", body.dump())));
      std::this_thread::sleep_for(200ms);
    });
  }
  for (std::thread& t : clients) t.join();
}

// Waits until no request runs, no KV page is used, and the fd count stops at its floor.
void settle(const ServerProcess& server) {
  for (int i = 0; i < 300; ++i) {
    if (metric(server.port(), "vllm:num_requests_running") == 0 &&
        metric(server.port(), "vllm:kv_cache_usage_perc") == 0) {
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(500ms);
}

TEST(RealServerSoak, HostileTrafficLeavesNoGrowthNoThreadsNoFdsNoKvPages) {
  ServerProcess server({"--max-model-len", "4096", "--max-num-seqs", "16"});
  ASSERT_GT(server.port(), 0);
  // Warm-up round: first-use allocations (tokenizer caches, worker stacks) settle here.
  hostile_round(server.port());
  settle(server);
  const int64_t rss0 = server.rss_bytes();
  const int threads0 = server.threads();
  const int fds0 = server.open_fds();
  for (int round = 0; round < 2; ++round) hostile_round(server.port());
  settle(server);
  const int64_t rss1 = server.rss_bytes();
  std::printf("RSS after the warm-up round %lld MB, after two more %lld MB\n",
              static_cast<long long>(rss0 >> 20), static_cast<long long>(rss1 >> 20));
  // Before the fix every round of large requests left ~200 MB behind, in the heaps of the
  // worker threads that handled them.
  EXPECT_LE(rss1, rss0 + std::max<int64_t>(64 << 20, rss0 / 5))
      << "RSS grew from " << (rss0 >> 20) << " MB to " << (rss1 >> 20) << " MB";
  EXPECT_EQ(server.threads(), threads0);
  int fds = server.open_fds();
  for (int i = 0; i < 50 && fds != fds0; ++i) {
    std::this_thread::sleep_for(100ms);
    fds = server.open_fds();
  }
  EXPECT_EQ(fds, fds0);
  EXPECT_EQ(metric(server.port(), "vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(metric(server.port(), "vllm:num_requests_running"), 0);
  EXPECT_EQ(metric(server.port(), "vllm:num_requests_waiting"), 0);
  const int status = server.signal_and_wait(SIGTERM, 30);
  ASSERT_NE(status, -1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace ls::testing
