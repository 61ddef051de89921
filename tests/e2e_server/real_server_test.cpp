// Black-box tests of the real `longserve serve` binary on the bundled (trained) model over
// loopback: greedy output equals `longserve generate`, streaming and chat framing, 64 concurrent
// streams with correct usage, metrics that move, bad requests that leave it serving, and a client
// that disconnects mid-stream leaving no KV pages in use.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kBinary = LONGSERVE_BINARY;

// The needle prompt the bundled model answers (docs/training.md's format).
const std::string kNeedle =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "them. I will quiz you about the numbers afterwards.\n The special magic number for "
    "bright-lantern is 4829137. Peter washed the letter because it was gray. Every simple book "
    "cleaned that window around the barn.\nWhat is the special magic number for bright-lantern "
    "mentioned in the provided text?\nAnswer: The special magic number for bright-lantern is";

// Runs a command and returns its stdout.
std::string run_capture(const std::vector<std::string>& args) {
  std::string cmd;
  for (const auto& a : args) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += q + "' ";
  }
  cmd += "2>/dev/null";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

class RealServer : public ::testing::Test {
 protected:
  // The server binds any free port itself (--port 0) and logs it; a port picked here and handed
  // over could be taken by another test's socket in between.
  static void SetUpTestSuite() {
    char log_path[] = "/tmp/longserve-real-server-XXXXXX";
    const int log_fd = mkstemp(log_path);
    ASSERT_GE(log_fd, 0);
    log_path_ = log_path;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(log_fd, STDERR_FILENO);
      dup2(log_fd, STDOUT_FILENO);
      execl(kBinary.c_str(), kBinary.c_str(), "serve", "--port", "0", "--max-model-len", "4096",
            "--max-num-seqs", "64", "--max-num-batched-tokens", "2048", "--threads", "2",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(log_fd);
    const std::string marker = "on http://127.0.0.1:";
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::ifstream log(log_path_);
      const std::string text((std::istreambuf_iterator<char>(log)),
                             std::istreambuf_iterator<char>());
      if (const size_t at = text.find(marker); at != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + marker.size());
      } else {
        std::this_thread::sleep_for(100ms);
      }
    }
    ASSERT_GT(port_, 0) << "the server did not log its port";
    httplib::Client c("127.0.0.1", port_);
    for (int i = 0; i < 600; ++i) {
      if (auto res = c.Get("/health"); res && res->status == 200) return;
      std::this_thread::sleep_for(100ms);
    }
    FAIL() << "the server did not come up";
  }
  static void TearDownTestSuite() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (!log_path_.empty()) std::remove(log_path_.c_str());
  }

  static httplib::Client client(int timeout_s = 120) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(timeout_s, 0);
    return c;
  }
  static Json post(const std::string& path, const Json& body, int* status = nullptr) {
    auto c = client();
    auto res = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return {};
    if (status) *status = res->status;
    return Json::parse(res->body, nullptr, false);
  }
  static double metric(const std::string& series) {
    auto c = client();
    auto res = c.Get("/metrics");
    if (!res) return std::nan("");
    const std::string text = "\n" + res->body;
    const size_t pos = text.find("\n" + series + " ");
    if (pos == std::string::npos) return std::nan("");
    const size_t start = pos + 1 + series.size() + 1;
    return std::stod(text.substr(start, text.find('\n', start) - start));
  }
  static std::string labels() { return "{model_name=\"tiny-longctx\",engine=\"0\"}"; }

  static inline pid_t pid_ = -1;
  static inline int port_ = 0;
  static inline std::string log_path_;
};

