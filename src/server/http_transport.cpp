#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/log.h"
#include "server/http_socket.h"

namespace ls {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 64 * 1024;
// Reads per readiness event before the I/O thread moves on to other connections.
constexpr int kReadsPerEvent = 16;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

struct Conn {
  int fd = -1;
  RequestParser parser;
  std::string pending;  // bytes read past the end of the current request (pipelining)
  Clock::time_point deadline;
  enum class Wait { kFirst, kIdle, kHead, kBody } wait = Wait::kFirst;
  bool headers_checked = false;
  bool continue_sent = false;
  int requests = 0;
  std::optional<HttpResponse> early;  // chosen from the headers alone (e.g. 401)

  explicit Conn(int f, const HttpLimits& limits) : fd(f), parser(limits) {}
};

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

struct HttpTransport::State {
  TransportConfig config;
  TransportHooks hooks;
  int listen_fd = -1;
  int epoll_fd = -1;
  std::atomic<int> wake_fd{-1};  // set by run(); drain() and close() may come before
  int port = -1;
  std::atomic<bool> draining{false};
  std::atomic<bool> closing{false};
  std::atomic<bool> is_running{false};
  std::atomic<int> busy{0};
  int open_conns = 0;  // guarded by mu
  // Out of file descriptors: the listener leaves epoll until then (level-triggered, a pending
  // connection that cannot be accepted would otherwise wake the loop without end).
  std::optional<Clock::time_point> accept_paused_until;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Conn>> ready;         // complete requests, for the workers
  std::vector<std::unique_ptr<Conn>> returned;     // keep-alive connections back from workers
  std::set<int> worker_fds;                        // connections a worker holds
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // I/O thread only: being read

  void wake() {
    const int fd = wake_fd.load();
    if (fd < 0) return;  // run() has not started: its loop sees the flags on its first turn
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
  }

  // I/O thread.
  void io_loop();
  void accept_all();
  void on_readable(Conn& conn);
  void after_feed(Conn& conn);
  void dispatch(int fd);
  void close_conn(int fd);
  void sweep(Clock::time_point now);
  void take_returned();

  // Workers.
  void worker_loop();
  bool serve(Conn& conn);  // true: keep the connection open for its next request
  bool write_response(int fd, HttpResponse& res, bool keep_alive, bool head_only, bool http10);
  void release(std::unique_ptr<Conn> conn, bool keep);
};

HttpTransport::HttpTransport(TransportConfig config, TransportHooks hooks)
    : s_(std::make_unique<State>()) {
  s_->config = std::move(config);
  s_->hooks = std::move(hooks);
}

HttpTransport::~HttpTransport() {
  if (s_->listen_fd >= 0) ::close(s_->listen_fd);
  if (s_->epoll_fd >= 0) ::close(s_->epoll_fd);
  if (s_->wake_fd >= 0) ::close(s_->wake_fd);
}

Result<int> HttpTransport::bind() {
  if (s_->listen_fd >= 0) return s_->port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(s_->config.port);
  if (const int rc = ::getaddrinfo(s_->config.host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return io_error("cannot resolve {}: {}", s_->config.host, gai_strerror(rc));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR allows a quick restart; no SO_REUSEPORT, so a second server cannot bind the
    // same port and silently take half the connections.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(fd, s_->config.listen_backlog) == 0) {
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return io_error("cannot bind {}:{} ({})", s_->config.host, s_->config.port, why);
  }
  set_nonblocking(fd);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  s_->port = addr.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  s_->listen_fd = fd;
  return s_->port;
}

Status HttpTransport::run() {
  LS_ASSIGN_OR_RETURN(const int port, bind());
  (void)port;
  State& s = *s_;
  s.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.epoll_fd < 0 || s.wake_fd < 0) return io_error("epoll/eventfd: {}", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s.listen_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
  ev.data.fd = s.wake_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd.load(), &ev);

  // Every connection is a descriptor: raise the soft limit to the hard one, and keep the cap
  // below it with room for the process's other files.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    if (limit.rlim_cur < limit.rlim_max) {
      rlimit raised = limit;
      raised.rlim_cur = limit.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
    }
    if (limit.rlim_cur != RLIM_INFINITY) {
      const auto room = static_cast<int64_t>(limit.rlim_cur) - 128;
      if (room < s.config.max_connections) {
        s.config.max_connections = static_cast<int>(std::max<int64_t>(16, room));
        LS_LOG_INFO("server: at most {} connections (open-file limit {})",
                    s.config.max_connections, static_cast<int64_t>(limit.rlim_cur));
      }
    }
  }
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(s.config.num_workers));
  for (int i = 0; i < s.config.num_workers; ++i) workers.emplace_back([&s] { s.worker_loop(); });
  s.is_running = true;
  s.io_loop();

  // Closing: handlers still running had their engine requests aborted by the caller; give them
  // a moment to write their last events, then shut their sockets so blocked writes fail.
  const auto grace_end = Clock::now() + std::chrono::seconds(2);
  while (s.busy > 0 && Clock::now() < grace_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(s.mu);
    for (const int fd : s.worker_fds) ::shutdown(fd, SHUT_RDWR);
  }
  s.cv.notify_all();
  for (std::thread& t : workers) t.join();
  {
    std::lock_guard lock(s.mu);
    for (auto& conn : s.returned) {
      ::close(conn->fd);
      --s.open_conns;
    }
    s.returned.clear();
  }
  s.is_running = false;
  return Status::ok_status();
}

