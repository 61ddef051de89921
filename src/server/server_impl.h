#pragma once
// Server internals shared by server.cpp (setup, auth, errors, lifecycle) and the route files
// (generation_routes.cpp, info_routes.cpp). Not part of the public API.

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/generation_session.h"
#include "server/openai_request.h"
#include "server/server.h"
#include "server/server_metrics.h"

namespace ls {

// cpp-httplib's Server with access to its listening socket, to raise the backlog that the
// Debian build freezes at 5 (listen() on a listening socket updates the backlog on Linux).
class HttpServer : public httplib::Server {
 public:
  bool raise_backlog(int backlog) {
    const socket_t sock = svr_sock_;
    return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
  }
};

struct Server::Impl {
  ServerConfig config;
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  RequestContext request_context;
  std::shared_ptr<ServerMetrics> metrics;
  LiveRequests live;
  HttpServer http;
  std::atomic<int> port{-1};
  std::atomic<bool> stopping{false};
  std::atomic<bool> in_listen{false};
  std::atomic<bool> stop_requested{false};  // lock-free: set from signal handlers
  static_assert(std::atomic<bool>::is_always_lock_free);

  void install_routes();
  void install_generation_routes();
  void install_info_routes();
  void handle_generation(ApiKind kind, const httplib::Request& req, httplib::Response& res);
};

void send_error(httplib::Response& res, const ApiError& error);
void send_status_error(httplib::Response& res, const Status& status);
void send_json(httplib::Response& res, const std::string& body);

}  // namespace ls