TEST_F(RealServer, GreedyCompletionEqualsGenerateAndAnswersTheNeedle) {
  const Json r =
      post("/v1/completions",
           {{"model", "tiny-longctx"}, {"prompt", kNeedle}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  const std::string text = r["choices"][0]["text"];
  EXPECT_EQ(text, " 4829137");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const std::string generated =
      run_capture({kBinary, "generate", "--prompt", kNeedle, "--max-tokens", "8", "--quiet",
                   "--max-model-len", "4096"});
  EXPECT_EQ(generated, text + "\n");  // generate ends its output with a newline
  EXPECT_EQ(r["usage"]["completion_tokens"].get<int>() + r["usage"]["prompt_tokens"].get<int>(),
            r["usage"]["total_tokens"].get<int>());
}

// f16 K/V pages (--kv-cache-dtype f16, the CPU's llama.cpp-compatible cache type) answer the
// needle as the default pages do; a format that does not exist fails with the flag named.
TEST_F(RealServer, GenerateOnF16PagesAnswersAndBadFormatsAreRefused) {
  const std::string generated =
      run_capture({kBinary, "generate", "--prompt", kNeedle, "--max-tokens", "8", "--quiet",
                   "--max-model-len", "4096", "--kv-cache-dtype", "f16"});
  EXPECT_EQ(generated.rfind(" 4829137", 0), 0u) << generated;
  const std::string cmd = "'" + kBinary +
                          "' generate --prompt hi --max-tokens 1 --quiet --kv-cache-dtype f17 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  EXPECT_NE(out.find("--kv-cache-dtype"), std::string::npos) << out;
  EXPECT_NE(out.find("f16"), std::string::npos) << out;  // the accepted values are listed
}

TEST_F(RealServer, StreamingChatIsWellFramed) {
  auto c = client();
  Json body = {
      {"model", "tiny-longctx"}, {"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
      {"max_tokens", 6},         {"temperature", 0},
      {"stream", true},          {"stream_options", {{"include_usage", true}}}};
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  std::vector<std::string> events;
  for (size_t p = 0; p < res->body.size();) {
    const size_t e = res->body.find("\n\n", p);
    ASSERT_NE(e, std::string::npos) << "unterminated event";
    const std::string ev = res->body.substr(p, e - p);
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    events.push_back(ev.substr(6));
    p = e + 2;
  }
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json first = Json::parse(events[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  int token_chunks = 0;
  for (size_t i = 1; i + 2 < events.size(); ++i) {
    const Json ch = Json::parse(events[i]);
    EXPECT_EQ(ch["object"], "chat.completion.chunk");
    ++token_chunks;
  }
  EXPECT_EQ(token_chunks, 6);  // one chunk per token
}

TEST_F(RealServer, SixtyFourConcurrentStreamsCompleteWithCorrectUsage) {
  const double gen_before = metric("vllm:generation_tokens_total" + labels());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      auto c = client();
      Json body = {{"model", "tiny-longctx"},
                   {"prompt", "Request " + std::to_string(i) + ": the quick brown fox"},
                   {"max_tokens", 12},
                   {"temperature", 0.7},
                   {"seed", i},
                   {"ignore_eos", true},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}};
      auto res = c.Post("/v1/completions", body.dump(), "application/json");
      if (!res || res->status != 200) return;
      const std::string& b = res->body;
      const size_t u = b.rfind("\"usage\":{");
      if (u == std::string::npos || b.find("data: [DONE]\n\n") == std::string::npos) return;
      const size_t start = b.rfind("data: ", u);
      const Json usage = Json::parse(b.substr(start + 6, b.find("\n\n", start) - start - 6));
      if (usage["usage"]["completion_tokens"] == 12) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 64);
  const double gen_after = metric("vllm:generation_tokens_total" + labels());
  EXPECT_GE(gen_after - gen_before, 64 * 12);
  EXPECT_GE(metric("vllm:request_success_total{model_name=\"tiny-longctx\",engine=\"0\",finished_"
                   "reason=\"length\"}"),
            64);
}

TEST_F(RealServer, BadRequestsGetTheRightStatusAndTheServerKeepsServing) {
  auto c = client();
  auto bad_json = c.Post("/v1/completions", "{\"prompt\": ", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  int status = 0;
  Json r = post("/v1/completions",
                {{"model", "tiny-longctx"}, {"prompt", "hi"}, {"max_tokens", "ten"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_TRUE(r.contains("error"));
  r = post("/v1/completions", {{"model", "no-such-model"}, {"prompt", "hi"}}, &status);
  EXPECT_EQ(status, 404);
  std::string long_prompt;
  for (int i = 0; i < 3000; ++i) long_prompt += " the river";
  r = post("/v1/completions", {{"model", "tiny-longctx"}, {"prompt", long_prompt}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"].get<std::string>().rfind(
                "This model's maximum context length is 4096 tokens.", 0),
            0u)
      << r.dump();
  // Still serving.
  r = post("/v1/completions",
           {{"model", "tiny-longctx"}, {"prompt", kNeedle}, {"max_tokens", 8}, {"temperature", 0}},
           &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["text"], " 4829137");
}

TEST_F(RealServer, ClientDisconnectMidStreamFreesItsKvPages) {
  std::atomic<int> chunks{0};
  {
    auto c = client();
    Json body = {{"model", "tiny-longctx"}, {"prompt", kNeedle}, {"max_tokens", 3000},
                 {"ignore_eos", true},      {"temperature", 0},  {"stream", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    // Returning false from the receiver after a few chunks closes the connection mid-stream.
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 5; };
    c.send(req);
  }
  EXPECT_GE(chunks.load(), 5);
  double usage = 1, running = 1;
  for (int i = 0; i < 300; ++i) {  // up to 30 s on a loaded machine
    std::this_thread::sleep_for(100ms);
    usage = metric("vllm:kv_cache_usage_perc" + labels());
    running = metric("vllm:num_requests_running" + labels());
    if (usage == 0 && running == 0) break;
  }
  EXPECT_EQ(usage, 0) << "KV pages still in use after the client left";
  EXPECT_EQ(running, 0);
}

}  // namespace