void HttpTransport::drain() {
  s_->draining = true;
  s_->wake();
}

void HttpTransport::close() {
  s_->draining = true;
  s_->closing = true;
  s_->wake();
  s_->cv.notify_all();
}

int HttpTransport::busy() const {
  return s_->busy;
}

bool HttpTransport::running() const {
  return s_->is_running;
}

void HttpTransport::State::io_loop() {
  std::vector<epoll_event> events(256);
  bool listening = true;
  Clock::time_point next_sweep = Clock::now();
  while (!closing) {
    if (draining && listening) {
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
      ::close(listen_fd);
      listen_fd = -1;
      listening = false;
      std::vector<int> fds;
      for (const auto& [fd, conn] : conns) fds.push_back(fd);
      for (const int fd : fds) close_conn(fd);
    }
    const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 50);
    if (n < 0 && errno != EINTR) {
      LS_LOG_ERROR("server: epoll_wait failed: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == listen_fd) {
        accept_all();
      } else if (fd == wake_fd) {
        uint64_t value = 0;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd, &value, sizeof(value));
        take_returned();
      } else if (const auto it = conns.find(fd); it != conns.end()) {
        on_readable(*it->second);
      }
    }
    const Clock::time_point now = Clock::now();
    if (accept_paused_until && now >= *accept_paused_until && listening) {
      accept_paused_until.reset();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
    }
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + std::chrono::milliseconds(50);
    }
  }
  if (listen_fd >= 0) {
    ::close(listen_fd);
    listen_fd = -1;
  }
  take_returned();
  std::vector<int> fds;
  for (const auto& [fd, conn] : conns) fds.push_back(fd);
  for (const int fd : fds) close_conn(fd);
}

void HttpTransport::State::accept_all() {
  while (true) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        LS_LOG_WARN("server: out of file descriptors; connections wait in the backlog");
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    {
      std::lock_guard lock(mu);
      if (open_conns >= config.max_connections) {
        ::close(fd);
        continue;
      }
      ++open_conns;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    auto conn = std::make_unique<Conn>(fd, config.limits);
    conn->deadline = Clock::now() + config.header_timeout;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    conns.emplace(fd, std::move(conn));
  }
}

