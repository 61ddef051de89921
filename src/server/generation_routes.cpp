// POST /v1/completions and /v1/chat/completions: parse, submit, then either wait for the whole
// response or stream SSE as HTTP chunks (the transport's StreamSink).

#include <chrono>

#include "core/clock.h"
#include "core/log.h"
#include "server/openai_names.h"
#include "server/server_impl.h"

namespace ls {

namespace {

// One call of the chunked content provider: waits up to `poll` for outputs and writes their
// events, one HTTP chunk each. The transport calls it again until sink.done(); returning false
// drops the connection. A client that is gone (a failed write, or a socket that is no longer
// writable while we wait) aborts the engine requests.
bool pump_stream(GenerationSession& session, StreamSink& sink,
                 std::chrono::milliseconds poll) {
  try {
    std::vector<std::string> events;
    const bool complete = session.next_events(poll, &events);
    for (const std::string& event : events) {
      if (!sink.write(event)) {
        session.abort();
        return false;
      }
    }
    if (complete) {
      sink.done();
      return true;
    }
    if (events.empty() && sink.client_gone()) {
      session.abort();
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    LS_LOG_ERROR("server: stream failed: {}", e.what());
  } catch (...) {
    LS_LOG_ERROR("server: stream failed with an unknown exception");
  }
  session.abort();
  return false;
}

}  // namespace

void Server::Impl::handle_generation(ApiKind kind, HttpRequest& req, HttpResponse& res) {
  if (stopping || draining) {
    send_error(res, make_api_error(503, "The server is shutting down"));
    return;
  }
  Result<Json> body = parse_json_object(req.body);
  if (!body.ok()) return send_status_error(res, body.status());
  Result<ParsedRequest> parsed = kind == ApiKind::kChat
                                     ? parse_chat_request(*body, request_context)
                                     : parse_completion_request(*body, request_context);
  if (!parsed.ok()) return send_status_error(res, parsed.status());

  const bool stream = parsed->stream;
  ResponseMeta meta{make_response_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                    unix_time_seconds(), config.served_model_name};
  auto session = std::make_shared<GenerationSession>(std::move(parsed).value(), std::move(meta),
                                                     *engine, *tokenizer, metrics, live);
  // Too-long prompts and bad fields were caught above; what the engine still refuses here
  // (e.g. it is out of capacity or shutting down) goes out as a plain JSON error, since no
  // header has been sent yet.
  if (Status status = session->start(); !status.ok()) return send_status_error(res, status);

  if (!stream) {
    // A client that closes its connection while waiting has its engine requests aborted
    // within ~stream_poll_ms, as a streaming one does.
    Result<std::string> response = session->wait_for_response(
        std::chrono::milliseconds(config.stream_poll_ms), req.client_gone);
    if (!response.ok() && response.status().code() == StatusCode::kCancelled) {
      res.close_connection = true;
      return send_status_error(res, response.status());
    }
    if (!response.ok()) return send_status_error(res, response.status());
    send_json(res, *response);
    return;
  }
  const auto poll = std::chrono::milliseconds(config.stream_poll_ms);
  res.content_type = "text/event-stream";
  res.stream = [session, poll](StreamSink& sink) { return pump_stream(*session, sink, poll); };
  // success == false: the headers or a chunk could not be written, or the provider gave up.
  res.on_stream_end = [session](bool success) {
    if (!success) session->abort();
  };
}

void Server::Impl::install_generation_routes() {
  router.add("POST", "/v1/completions", [this](HttpRequest& req, HttpResponse& res) {
    handle_generation(ApiKind::kCompletion, req, res);
  });
  router.add("POST", "/v1/chat/completions", [this](HttpRequest& req, HttpResponse& res) {
    handle_generation(ApiKind::kChat, req, res);
  });
  router.add("POST", "/v1/responses", [this](HttpRequest& req, HttpResponse& res) {
    handle_responses(req, res);
  });
}

}  // namespace ls
