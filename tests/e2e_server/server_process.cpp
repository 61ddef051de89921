#include "server_process.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

namespace ls::testing {

using namespace std::chrono_literals;

ServerProcess::ServerProcess(const std::vector<std::string>& extra_args) {
  char log_path[] = "/tmp/longserve-server-process-XXXXXX";
  const int log_fd = mkstemp(log_path);
  if (log_fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return;
  }
  log_path_ = log_path;
  std::vector<std::string> args = {LONGSERVE_BINARY, "serve", "--port", "0", "--threads", "2"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(log_fd, STDERR_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  const std::string marker = "on http://127.0.0.1:";
  for (int i = 0; i < 600 && port_ == 0; ++i) {
    std::ifstream log(log_path_);
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (const size_t at = text.find(marker); at != std::string::npos) {
      port_ = std::atoi(text.c_str() + at + marker.size());
    } else {
      std::this_thread::sleep_for(100ms);
    }
  }
  if (port_ == 0) {
    ADD_FAILURE() << "the server did not log its port";
    return;
  }
  httplib::Client c("127.0.0.1", port_);
  for (int i = 0; i < 600; ++i) {
    if (auto res = c.Get("/health"); res && res->status == 200) return;
    std::this_thread::sleep_for(100ms);
  }
  ADD_FAILURE() << "the server did not come up";
  port_ = 0;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (!log_path_.empty()) std::remove(log_path_.c_str());
}

int ServerProcess::signal_and_wait(int sig, double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(20ms);
  }
  return -1;
}

namespace {

int64_t status_field(pid_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return -1;
}

}  // namespace

int64_t ServerProcess::rss_bytes() const {
  return status_field(pid_, "VmRSS") * 1024;
}

int ServerProcess::threads() const {
  return static_cast<int>(status_field(pid_, "Threads"));
}

int ServerProcess::open_fds() const {
  DIR* dir = opendir(("/proc/" + std::to_string(pid_) + "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace ls::testing