void HttpTransport::State::on_readable(Conn& conn) {
  char buf[kReadChunk];
  for (int i = 0; i < kReadsPerEvent; ++i) {
    const ssize_t n = ::recv(conn.fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      // Closed or reset before a whole request arrived: nothing to answer.
      close_conn(conn.fd);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const std::string_view data(buf, static_cast<size_t>(n));
    const size_t used = conn.parser.feed(data);
    if (used < data.size()) conn.pending.assign(data.substr(used));
    const int fd = conn.fd;
    after_feed(conn);
    if (conns.find(fd) == conns.end()) return;  // dispatched
  }
}

void HttpTransport::State::after_feed(Conn& conn) {
  RequestParser& parser = conn.parser;
  if (parser.headers_done() && !conn.headers_checked && parser.state() != RequestParser::State::kError) {
    conn.headers_checked = true;
    if (hooks.check_headers) conn.early = hooks.check_headers(parser.request());
  }
  if (conn.early || parser.state() != RequestParser::State::kNeedMore) {
    dispatch(conn.fd);
    return;
  }
  const Clock::time_point now = Clock::now();
  if (parser.headers_done()) {
    if (conn.wait != Conn::Wait::kBody) {
      conn.wait = Conn::Wait::kBody;
      conn.deadline = now + config.body_timeout;
    }
    if (parser.expects_continue() && !conn.continue_sent) {
      conn.continue_sent = true;
      if (!send_all(conn.fd, kContinue, now + std::chrono::seconds(1))) close_conn(conn.fd);
    }
  } else if (parser.started() && (conn.wait == Conn::Wait::kIdle)) {
    conn.wait = Conn::Wait::kHead;
    conn.deadline = now + config.header_timeout;
  }
}

void HttpTransport::State::dispatch(int fd) {
  const auto it = conns.find(fd);
  if (it == conns.end()) return;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  std::unique_ptr<Conn> conn = std::move(it->second);
  conns.erase(it);
  ++busy;
  {
    std::lock_guard lock(mu);
    worker_fds.insert(fd);
    ready.push_back(std::move(conn));
  }
  cv.notify_one();
}

void HttpTransport::State::close_conn(int fd) {
  const auto it = conns.find(fd);
  if (it == conns.end()) return;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns.erase(it);
  std::lock_guard lock(mu);
  --open_conns;
}

void HttpTransport::State::sweep(Clock::time_point now) {
  std::vector<int> expired;
  for (const auto& [fd, conn] : conns) {
    if (conn->deadline <= now) expired.push_back(fd);
  }
  for (const int fd : expired) {
    Conn& conn = *conns.at(fd);
    if (conn.parser.started()) {
      // Best effort and never blocking: the client may not be reading either.
      HttpResponse res;
      hooks.error(408, "Request not received in time", res);
      const std::string text = serialize_response_head(res, static_cast<int64_t>(res.body.size()),
                                                       false) + res.body;
      [[maybe_unused]] const ssize_t n =
          ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_conn(fd);
  }
}

void HttpTransport::State::take_returned() {
  std::vector<std::unique_ptr<Conn>> back;
  {
    std::lock_guard lock(mu);
    back.swap(returned);
  }
  const Clock::time_point now = Clock::now();
  for (auto& conn : back) {
    const int fd = conn->fd;
    if (draining || closing) {
      ::close(fd);
      std::lock_guard lock(mu);
      --open_conns;
      continue;
    }
    if (conn->parser.started()) {
      conn->wait = Conn::Wait::kHead;
      conn->deadline = now + config.header_timeout;
    } else {
      conn->wait = Conn::Wait::kIdle;
      conn->deadline = now + config.keep_alive_timeout;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    Conn& ref = *conn;
    conns.emplace(fd, std::move(conn));
    after_feed(ref);  // a partial next request may already need its 100 Continue
  }
}

void HttpTransport::State::worker_loop() {
  while (true) {
    std::unique_ptr<Conn> conn;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return closing || !ready.empty(); });
      if (ready.empty()) return;
      conn = std::move(ready.front());
      ready.pop_front();
    }
    const bool keep = !closing && serve(*conn);
    release(std::move(conn), keep);
  }
}

void HttpTransport::State::release(std::unique_ptr<Conn> conn, bool keep) {
  {
    std::lock_guard lock(mu);
    worker_fds.erase(conn->fd);
    if (keep && !draining && !closing) {
      returned.push_back(std::move(conn));
    } else {
      ::close(conn->fd);
      --open_conns;
    }
  }
  wake();
  --busy;
}

