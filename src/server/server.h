#pragma once
// The OpenAI-compatible HTTP server (vLLM's API surface) over the HTTP/1.1 transport of
// http_transport.h:
//   POST /v1/completions, POST /v1/chat/completions   generation, JSON or SSE (stream: true)
//   GET  /v1/models, GET /health, GET /metrics         model list, liveness, Prometheus text
//   POST /tokenize, POST /detokenize                   tokenizer access
// Errors use vLLM's nested body {"error":{"message","type","param","code"}} with the matching
// status. With an api_key, every /v1/* route needs "Authorization: Bearer <key>" (401
// otherwise), as vLLM's --api-key does; /health, /metrics, /tokenize and /detokenize stay open.
//
// A bad request never takes the server down: every handler catches, and bodies above
// max_payload_bytes (on the wire or decoded from gzip/deflate) get 413 without being held in
// memory. A client that goes away, streaming or not, has its engine requests aborted within
// ~stream_poll_ms. Headers must arrive within header_timeout_ms and a body within
// read_timeout_s (408 otherwise), and slow clients hold no worker while they send.

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
  // HTTP workers: each runs one request at a time (a stream holds its worker until it ends), so
  // this bounds concurrent requests; complete requests past it queue. Idle keep-alive
  // connections and requests still arriving hold no worker.
  int num_threads = 512;
  int listen_backlog = 1024;  // so that a burst of connects (bench serve at rate=inf) is kept
  int max_connections = 4096;  // open client sockets; more are closed at accept
  int keep_alive_timeout_s = 5;
  int keep_alive_max_requests = 100;  // per connection
  int header_timeout_ms = 10000;  // the whole request line and header section (408 after)
  int read_timeout_s = 30;        // the whole body, once the headers are in (408 after)
  int write_timeout_s = 30;       // each response write
  // Graceful stop (request_stop(), SIGTERM): live requests get this long to finish before they
  // are aborted.
  int shutdown_timeout_ms = 10000;
  int stream_poll_ms = 50;  // how often an idle stream checks that its client is still there
  int max_n = 128;          // largest "n" accepted
  // Tool calling: the parser for tool_choice "auto" (hermes, llama3_json, mistral; empty:
  // none) and whether "auto" is allowed (vLLM's --tool-call-parser, --enable-auto-tool-choice).
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
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
  // Thread-safe. Aborts every live generation (streams still get their final events and
  // [DONE]), then closes the listener and every connection; listen() returns once the workers
  // have finished (within ~2 s).
  void stop();
  // Async-signal-safe: only sets a flag, which the running listen() turns into a graceful stop
  // within ~20 ms: stop accepting and close idle connections (/health and new requests: 503),
  // let live requests finish for up to shutdown_timeout_ms, then stop().
  void request_stop() noexcept;

  int port() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ls
