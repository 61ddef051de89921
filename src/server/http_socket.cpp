#include "server/http_socket.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>

namespace ls {

bool send_all(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno != EINTR) return false;
    if (rc > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return false;
  }
  return true;
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

bool ChunkedSink::write(std::string_view data) {
  if (done_ || failed_) return false;
  if (data.empty()) return true;  // an empty chunk would end the body
  if (!chunked_) {
    if (!send_all(fd_, data, std::chrono::steady_clock::now() + write_timeout_)) failed_ = true;
    return !failed_;
  }
  std::string chunk = fmt::format("{:x}\r\n", data.size());
  chunk.append(data);
  chunk += "\r\n";
  if (!send_all(fd_, chunk, std::chrono::steady_clock::now() + write_timeout_)) failed_ = true;
  return !failed_;
}

void ChunkedSink::done() {
  if (done_ || failed_) return;
  if (chunked_ && !send_all(fd_, "0\r\n\r\n", std::chrono::steady_clock::now() + write_timeout_)) {
    failed_ = true;
    return;
  }
  done_ = true;
}

}  // namespace ls