bool HttpTransport::State::serve(Conn& conn) {
  while (true) {
    HttpResponse res;
    bool keep = false;
    bool bad_input = false;
    bool head_only = false;
    bool http10 = false;
    if (conn.early) {
      res = std::move(*conn.early);
      conn.early.reset();
      bad_input = true;
    } else if (conn.parser.state() == RequestParser::State::kError) {
      hooks.error(conn.parser.error_status(), conn.parser.error_message(), res);
      bad_input = true;
    } else {
      HttpRequest& req = conn.parser.request();
      const int fd = conn.fd;
      req.client_gone = [fd] { return peer_closed(fd); };
      ++conn.requests;
      head_only = req.method == "HEAD";
      http10 = req.version_minor == 0;
      keep = req.keep_alive && conn.requests < config.keep_alive_max_requests && !draining;
      try {
        hooks.handle(req, res);
      } catch (const std::exception& e) {
        LS_LOG_ERROR("server: {} {} failed: {}", req.method, req.path, e.what());
        res = HttpResponse{};
        hooks.error(500, std::string("Internal server error: ") + e.what(), res);
      } catch (...) {
        res = HttpResponse{};
        hooks.error(500, "Internal server error", res);
      }
      if (res.close_connection || (http10 && res.stream)) keep = false;
    }
    const bool written = write_response(conn.fd, res, keep, head_only, http10);
    if (bad_input && written) {
      // The rest of the request may still be arriving: end our side, then read and drop a
      // bounded amount, so closing does not reset the connection before the client has read
      // the error.
      ::shutdown(conn.fd, SHUT_WR);
      const Clock::time_point until = Clock::now() + std::chrono::milliseconds(500);
      char sink[16 * 1024];
      size_t dropped = 0;
      while (dropped < (4u << 20) && Clock::now() < until) {
        pollfd p{conn.fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = ::recv(conn.fd, sink, sizeof(sink), 0);
        if (n <= 0) break;
        dropped += static_cast<size_t>(n);
      }
    }
    if (!written || !keep) return false;
    // A pipelined next request may already be buffered: answer it in order, here.
    conn.parser.reset();
    conn.headers_checked = false;
    conn.continue_sent = false;
    if (!conn.pending.empty()) {
      const size_t used = conn.parser.feed(conn.pending);
      conn.pending.erase(0, used);
    }
    if (conn.parser.headers_done() && conn.parser.state() != RequestParser::State::kError &&
        hooks.check_headers) {
      conn.headers_checked = true;
      conn.early = hooks.check_headers(conn.parser.request());
    }
    if (!conn.early && conn.parser.state() == RequestParser::State::kNeedMore) return true;
  }
}

bool HttpTransport::State::write_response(int fd, HttpResponse& res, bool keep_alive,
                                          bool head_only, bool http10) {
  const Clock::time_point deadline = Clock::now() + config.write_timeout;
  if (head_only) {
    const bool ok = send_all(
        fd, serialize_response_head(res,
                                res.stream ? (http10 ? kUntilClose : kChunkedBody)
                                           : static_cast<int64_t>(res.body.size()),
                                    keep_alive),
        deadline);
    if (res.on_stream_end) res.on_stream_end(false);
    return ok;
  }
  if (!res.stream) {
    std::string head =
        serialize_response_head(res, static_cast<int64_t>(res.body.size()), keep_alive);
    if (res.body.size() <= 64 * 1024) {
      head += res.body;
      return send_all(fd, head, deadline);
    }
    return send_all(fd, head, deadline) && send_all(fd, res.body, deadline);
  }
  // HTTP/1.0 has no chunked coding: the stream ends when the connection closes.
  bool ok = send_all(fd, serialize_response_head(res, http10 ? kUntilClose : kChunkedBody,
                                                 keep_alive), deadline);
  ChunkedSink sink(fd, config.write_timeout, /*chunked=*/!http10);
  while (ok && !sink.is_done()) {
    bool more = false;
    try {
      more = res.stream(sink);
    } catch (const std::exception& e) {
      LS_LOG_ERROR("server: stream failed: {}", e.what());
    } catch (...) {
      LS_LOG_ERROR("server: stream failed with an unknown exception");
    }
    if (!more || sink.failed()) ok = false;
  }
  if (res.on_stream_end) res.on_stream_end(ok);
  return ok;
}

}  // namespace ls
