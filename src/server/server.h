#pragma once
// The OpenAI-compatible HTTP server (vLLM's API surface) over cpp-httplib:
//   POST /v1/completions, POST /v1/chat/completions   generation, JSON or SSE (stream: true)
//   GET  /v1/models, GET /health, GET /metrics         model list, liveness, Prometheus text
//   POST /tokenize, POST /detokenize                   tokenizer access
// Errors use vLLM's nested body {"error":{"message","type","param","code"}} with the matching
// status. With an api_key, every /v1/* route needs "Authorization: Bearer <key>" (401
// otherwise), as vLLM's --api-key does; /health, /metrics, /tokenize and /detokenize stay open.
//
// A bad request never takes the server down: every handler catches, and bodies above
// max_payload_bytes get 413 without being read into memory. A streaming client that goes away
// has its engine requests aborted within ~stream_poll_ms.

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine_api.h"

namespace ls {

class Tokenizer;
class ChatTemplate;

struct ServerConfig {
  std::string host = "127.0.0.1";  // loopback unless asked otherwise
  int port = 8000;                 // 0: any free port (bind() returns it)
  std::string api_key;             // empty: no authentication
  std::string served_model_name;   // empty: Engine::model_name()
  int64_t max_payload_bytes = 32 << 20;
  // HTTP workers. cpp-httplib holds one per open connection (a stream, or an idle keep-alive
  // connection), so this bounds concurrent streams; requests past it queue before being read.
  int num_threads = 512;
  // cpp-httplib 0.11.4 (Debian) compiles a backlog of 5 into the library; the server re-listens
  // with this one so that a burst of connects (bench serve at rate=inf) is not dropped.
  int listen_backlog = 1024;
  int keep_alive_timeout_s = 5;
  int keep_alive_max_requests = 100;  // per connection (cpp-httplib's default is 5)
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int stream_poll_ms = 50;  // how often an idle stream checks that its client is still there
  int max_n = 128;          // largest "n" accepted
};

class Server {
 public:
  // Validates the config; serves nothing until bind() and listen(). engine, tokenizer and
  // chat_template (nullable: chat is then rejected with 400) must outlive the server.
  static Result<std::unique_ptr<Server>> create(ServerConfig config, Engine& engine,
                                                const Tokenizer& tokenizer,
                                                const ChatTemplate* chat_template);
  // Stops the server. A listen() running on another thread must have returned (join it after
  // stop()) before the Server is destroyed.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: any free port) and returns the port. Connections queue in the
  // backlog until listen().
  Result<int> bind();
  // Serves until stop(); binds first if bind() was not called.
  Status listen();
  // Thread-safe. Aborts every live generation, then stops the listener and waits for the
  // workers; listen() returns.
  void stop();
  // Async-signal-safe: only sets a flag, which the running listen() turns into stop() within
  // ~20 ms. Call this from SIGINT/SIGTERM handlers; stop() itself takes locks.
  void request_stop() noexcept;

  int port() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls
