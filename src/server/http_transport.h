#pragma once
// The HTTP/1.1 transport: one I/O thread and a fixed pool of workers.
//   - The I/O thread (epoll) accepts, reads and parses requests (http_parser.h) and enforces the
//     deadlines: the whole header section within header_timeout, the whole body within
//     body_timeout, an idle keep-alive connection closed after keep_alive_timeout. A client
//     that is slow, silent or half-sent therefore holds no worker and no more than the limits'
//     bytes, and is cut (408) when its deadline passes.
//   - A complete request (or a parse error) moves its connection to a worker, which runs the
//     handler and writes the response; then it parses any bytes of a pipelined next request
//     already read and answers it in order, or gives the connection back to the I/O thread.
//   - Handlers may call HttpRequest::client_gone() (and StreamSink::client_gone()) to stop work
//     for a client that closed its connection.
// Workers bound concurrent handlers (streams included); the connection cap bounds open sockets.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "server/http_message.h"
#include "server/http_parser.h"

namespace ls {

struct TransportConfig {
  std::string host = "127.0.0.1";
  int port = 0;
  int num_workers = 64;
  int listen_backlog = 1024;
  int max_connections = 4096;  // accepted sockets open at once; more are closed at accept
  HttpLimits limits;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds write_timeout{30000};
  int keep_alive_max_requests = 100;
};

struct TransportHooks {
  // Runs a complete request on a worker.
  std::function<void(HttpRequest&, HttpResponse&)> handle;
  // Runs on the I/O thread once a request's header section is parsed, before its body is read;
  // a response returned here is sent instead (and the connection closed), e.g. 401.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> check_headers;
  // Fills the response for an error of the transport itself (400, 408, 413, 431, ...).
  std::function<void(int status, const std::string& message, HttpResponse&)> error;
};

class HttpTransport {
 public:
  HttpTransport(TransportConfig config, TransportHooks hooks);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port. Idempotent.
  Result<int> bind();
  // Serves until close(): runs the I/O loop on the calling thread, with the workers. Returns
  // after every worker has joined and every socket is closed.
  Status run();
  // Stops accepting and closes idle and half-received connections; requests being handled
  // finish, and their connections close after the response. Thread-safe.
  void drain();
  // Closes everything: run() returns once the workers finish their current handler (sockets
  // are shut down so blocked writes fail at once). Thread-safe.
  void close();
  // Requests being handled or queued for a worker.
  int busy() const;
  bool running() const;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace ls
