// Black-box tests of `longserve serve --device cuda` failing well: out of memory at start-up (a
// KV cache larger than the GPU, a memory share too small, a pool too small for one full-length
// request), requests too long for the context, and a CUDA error inside a step. Each starts the real binary
// on the Llama-3-style fixture model. They need a GPU: without one they skip (CI has none; the
// GPU machine runs them through scripts/gpu-check.sh, where no CUDA test may skip).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kBinary = LONGSERVE_BINARY;
const std::string kModel = std::string(LONGSERVE_SOURCE_DIR) + "/tests/fixtures/models/llama3";

bool have_gpu() {
  return std::system("nvidia-smi -L >/dev/null 2>&1") == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// One `longserve serve` process with its log in a temporary file.
class ServeProcess {
 public:
  ServeProcess(const std::vector<std::string>& extra_args,
               const std::vector<std::pair<std::string, std::string>>& env = {},
               const std::string& model = kModel) {
    char path[] = "/tmp/longserve-gpu-server-XXXXXX";
    const int fd = mkstemp(path);
    log_path_ = path;
    std::vector<std::string> args = {kBinary, "serve", "--device", "cuda", "--model", model,
                                     "--port", "0", "--max-model-len", "4096"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, STDERR_FILENO);
      dup2(fd, STDOUT_FILENO);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kBinary.c_str(), argv.data());
      _exit(127);
    }
    close(fd);
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(log_path_.c_str());
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // Waits until the server listens (returns its port) or the process ends (returns 0).
  int wait_listening(std::chrono::seconds limit = 180s) {
    const std::string marker = "on http://127.0.0.1:";
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string text = read_file(log_path_);
      if (const size_t at = text.find(marker); at != std::string::npos) {
        return std::atoi(text.c_str() + at + marker.size());
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        status_ = status;
        return 0;
      }
      std::this_thread::sleep_for(100ms);
    }
    return 0;
  }
  // Waits for the process to end; false if it is still running after `limit`.
  bool wait_exit(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!exited_ && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        status_ = status;
      } else {
        std::this_thread::sleep_for(100ms);
      }
    }
    return exited_;
  }
  bool exited() const { return exited_; }
  int status() const { return status_; }
  std::string log() const { return read_file(log_path_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string log_path_;
};

Json post(int port, const Json& body, int* status) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  if (!res) {
    *status = -1;
    return {};
  }
  *status = res->status;
  return Json::parse(res->body, nullptr, false);
}

bool healthy(int port) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/health");
  return res && res->status == 200;
}

// Prompt token ids of an exact length (ids inside the fixture vocabulary).
Json prompt_ids(int n) {
  Json ids = Json::array();
  for (int i = 0; i < n; ++i) ids.push_back(100 + (i * 37) % 200);
  return ids;
}

// A start-up that cannot get its memory ends with exit code 1 and one clear message, not a
// signal or a hang.
void expect_clean_startup_failure(ServeProcess& p, const std::string& what) {
  EXPECT_EQ(p.wait_listening(), 0) << what << ": the server started\n" << p.log();
  ASSERT_TRUE(p.wait_exit(60s)) << what << ": the server neither started nor exited";
  EXPECT_TRUE(WIFEXITED(p.status())) << what << ": ended by signal " << WTERMSIG(p.status())
                                     << "\n" << p.log();
  EXPECT_EQ(WEXITSTATUS(p.status()), 1) << what << "\n" << p.log();
  const std::string log = p.log();
  EXPECT_NE(log.find("error"), std::string::npos) << what << "\n" << log;
  EXPECT_EQ(log.find("Aborted"), std::string::npos) << what << "\n" << log;
}

// The Llama-3-style fixture with an MLP so wide that one projection (64 x 1.2e9 bf16, 154 GB)
// is larger than any GPU's memory: a sparse safetensors file, so it takes no disk.
std::string make_oversized_model() {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/longserve-huge-model-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    fs::copy_file(kModel + "/" + f, dir + "/" + f);
  }
  constexpr int64_t kWide = 1200000000;
  std::string config = read_file(kModel + "/config.json");
  const std::string from = "\"intermediate_size\": 160";
  config.replace(config.find(from), from.size(), "\"intermediate_size\": " + std::to_string(kWide));
  std::ofstream(dir + "/config.json") << config;

  const std::string src = read_file(kModel + "/model.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, src.data(), 8);
  const Json header = Json::parse(src.substr(8, header_len));
  Json out = Json::object();
  std::vector<std::pair<int64_t, std::string>> data;  // (offset in the new data region, bytes)
  int64_t offset = 0;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    Json nt = t;
    const bool wide = name.find(".mlp.") != std::string::npos;
    int64_t bytes = t["data_offsets"][1].get<int64_t>() - t["data_offsets"][0].get<int64_t>();
    if (wide) {
      const bool down = name.find("down_proj") != std::string::npos;
      nt["shape"] = down ? Json::array({64, kWide}) : Json::array({kWide, 64});
      bytes = 64 * kWide * 2;
    } else {
      data.emplace_back(offset, src.substr(8 + header_len + t["data_offsets"][0].get<int64_t>(),
                                           static_cast<size_t>(bytes)));
    }
    nt["data_offsets"] = Json::array({offset, offset + bytes});
    out[name] = nt;
    offset += bytes;
  }
  std::string text = out.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string path = dir + "/model.safetensors";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const uint64_t len = text.size();
  bool ok = fd >= 0 && write(fd, &len, 8) == 8 &&
            write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  for (const auto& [at, bytes] : data) {
    ok = ok && pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(8 + len + at)) ==
                   static_cast<ssize_t>(bytes.size());
  }
  ok = ok && ftruncate(fd, static_cast<off_t>(8 + len + offset)) == 0;
  if (fd >= 0) close(fd);
  return ok ? dir : std::string();
}

