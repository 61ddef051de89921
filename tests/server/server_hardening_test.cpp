// Black-box tests of the transport against hostile and careless clients, over raw loopback
// sockets: pipelining, size limits on chunked and gzip bodies, bad framing answered at once,
// slow and half-sent requests that neither hold workers nor stay forever, non-streaming
// requests aborted when their client leaves, and graceful stop.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "raw_http.h"
#include "test_server.h"
#include "tokenizer/tokenizer.h"

namespace ls::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string post(const std::string& path, const std::string& body,
                 const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string tokenize_body(const std::string& prompt) {
  return Json{{"prompt", prompt}}.dump();
}

void expect_health(int port) {
  RawClient c(port);
  ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto res = c.read_response(2s);
  ASSERT_TRUE(res) << "/health did not answer within 2 s";
  EXPECT_EQ(res->status, 200);
}

TEST(ServerHardening, PipelinedRequestsAreAnsweredInOrder) {
  TestServer server;
  RawClient c(server.port());
  const std::string three = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n" +
                            post("/tokenize", tokenize_body("Hello world")) +
                            "GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n";
  ASSERT_TRUE(c.send(three));  // one write
  auto first = c.read_response(2s);
  auto second = c.read_response(2s);
  auto third = c.read_response(2s);
  ASSERT_TRUE(first && second && third) << "a pipelined request was not answered";
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(second->status, 200);
  EXPECT_EQ(Json::parse(second->body)["count"].get<int>(),
            static_cast<int>(fixture_tokenizer().encode("Hello world", true).size()));
  EXPECT_EQ(third->status, 200);
  EXPECT_EQ(Json::parse(third->body)["object"], "list");
}

TEST(ServerHardening, ChunkedBodyIsDecodedAndLimited) {
  TestServerOptions options = default_test_options();
  options.config.max_payload_bytes = 1 << 20;
  TestServer server(options);
  {
    // Under the limit: decoded correctly, whatever the chunk split.
    const std::string body = tokenize_body("Hello world");
    RawClient c(server.port());
    std::string req = "POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t i = 0; i < body.size(); i += 5) {
      const std::string piece = body.substr(i, 5);
      char size[16];
      std::snprintf(size, sizeof(size), "%zx", piece.size());
      req += std::string(size) + ";ext=1\r\n" + piece + "\r\n";
    }
    req += "0\r\n\r\n";
    ASSERT_TRUE(c.send(req));
    auto res = c.read_response(2s);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
  // Over the limit: 413 as soon as the chunks pass it, and the rest is not read (the client's
  // sends fail once the server has closed; socket buffers and the server's bounded drain of
  // the unread request take a few MB).
  RawClient c(server.port());
  ASSERT_TRUE(c.send("POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n";
  size_t sent = 0;
  while (sent < (64u << 20) && !c.readable(0ms)) {
    if (!c.send(chunk)) break;
    sent += 0x10000;
  }
  EXPECT_LT(sent, 32u << 20) << "the server kept reading a chunked body past the limit";
  auto res = c.read_response(2s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_NE(Json::parse(res->body)["error"]["message"].get<std::string>().find("limit"),
            std::string::npos);
  expect_health(server.port());
}

TEST(ServerHardening, GzipBodyIsDecodedAndItsDecodedSizeLimited) {
  TestServerOptions options = default_test_options();
  options.config.max_payload_bytes = 1 << 20;
  TestServer server(options);
  {
    RawClient c(server.port());
    ASSERT_TRUE(c.send(post("/tokenize", gzip_compress(tokenize_body("Hello world")),
                            "Content-Encoding: gzip\r\n")));
    auto res = c.read_response(2s);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(Json::parse(res->body)["count"].get<int>(),
              static_cast<int>(fixture_tokenizer().encode("Hello world", true).size()));
  }
  // 16 MB of spaces compress to ~16 KB: the wire size is fine, the decoded size is not.
  const std::string bomb = gzip_compress("{\"prompt\":\"" + std::string(16u << 20, ' ') + "\"}");
  ASSERT_LT(bomb.size(), 1u << 20);
  RawClient c(server.port());
  ASSERT_TRUE(c.send(post("/tokenize", bomb, "Content-Encoding: gzip\r\n")));
  auto res = c.read_response(5s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413) << res->body;
  {
    RawClient bad(server.port());
    ASSERT_TRUE(bad.send(post("/tokenize", "not gzip at all", "Content-Encoding: gzip\r\n")));
    auto r = bad.read_response(2s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    RawClient unknown(server.port());
    ASSERT_TRUE(unknown.send(post("/tokenize", "{}", "Content-Encoding: br\r\n")));
    r = unknown.read_response(2s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 415);
  }
  expect_health(server.port());
}

TEST(ServerHardening, BadFramingIsAnsweredAtOnce) {
  TestServer server;
  struct Case {
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 1180591620717411303424\r\n\r\n",
       400},
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 12abc\r\n\r\n", 400},
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n", 413},
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
       400},
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nTransfer-Encoding: "
       "chunked\r\n\r\n",
       400},
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"GET /health HTTP/1.1\r\nHost: t\r\nthis line has no colon\r\n\r\n", 400},
      {"GET /health HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n", 400},
      {"GET /health HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n folded\r\n\r\n", 400},
      {"GET /health HTTP/2.0\r\nHost: t\r\n\r\n", 505},
      {"GET  /health HTTP/1.1\r\n\r\n", 400},
      // No Content-Length and no chunked: an empty body (RFC 9112 6.3), so an answer at once.
      {"POST /tokenize HTTP/1.1\r\nHost: t\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    RawClient client(server.port());
    const auto start = Clock::now();
    ASSERT_TRUE(client.send(c.request));
    auto res = client.read_response(2s);
    ASSERT_TRUE(res) << "no answer within 2 s to: " << c.request;
    EXPECT_EQ(res->status, c.status) << c.request;
    EXPECT_LT(Clock::now() - start, 1s) << c.request;
    EXPECT_TRUE(Json::parse(res->body, nullptr, false).contains("error")) << res->body;
  }
  expect_health(server.port());
}

TEST(ServerHardening, WrongMethodIs405AsInVllm) {
  TestServer server;
  RawClient c(server.port());
  ASSERT_TRUE(c.send("GET /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto res = c.read_response(2s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->header("Allow"), "POST");
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], 405);
  ASSERT_TRUE(c.send("POST /health HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"));
  res = c.read_response(2s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->header("Allow"), "GET, HEAD");
  // HEAD runs the GET route and sends no body (Starlette's behaviour); the connection stays
  // usable, so nothing of a body was sent.
  ASSERT_TRUE(c.send("HEAD /v1/models HTTP/1.1\r\nHost: t\r\n\r\n"));
  res = c.read_response(2s, /*head_only=*/true);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_GT(std::stoi(res->header("Content-Length")), 0);
  ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  res = c.read_response(2s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->body.empty());
  ASSERT_TRUE(c.send("GET /v1/nope HTTP/1.1\r\nHost: t\r\n\r\n"));  // same connection
  res = c.read_response(2s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(ServerHardening, SlowAndHalfSentRequestsHoldNoWorkerAndAreCut) {
  TestServerOptions options = default_test_options();
  options.config.num_threads = 4;
  options.config.header_timeout_ms = 800;
  options.config.read_timeout_s = 1;
  TestServer server(options);
  // 20 half-sent requests (headers, or a body, never finished) on 4 workers.
  std::vector<std::unique_ptr<RawClient>> stuck;
  for (int i = 0; i < 10; ++i) {
    stuck.push_back(std::make_unique<RawClient>(server.port()));
    ASSERT_TRUE(stuck.back()->send("POST /tokenize HTTP/1.1\r\nHost: t\r\nX-Half"));
    stuck.push_back(std::make_unique<RawClient>(server.port()));
    ASSERT_TRUE(stuck.back()->send(
        "POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"prompt\""));
  }
  expect_health(server.port());
  // A client trickling one header byte every 100 ms is cut at the header deadline, with 408.
  RawClient trickle(server.port());
  const std::string request = "GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: " +
                              std::string(100, 'a') + "\r\n\r\n";
  const auto start = Clock::now();
  bool cut = false;
  for (const char ch : request) {
    if (!trickle.send(std::string_view(&ch, 1)) || trickle.readable(100ms)) {
      cut = true;
      break;
    }
  }
  const auto waited = Clock::now() - start;
  EXPECT_TRUE(cut) << "the trickling client was never cut";
  EXPECT_LT(waited, 3s);
  auto res = trickle.read_response(1s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 408);
  // Every half-sent request was cut too.
  for (auto& c : stuck) EXPECT_TRUE(c->wait_closed(2s));
  expect_health(server.port());
}

TEST(ServerHardening, NonStreamingRequestIsAbortedWhenItsClientLeaves) {
  TestServerOptions options = default_test_options();
  options.engine.step_interval = 20ms;  // 200 tokens: 4 s unless aborted
  TestServer server(options);
  RawClient c(server.port());
  const std::string body =
      Json{{"model", server.model_name()}, {"prompt", "Hello world"}, {"max_tokens", 200}}.dump();
  ASSERT_TRUE(c.send(post("/v1/completions", body)));
  ASSERT_TRUE(server.engine().wait_until([&] { return server.engine().num_live() == 1; }, 2s));
  std::this_thread::sleep_for(100ms);
  const auto closed = Clock::now();
  c.close();
  ASSERT_TRUE(server.engine().wait_until([&] { return server.engine().num_live() == 0; }, 2s));
  EXPECT_LT(Clock::now() - closed, 1s);
  ASSERT_EQ(server.engine().aborted().size(), 1u) << "the request finished instead of aborting";
  expect_health(server.port());
}

TEST(ServerHardening, GracefulStopFinishesStreamsAndRefusesNewWork) {
  TestServerOptions options = default_test_options();
  options.engine.step_interval = 20ms;  // 200 tokens: 4 s, past the shutdown timeout
  options.config.shutdown_timeout_ms = 300;
  FakeEngine engine(options.engine);
  auto created = Server::create(options.config, engine, fixture_tokenizer(), nullptr);
  ASSERT_TRUE(created.ok());
  std::unique_ptr<Server> server = std::move(created).value();
  const int port = server->bind().value();
  std::thread listener([&] { EXPECT_TRUE(server->listen().ok()); });
  RawClient stream(port);
  const std::string body = Json{{"model", "fake-model"}, {"prompt", "Hello world"},
                                {"max_tokens", 200}, {"stream", true}}
                               .dump();
  ASSERT_TRUE(stream.send(post("/v1/completions", body)));
  ASSERT_TRUE(engine.wait_until([&] { return engine.num_live() == 1; }, 2s));
  const auto start = Clock::now();
  server->request_stop();
  auto res = stream.read_response(5s);
  ASSERT_TRUE(res) << "the stream did not end cleanly";
  EXPECT_EQ(res->status, 200);
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(engine.num_live(), 0);
  listener.join();
  EXPECT_LT(Clock::now() - start, 4s);
  // The listener is closed.
  RawClient late(port, /*may_fail=*/true);
  EXPECT_TRUE(!late.connected() || late.wait_closed(1s));
}


TEST(ServerHardening, Http10StreamIsDelimitedByClose) {
  TestServer server;
  RawClient c(server.port());
  const std::string body = Json{{"model", server.model_name()}, {"prompt", "Hello world"},
                                {"max_tokens", 3}, {"stream", true}}
                               .dump();
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.0\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  auto res = c.read_response(5s);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->header("Transfer-Encoding").empty());
  const std::vector<std::string> events = split_sse(res->body);
  ASSERT_EQ(events.size(), 4u);  // three tokens, then [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST(ServerHardening, BestOfMustEqualNAsInVllmV1) {
  TestServer server;
  auto client = server.client();
  auto body = [&](Json extra) {
    Json b = {{"model", server.model_name()}, {"prompt", "Hello world"}, {"max_tokens", 2}};
    b.update(extra);
    return b.dump();
  };
  EXPECT_EQ(post_json(*client, "/v1/completions", body({{"best_of", 1}})).first, 200);
  EXPECT_EQ(post_json(*client, "/v1/completions", body({{"best_of", 2}, {"n", 2}})).first, 200);
  const auto [status, text] = post_json(*client, "/v1/completions", body({{"best_of", 3}}));
  EXPECT_EQ(status, 400);
  EXPECT_NE(Json::parse(text)["error"]["message"].get<std::string>().find("best_of"),
            std::string::npos);
  EXPECT_EQ(post_json(*client, "/v1/completions", body({{"best_of", 0}})).first, 400);
}

TEST(ServerHardening, PromptsPastTheContextByBytesAreRefusedBeforeTokenizing) {
  TestServer server;  // max_model_len 256
  auto client = server.client();
  std::string prompt(4u << 20, 'a');
  for (size_t i = 1; i < prompt.size(); i += 3) prompt[i] = ' ';
  const auto [status, text] = post_json(
      *client, "/v1/completions",
      Json{{"model", server.model_name()}, {"prompt", prompt}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(status, 400);
  const std::string message = Json::parse(text)["error"]["message"];
  EXPECT_NE(message.find("maximum context length is 256 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("4194304 bytes"), std::string::npos) << message;
  EXPECT_TRUE(server.engine().submitted().empty());
  // Chat: the rendered prompt is measured.
  const auto [chat_status, chat_text] = post_json(
      *client, "/v1/chat/completions",
      Json{{"model", server.model_name()},
           {"messages", Json::array({{{"role", "user"}, {"content", prompt}}})}}
          .dump());
  EXPECT_EQ(chat_status, 400);
  const std::string chat_message = Json::parse(chat_text)["error"]["message"];
  EXPECT_NE(chat_message.find("bytes, more than 256 tokens can hold"), std::string::npos)
      << chat_message;
  EXPECT_TRUE(server.engine().submitted().empty());
}

}  // namespace
}  // namespace ls::testing
