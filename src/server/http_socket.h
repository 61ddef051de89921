#pragma once
// Blocking-with-deadline writes on a non-blocking socket, the peer-closed probe, and the chunked
// body writer that streaming responses (SSE) go through.

#include <chrono>
#include <string_view>

#include "server/http_message.h"

namespace ls {

// Sends all of `data` (MSG_NOSIGNAL), waiting for the socket to drain at most until `deadline`.
// False when the peer is gone or the deadline passed.
bool send_all(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline);

// True when the peer closed (FIN), reset, or errored the connection. Never blocks and consumes
// nothing, so bytes of a pipelined next request stay queued.
bool peer_closed(int fd);

// Writes a body as HTTP chunks (or, for HTTP/1.0 clients, as plain bytes delimited by closing
// the connection); each write has `write_timeout` to drain.
class ChunkedSink final : public StreamSink {
 public:
  ChunkedSink(int fd, std::chrono::milliseconds write_timeout, bool chunked = true)
      : fd_(fd), write_timeout_(write_timeout), chunked_(chunked) {}
  bool write(std::string_view data) override;
  void done() override;
  bool client_gone() override { return peer_closed(fd_); }

  bool is_done() const { return done_; }
  bool failed() const { return failed_; }

 private:
  int fd_;
  std::chrono::milliseconds write_timeout_;
  bool chunked_;
  bool done_ = false;
  bool failed_ = false;
};

}  // namespace ls