TEST(GpuServer, ModelLargerThanTheGpuFailsAtStartupWithAClearError) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const std::string dir = make_oversized_model();
  ASSERT_FALSE(dir.empty()) << "could not write the sparse model";
  {
    ServeProcess p({}, {}, dir);
    expect_clean_startup_failure(p, "a 900 GB model");
    EXPECT_NE(p.log().find("memory"), std::string::npos) << p.log();
  }
  std::filesystem::remove_all(dir);
}

TEST(GpuServer, KvCacheLargerThanTheGpuFailsAtStartupWithAClearError) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  ServeProcess p({"--kv-cache-bytes", "4000000000000"});  // 4 TB
  expect_clean_startup_failure(p, "--kv-cache-bytes 4 TB");
  EXPECT_NE(p.log().find("memory"), std::string::npos) << p.log();
}

TEST(GpuServer, TooSmallMemoryUtilizationFailsAtStartupWithAClearError) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  ServeProcess p({"--gpu-memory-utilization", "0.001"});
  expect_clean_startup_failure(p, "--gpu-memory-utilization 0.001");
  EXPECT_NE(p.log().find("gpu-memory-utilization"), std::string::npos) << p.log();
}

TEST(GpuServer, FullMemoryUtilizationStartsOrFailsCleanly) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  ServeProcess p({"--gpu-memory-utilization", "1.0", "--max-num-seqs", "4"});
  const int port = p.wait_listening();
  if (port == 0) {
    expect_clean_startup_failure(p, "--gpu-memory-utilization 1.0");
    return;
  }
  int status = 0;
  const Json r = post(port, {{"prompt", prompt_ids(50)}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

TEST(GpuServer, KvPoolTooSmallForOneFullLengthRequestFailsAtStartup) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  ServeProcess p({"--kv-cache-bytes", "100000"});
  expect_clean_startup_failure(p, "--kv-cache-bytes 100000");
  EXPECT_NE(p.log().find("--max-model-len"), std::string::npos) << p.log();
}

TEST(GpuServer, RequestsPastTheContextAreRefusedAndTheServerKeepsServing) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  ServeProcess p({"--max-num-seqs", "2"});
  const int port = p.wait_listening();
  ASSERT_GT(port, 0) << p.log();
  int status = 0;
  Json r = post(port, {{"prompt", prompt_ids(5000)}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_NE(r.dump().find("maximum context length"), std::string::npos) << r.dump();
  r = post(port, {{"prompt", prompt_ids(4000)}, {"max_tokens", 200}}, &status);
  EXPECT_EQ(status, 400) << r.dump();
  r = post(port, {{"prompt", prompt_ids(20)}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"].get<int>(), 4) << r.dump();
  EXPECT_TRUE(healthy(port));
}

TEST(GpuServer, CudaErrorInsideAStepFailsThatRequestOnlyAndTheServerKeepsServing) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  ServeProcess p({"--max-num-seqs", "4"}, {{"LONGSERVE_CUDA_FAULT_ATTENTION_TOKENS", "37"}});
  const int port = p.wait_listening();
  ASSERT_GT(port, 0) << p.log();
  int status = 0;
  // Prefill of exactly 37 tokens meets the injected fault.
  Json r = post(port, {{"prompt", prompt_ids(37)}, {"max_tokens", 4}}, &status);
  EXPECT_GE(status, 500) << r.dump();
  EXPECT_NE(r.dump().find("injected fault"), std::string::npos) << r.dump();
  // Every other request still runs, before and after, and the server stays healthy.
  for (int n : {20, 64, 20}) {
    r = post(port, {{"prompt", prompt_ids(n)}, {"max_tokens", 4}}, &status);
    EXPECT_EQ(status, 200) << n << ": " << r.dump();
  }
  EXPECT_TRUE(healthy(port));
  EXPECT_FALSE(p.exited());
}

// The host KV tier on the GPU: a failed page transfer (LONGSERVE_FAULT_COPY_PAGES=2: the 2nd
// copy_pages call copies nothing and reports an error, after the residency op marked its pages
// resident) fails the request of that step with the error; the server keeps serving, and the next
// requests, on the same partition and host blocks, answer exactly as a server that never failed.
TEST(GpuServer, KvTierTransferErrorFailsThatRequestOnlyAndTheServerKeepsServing) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const std::vector<std::string> args = {"--max-num-seqs", "2",  "--attention", "quest",
                                         "--token-budget", "64", "--kv-offload",  "on",
                                         "--offload-buffer-ratio", "1"};
  const Json body = {{"prompt", prompt_ids(300)}, {"max_tokens", 8}, {"temperature", 0}};
  std::string reference;
  {
    ServeProcess ref(args);
    const int port = ref.wait_listening();
    ASSERT_GT(port, 0) << ref.log();
    int status = 0;
    const Json r = post(port, body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    reference = r["choices"][0]["text"].get<std::string>();
  }
  ServeProcess p(args, {{"LONGSERVE_FAULT_COPY_PAGES", "2"}});
  const int port = p.wait_listening();
  ASSERT_GT(port, 0) << p.log();
  int status = 0;
  Json r = post(port, {{"prompt", prompt_ids(200)}, {"max_tokens", 4}}, &status);
  EXPECT_GE(status, 500) << r.dump();
  EXPECT_NE(r.dump().find("injected fault"), std::string::npos) << r.dump();
  for (int i = 0; i < 2; ++i) {
    r = post(port, body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["text"].get<std::string>(), reference) << i;
  }
  EXPECT_TRUE(healthy(port));
  EXPECT_FALSE(p.exited());
}

}  // namespace
