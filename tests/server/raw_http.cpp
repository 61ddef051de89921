#include "raw_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ls::testing {

namespace {

using Clock = std::chrono::steady_clock;

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string RawResponse::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (iequal(key, name)) return value;
  }
  return {};
}

RawClient::RawClient(int port, bool may_fail) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (!may_fail) ADD_FAILURE() << "cannot connect to 127.0.0.1:" << port << ": " << std::strerror(errno);
    close();
  }
}

RawClient::~RawClient() {
  close();
}

void RawClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawClient::send(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool RawClient::fill(Clock::time_point deadline) {
  if (eof_ || fd_ < 0) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) <= 0) return false;
  char chunk[65536];
  const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  buf_.append(chunk, static_cast<size_t>(n));
  return true;
}

bool RawClient::readable(std::chrono::milliseconds timeout) {
  if (!buf_.empty()) return true;
  fill(Clock::now() + timeout);
  return !buf_.empty() || eof_;
}

bool RawClient::wait_closed(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!eof_ && Clock::now() < deadline) fill(deadline);
  return eof_;
}

std::optional<RawResponse> RawClient::read_response(std::chrono::milliseconds timeout,
                                                    bool head_only) {
  const auto deadline = Clock::now() + timeout;
  size_t head_end;
  while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill(deadline)) return std::nullopt;
  }
  RawResponse res;
  const std::string head = buf_.substr(0, head_end);
  size_t pos = 0;
  size_t eol = head.find("\r\n");
  const std::string status_line = head.substr(0, eol);
  if (status_line.size() < 12) return std::nullopt;
  res.status = std::atoi(status_line.c_str() + 9);
  while (eol != std::string::npos) {
    pos = eol + 2;
    eol = head.find("\r\n", pos);
    const std::string line = head.substr(pos, eol == std::string::npos ? eol : eol - pos);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t v = colon + 1;
    while (v < line.size() && line[v] == ' ') ++v;
    res.headers.emplace_back(line.substr(0, colon), line.substr(v));
  }
  buf_.erase(0, head_end + 4);
  if (head_only) return res;
  if (iequal(res.header("Transfer-Encoding"), "chunked")) {
    while (true) {
      size_t line_end;
      while ((line_end = buf_.find("\r\n")) == std::string::npos) {
        if (!fill(deadline)) return std::nullopt;
      }
      const size_t size = std::strtoul(buf_.c_str(), nullptr, 16);
      while (buf_.size() < line_end + 2 + size + 2) {
        if (!fill(deadline)) return std::nullopt;
      }
      res.body.append(buf_, line_end + 2, size);
      buf_.erase(0, line_end + 2 + size + 2);
      if (size == 0) break;
    }
  } else if (res.header("Content-Length").empty()) {
    while (fill(deadline)) {
    }
    if (!eof_) return std::nullopt;  // delimited by the close, which did not come in time
    res.body = std::move(buf_);
    buf_.clear();
  } else {
    const size_t length = std::strtoul(res.header("Content-Length").c_str(), nullptr, 10);
    while (buf_.size() < length) {
      if (!fill(deadline)) return std::nullopt;
    }
    res.body = buf_.substr(0, length);
    buf_.erase(0, length);
  }
  return res;
}

std::string gzip_compress(std::string_view data) {
  z_stream zs{};
  deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, static_cast<uLong>(data.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  EXPECT_EQ(rc, Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace ls::testing
