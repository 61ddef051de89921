#pragma once
// A raw HTTP/1.1 client over a POSIX socket for black-box tests that need what a client library
// hides: exact bytes (pipelining, bad framing, slow or half-sent requests) and the moment the
// server answers or closes.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ls::testing {

struct RawResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // chunked transfer coding undone
  std::string header(std::string_view name) const;
};

class RawClient {
 public:
  // Connects to 127.0.0.1:port; fails the test if it cannot, unless `may_fail`.
  explicit RawClient(int port, bool may_fail = false);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends all bytes; false if the connection was closed or reset.
  bool send(std::string_view data);
  // Reads one response; nullopt when the connection closed first or `timeout` passed.
  // head_only: the response to a HEAD request (headers, no body whatever they announce).
  std::optional<RawResponse> read_response(std::chrono::milliseconds timeout,
                                           bool head_only = false);
  // True when the server closed the connection (EOF or reset) within `timeout`; bytes that
  // arrive meanwhile are kept for read_response().
  bool wait_closed(std::chrono::milliseconds timeout);
  // True when a byte of a response is available now or within `timeout`.
  bool readable(std::chrono::milliseconds timeout);
  void close();

 private:
  bool fill(std::chrono::steady_clock::time_point deadline);  // one recv into buf_
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
};

// gzip (RFC 1952) of `data`, made with zlib.
std::string gzip_compress(std::string_view data);

}  // namespace ls::testing
