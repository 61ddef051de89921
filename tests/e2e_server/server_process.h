#pragma once
// Starts the real `longserve serve` binary on the bundled model as a child process on a free
// loopback port, and reads its /proc counters (RSS, threads, open fds) for the soak test.

#include <sys/types.h>

#include <string>
#include <vector>

namespace ls::testing {

class ServerProcess {
 public:
  // Starts `longserve serve --port 0 <args>` and waits for /health; port() is 0 on failure.
  explicit ServerProcess(const std::vector<std::string>& extra_args);
  // SIGKILLs the process if it still runs.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits up to `timeout_s` for the exit; returns the raw waitpid status, or -1
  // if it did not exit in time (it is then killed).
  int signal_and_wait(int sig, double timeout_s);

  // From /proc/<pid>: resident set (bytes), thread count, open file descriptors.
  int64_t rss_bytes() const;
  int threads() const;
  int open_fds() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

}  // namespace ls::testing
