#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "core/log.h"
#include "server/server_impl.h"
#include "structured/tool_call_parser.h"
#include "tokenizer/tokenizer.h"

namespace ls {

void send_error(HttpResponse& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(error.body(), "application/json");
}

void send_status_error(HttpResponse& res, const Status& status) {
  send_error(res, api_error_from_status(status));
}

void send_json(HttpResponse& res, const std::string& body) {
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
    case 408:
      return "Request not received in time";
    default:
      return status >= 500 ? "Internal server error" : "Request failed";
  }
}

}  // namespace

void Server::Impl::install_routes() {
  install_generation_routes();
  install_info_routes();
}

TransportHooks Server::Impl::transport_hooks() {
  TransportHooks hooks;
  const ServerConfig& cfg = config;
  hooks.handle = [this, &cfg](HttpRequest& req, HttpResponse& res) {
    if (!router.dispatch(req, res)) {
      send_error(res, make_api_error(res.status, default_error_message(res.status, cfg)));
    }
    LS_LOG_DEBUG("server: {} {} -> {}", req.method, req.path, res.status);
  };
  hooks.error = [&cfg](int status, const std::string& message, HttpResponse& res) {
    send_error(res, make_api_error(status, message.empty() ? default_error_message(status, cfg)
                                                           : message));
  };
  if (!cfg.api_key.empty()) {
    // Checked from the headers alone, before the body is read: an unauthenticated upload costs
    // nothing, and its connection is closed after the 401.
    hooks.check_headers = [expected = "Bearer " + cfg.api_key](
                              const HttpRequest& req) -> std::optional<HttpResponse> {
      if (req.path.rfind("/v1", 0) != 0 || req.method == "OPTIONS") return std::nullopt;
      if (constant_time_equal(std::string(req.header("Authorization")), expected)) {
        return std::nullopt;
      }
      HttpResponse res;
      send_error(res, make_api_error(401, "Unauthorized"));
      res.close_connection = true;
      return res;
    };
  }
  return hooks;
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
  if (config.header_timeout_ms < 1 || config.shutdown_timeout_ms < 0) {
    return invalid_argument("header_timeout_ms must be positive and shutdown_timeout_ms >= 0");
  }
  if (config.max_connections < 1) {
    return invalid_argument("max_connections must be positive, got {}", config.max_connections);
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
  if (!impl->config.tool_call_parser.empty()) {
    LS_RETURN_IF_ERROR(grammar::make_tool_call_parser(impl->config.tool_call_parser).status());
  }
  // The per-tokenizer part of constrained decoding: every token's bytes, sorted.
  impl->grammars = std::make_unique<grammar::GrammarCache>(
      std::make_shared<const grammar::TokenVocab>(grammar::TokenVocab::from_tokenizer(tokenizer)));
  impl->request_context.grammars = impl->grammars.get();
  impl->request_context.tool_call_parser = impl->config.tool_call_parser;
  impl->request_context.enable_auto_tool_choice = impl->config.enable_auto_tool_choice;
  // No token is longer than the longest vocabulary entry (byte-level and SentencePiece entries
  // spell a byte with at least one byte), so a prompt of more than max_model_len times that
  // many bytes cannot fit the context. The factor 2 leaves room for normalizers that shrink
  // text (NFC composition); above it the prompt is refused without tokenizing it, which for a
  // 25 MB prompt saves ~700 MB of peak memory.
  size_t max_token_bytes = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    max_token_bytes = std::max(max_token_bytes, tokenizer.id_to_token(id).size());
  }
  if (max_token_bytes > 0) {
    impl->request_context.max_prompt_bytes =
        2 * static_cast<int64_t>(max_token_bytes) * engine.max_model_len();
  }
  impl->metrics =
      std::make_shared<ServerMetrics>(impl->config.served_model_name, engine.max_model_len());

  const ServerConfig& cfg = impl->config;
  TransportConfig transport;
  transport.host = cfg.host;
  transport.port = cfg.port;
  transport.num_workers = cfg.num_threads;
  transport.listen_backlog = cfg.listen_backlog;
  transport.max_connections = cfg.max_connections;
  transport.limits.max_body_bytes = cfg.max_payload_bytes;
  transport.header_timeout = std::chrono::milliseconds(cfg.header_timeout_ms);
  transport.body_timeout = std::chrono::seconds(cfg.read_timeout_s);
  transport.keep_alive_timeout = std::chrono::seconds(cfg.keep_alive_timeout_s);
  transport.write_timeout = std::chrono::seconds(cfg.write_timeout_s);
  transport.keep_alive_max_requests = std::max(1, cfg.keep_alive_max_requests);
  impl->install_routes();
  impl->transport = std::make_unique<HttpTransport>(std::move(transport), impl->transport_hooks());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  stop();
}

Result<int> Server::bind() {
  if (impl_->port >= 0) return impl_->port.load();
  LS_ASSIGN_OR_RETURN(const int port, impl_->transport->bind());
  impl_->port = port;
  return port;
}

Status Server::listen() {
  if (impl_->stopping || impl_->stop_requested) return Status::ok_status();
  LS_ASSIGN_OR_RETURN(const int port, bind());
  LS_LOG_INFO("server: serving {} on http://{}:{}", impl_->config.served_model_name,
              impl_->config.host, port);
  // request_stop() only sets a flag (so a signal handler may call it); this watcher turns the
  // flag into the graceful drain_and_stop().
  std::atomic<bool> done{false};
  std::thread watcher([this, &done] {
    while (!done && !impl_->stopping) {
      if (impl_->stop_requested) {
        impl_->drain_and_stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  Status status = impl_->transport->run();
  done = true;
  watcher.join();
  if (!status.ok()) {
    return io_error("the HTTP listener on {}:{} failed: {}", impl_->config.host, port,
                    status.message());
  }
  return Status::ok_status();
}

void Server::request_stop() noexcept {
  impl_->stop_requested.store(true);
}

void Server::Impl::drain_and_stop() {
  if (stopping) return;
  draining = true;
  transport->drain();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config.shutdown_timeout_ms);
  while (transport->busy() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (transport->busy() > 0) {
    LS_LOG_WARN("server: {} requests still running after the shutdown timeout; aborting them",
                transport->busy());
  }
  stop_now();
}

void Server::Impl::stop_now() {
  if (stopping.exchange(true)) return;
  for (const std::string& id : live.snapshot()) engine->abort(id);
  transport->close();
}

void Server::stop() {
  if (impl_) impl_->stop_now();
}

int Server::port() const {
  return impl_->port;
}

}  // namespace ls
