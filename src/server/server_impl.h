#pragma once
// Server internals shared by server.cpp (setup, auth, errors, lifecycle) and the route files
// (generation_routes.cpp, info_routes.cpp). Not part of the public API.

#include <atomic>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/generation_session.h"
#include "server/http_message.h"
#include "server/http_router.h"
#include "server/http_transport.h"
#include "server/openai_request.h"
#include "server/server.h"
#include "server/server_metrics.h"
#include "structured/grammar_constraint.h"

namespace ls {

struct Server::Impl {
  ServerConfig config;
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  RequestContext request_context;
  std::unique_ptr<grammar::GrammarCache> grammars;  // structured outputs for this tokenizer
  std::shared_ptr<ServerMetrics> metrics;
  LiveRequests live;
  HttpRouter router;
  std::unique_ptr<HttpTransport> transport;
  std::atomic<int> port{-1};
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> stop_requested{false};  // lock-free: set from signal handlers
  static_assert(std::atomic<bool>::is_always_lock_free);

  void install_routes();
  TransportHooks transport_hooks();
  // Aborts every live generation and closes the transport (run() returns).
  void stop_now();
  void install_generation_routes();
  void install_info_routes();
  void handle_generation(ApiKind kind, HttpRequest& req, HttpResponse& res);
  void handle_responses(HttpRequest& req, HttpResponse& res);  // responses_route.cpp
  // Graceful stop: stop accepting, let live requests finish for up to shutdown_timeout_ms, then
  // abort what is left (streams end with their final events and [DONE]) and close.
  void drain_and_stop();
};

void send_error(HttpResponse& res, const ApiError& error);
void send_status_error(HttpResponse& res, const Status& status);
void send_json(HttpResponse& res, const std::string& body);

}  // namespace ls
