#include "server/server.h"

#include <chrono>
#include <thread>

#include "core/log.h"
#include "server/server_impl.h"

namespace ls {

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(error.body(), "application/json");
}

void send_status_error(httplib::Response& res, const Status& status) {
  send_error(res, api_error_from_status(status));
}

void send_json(httplib::Response& res, const std::string& body) {
  res.status = 200;
  res.set_content(body, "application/json");
}

namespace {

// Compares without an early exit, so response timing does not reveal how much of a guessed key
// was right.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string default_error_message(int status, const ServerConfig& config) {
  switch (status) {
    case 400:
      return "Bad request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return fmt::format("Request body is larger than the limit of {} bytes",
                         config.max_payload_bytes);
    case 414:
      return "Request URI too long";
    default:
      return status >= 500 ? "Internal server error" : "Request failed";
  }
}

}  // namespace

void Server::Impl::install_routes() {
  const ServerConfig& cfg = config;
  if (!cfg.api_key.empty()) {
    const std::string expected = "Bearer " + cfg.api_key;
    http.set_pre_routing_handler([expected](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1", 0) != 0 || req.method == "OPTIONS") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      if (!constant_time_equal(req.get_header_value("Authorization"), expected)) {
        // Answered before the body is read (an unauthenticated upload costs nothing), so the
        // connection cannot carry another request: tell the client to close it.
        send_error(res, make_api_error(401, "Unauthorized"));
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
  }
  // Fills a JSON body into every error response that has none (404 for unknown routes, 413 and
  // 400 from cpp-httplib itself); bodies our handlers set are left alone.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([&cfg](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, make_api_error(res.status, default_error_message(res.status, cfg)));
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LS_LOG_ERROR("server: {} {} failed: {}", req.method, req.path, what);
        send_error(res, make_api_error(500, "Internal server error: " + what));
      });
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    LS_LOG_DEBUG("server: {} {} -> {}", req.method, req.path, res.status);
    (void)req;
    (void)res;
  });
  install_generation_routes();
  install_info_routes();
}

Result<std::unique_ptr<Server>> Server::create(ServerConfig config, Engine& engine,
                                               const Tokenizer& tokenizer,
                                               const ChatTemplate* chat_template) {
  if (config.port < 0 || config.port > 65535) {
    return invalid_argument("port must be in [0, 65535], got {}", config.port);
  }
  if (config.num_threads < 1) {
    return invalid_argument("the server needs at least one thread, got {}", config.num_threads);
  }
  if (config.max_payload_bytes < 1) {
    return invalid_argument("max_payload_bytes must be positive, got {}", config.max_payload_bytes);
  }
  if (config.stream_poll_ms < 1 || config.stream_poll_ms > 1000) {
    return invalid_argument("stream_poll_ms must be in [1, 1000], got {}", config.stream_poll_ms);
  }
  if (config.max_n < 1) return invalid_argument("max_n must be at least 1, got {}", config.max_n);
  if (config.served_model_name.empty()) config.served_model_name = engine.model_name();

  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  impl->engine = &engine;
  impl->tokenizer = &tokenizer;
  impl->chat_template = chat_template;
  impl->request_context = RequestContext{&engine, &tokenizer, chat_template,
                                         impl->config.served_model_name, impl->config.max_n};
  impl->metrics =
      std::make_shared<ServerMetrics>(impl->config.served_model_name, engine.max_model_len());

  HttpServer& http = impl->http;
  if (!http.is_valid()) return internal_error("cpp-httplib server could not be created");
  const int num_threads = impl->config.num_threads;
  http.new_task_queue = [num_threads] { return new httplib::ThreadPool(num_threads); };
  http.set_tcp_nodelay(true);
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and
  // silently take half the connections; SO_REUSEADDR alone still allows a quick restart.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.set_payload_max_length(static_cast<size_t>(impl->config.max_payload_bytes));
  http.set_keep_alive_timeout(impl->config.keep_alive_timeout_s);
  http.set_keep_alive_max_count(
      static_cast<size_t>(std::max(1, impl->config.keep_alive_max_requests)));
  http.set_read_timeout(impl->config.read_timeout_s, 0);
  http.set_write_timeout(impl->config.write_timeout_s, 0);
  impl->install_routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  stop();
}

Result<int> Server::bind() {
  if (impl_->port >= 0) return impl_->port.load();
  const ServerConfig& cfg = impl_->config;
  int port = cfg.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(cfg.host);
    if (port <= 0) return io_error("cannot bind {} on any port", cfg.host);
  } else if (!impl_->http.bind_to_port(cfg.host, port)) {
    return io_error("cannot bind {}:{} (in use, or not a local address?)", cfg.host, port);
  }
  if (!impl_->http.raise_backlog(cfg.listen_backlog)) {
    LS_LOG_WARN("server: could not raise the listen backlog to {}", cfg.listen_backlog);
  }
  impl_->port = port;
  return port;
}

Status Server::listen() {
  impl_->in_listen = true;
  struct Leave {
    std::atomic<bool>& flag;
    ~Leave() { flag = false; }
  } leave{impl_->in_listen};
  if (impl_->stopping || impl_->stop_requested) return Status::ok_status();
  LS_ASSIGN_OR_RETURN(const int port, bind());
  LS_LOG_INFO("server: serving {} on http://{}:{}", impl_->config.served_model_name,
              impl_->config.host, port);
  // request_stop() only sets a flag (so a signal handler may call it); this watcher turns the
  // flag into stop().
  std::atomic<bool> done{false};
  std::thread watcher([this, &done] {
    while (!done && !impl_->stopping) {
      if (impl_->stop_requested) {
        stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const bool ok = impl_->http.listen_after_bind();
  done = true;
  watcher.join();
  if (!ok) return io_error("the HTTP listener on {}:{} failed", impl_->config.host, port);
  return Status::ok_status();
}

void Server::request_stop() noexcept {
  impl_->stop_requested.store(true);
}

void Server::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  for (const std::string& id : impl_->live.snapshot()) impl_->engine->abort(id);
  // cpp-httplib's stop() does nothing until its listener runs; a listen() that passed its
  // `stopping` check is about to start it, so wait for that.
  while (impl_->in_listen && !impl_->http.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->http.stop();
}

int Server::port() const {
  return impl_->port;
}

}  // namespace ls
