// longserve serve: the OpenAI-compatible HTTP server (vLLM's API) over the engine.
#include <fmt/format.h>

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
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

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

struct ServeOptions {
  EngineConfig engine;
  ServerConfig server;
  std::string chat_template_path;
  double shutdown_timeout_s = 10;
  double header_timeout_s = 10;
};

int run_serve(ServeOptions& o) {
  // SIGINT/SIGTERM go through a handler that only writes the signal number to a pipe; a waiter
  // thread reads it and stops the server as ordinary code. (Blocking the signals and using
  // sigwait does not work: libraries start threads before main, e.g. OpenBLAS's pool, and a
  // signal delivered to one of those, with the default action, killed the process.)
  // glibc raises its mmap threshold to the size of every mmapped block freed (up to 32 MB), so
  // after the first large request, multi-MB request bodies, prompts and token vectors are
  // carved from the heaps of whichever threads handled them and never given back: RSS grew by
  // hundreds of MB per round of large requests. A fixed threshold (which also turns the
  // dynamic adjustment off) keeps blocks of 1 MiB and more in mmap, returned when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    fmt::print(stderr, "error: cannot create the signal pipe\n");
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
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
  // The first SIGINT/SIGTERM drains gracefully (stop accepting, let live requests finish for
  // up to --shutdown-timeout, then abort the rest); a second one stops at once.
  std::thread signal_waiter([srv] {
    int signals_seen = 0;
    while (true) {
      unsigned char sig = 0;
      const ssize_t n = ::read(g_signal_pipe[0], &sig, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || sig == 0) return;  // 0: listen() returned
      if (++signals_seen == 1) {
        LS_LOG_INFO("signal {}: draining (a second signal stops at once)", sig);
        srv->request_stop();
      } else {
        LS_LOG_INFO("signal {}: stopping now", sig);
        srv->stop();
      }
    }
  });
  LS_LOG_INFO("serving {} on http://{}:{} (OpenAI API under /v1)", engine.model_name(),
              o.server.host, *port);
  Status st = (*server)->listen();
  const unsigned char wake = 0;
  [[maybe_unused]] const ssize_t w = ::write(g_signal_pipe[1], &wake, 1);
  signal_waiter.join();
  LS_LOG_INFO("server stopped");
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
  sub->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds live requests get to finish after SIGTERM/SIGINT before they are aborted")
      ->capture_default_str();
  sub->add_option("--header-timeout", o->header_timeout_s,
                  "Seconds a client has to send a request's headers (408 after)")
      ->capture_default_str();
  sub->add_option("--body-timeout", o->server.read_timeout_s,
                  "Seconds a client has to send a request's body once its headers are in")
      ->capture_default_str();
  sub->add_option("--chat-template", o->chat_template_path, "Jinja chat template file");
  sub->add_option("--tool-call-parser", o->server.tool_call_parser,
                  "Parse tool calls out of the model's text for tool_choice auto")
      ->check(CLI::IsMember({"hermes", "llama3_json", "mistral"}));
  sub->add_flag("--enable-auto-tool-choice", o->server.enable_auto_tool_choice,
                "Allow tool_choice \"auto\" (needs --tool-call-parser)");
  return [o] {
    if (o->server.enable_auto_tool_choice && o->server.tool_call_parser.empty()) {
      fmt::print(stderr, "error: --enable-auto-tool-choice needs --tool-call-parser\n");
      return 2;
    }
    o->server.shutdown_timeout_ms = static_cast<int>(o->shutdown_timeout_s * 1000);
    o->server.header_timeout_ms = static_cast<int>(o->header_timeout_s * 1000);
    if (!o->server.served_model_name.empty()) o->engine.served_model_name = o->server.served_model_name;
    return run_serve(*o);
  };
}

}  // namespace ls
