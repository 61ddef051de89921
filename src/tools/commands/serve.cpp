// longserve serve: the OpenAI-compatible HTTP server (vLLM's API) over the engine.
#include <fmt/format.h>

#include <pthread.h>

#include <csignal>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>

#include "core/log.h"
#include "engine/async_engine.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"
#include "tools/commands/commands.h"
#include "tools/engine_flags.h"

namespace ls {

namespace {

struct ServeOptions {
  EngineConfig engine;
  ServerConfig server;
  std::string chat_template_path;
};

int run_serve(ServeOptions& o) {
  // SIGINT/SIGTERM are blocked before any thread exists (threads inherit the mask) and taken by
  // one waiter thread with sigwait, so stopping runs as ordinary code, not in a signal handler.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  finalize_engine_flags(o.engine);
  auto core = EngineCore::create(o.engine);
  if (!core.ok()) {
    fmt::print(stderr, "error: {}\n", core.status().message());
    return 1;
  }
  std::shared_ptr<const Tokenizer> tokenizer = (*core)->shared_tokenizer();
  if (!tokenizer) {
    fmt::print(stderr, "error: serve needs the model's tokenizer.json\n");
    return 1;
  }
  // The chat template: --chat-template FILE, else tokenizer_config.json / chat_template.jinja.
  std::optional<ChatTemplate> chat;
  std::optional<std::string> source;
  if (!o.chat_template_path.empty()) {
    std::ifstream f(o.chat_template_path);
    if (!f) {
      fmt::print(stderr, "error: cannot read --chat-template {}\n", o.chat_template_path);
      return 1;
    }
    source = std::string(std::istreambuf_iterator<char>(f), {});
  } else {
    auto loaded = load_chat_template(o.engine.model_dir);
    if (!loaded.ok()) {
      fmt::print(stderr, "error: {}\n", loaded.status().message());
      return 1;
    }
    source = *loaded;
  }
  if (source) {
    auto parsed = ChatTemplate::parse(*source);
    if (!parsed.ok()) {
      fmt::print(stderr, "error: chat template: {}\n", parsed.status().message());
      return 1;
    }
    chat = std::move(*parsed);
  } else {
    LS_LOG_WARN("the model has no chat template: /v1/chat/completions will answer 400");
  }
  AsyncEngine engine(std::move(*core));
  auto server = Server::create(o.server, engine, *tokenizer, chat ? &*chat : nullptr);
  if (!server.ok()) {
    fmt::print(stderr, "error: {}\n", server.status().message());
    return 1;
  }
  auto port = (*server)->bind();
  if (!port.ok()) {
    fmt::print(stderr, "error: {}\n", port.status().message());
    return 1;
  }
  Server* srv = server->get();
  std::thread signal_waiter([srv, stop_signals] {
    int sig = 0;
    if (sigwait(&stop_signals, &sig) == 0 && sig != 0) {
      LS_LOG_INFO("signal {}: stopping", sig);
      srv->stop();
    }
  });
  LS_LOG_INFO("serving {} on http://{}:{} (OpenAI API under /v1)", engine.model_name(),
              o.server.host, *port);
  Status st = (*server)->listen();
  // Wake the waiter if listen() ended for another reason.
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  if (!st.ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  return 0;
}

}  // namespace

CommandRunner add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  o->engine.max_num_seqs = 64;
  CLI::App* sub = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
  add_engine_flags(*sub, o->engine);
  sub->add_option("--host", o->server.host, "Address to bind")->capture_default_str();
  sub->add_option("--port", o->server.port, "Port (0: any free port)")->capture_default_str();
  sub->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' on /v1");
  sub->add_option("--served-model-name", o->server.served_model_name,
                  "Model name in the API (default: the model directory's name)");
  sub->add_option("--max-payload-bytes", o->server.max_payload_bytes, "Request body limit (413 above)")
      ->capture_default_str();
  sub->add_option("--http-threads", o->server.num_threads, "HTTP workers (bounds concurrent streams)")
      ->capture_default_str();
  sub->add_option("--chat-template", o->chat_template_path, "Jinja chat template file");
  return [o] {
    if (!o->server.served_model_name.empty()) o->engine.served_model_name = o->server.served_model_name;
    return run_serve(*o);
  };
}

}  // namespace ls
