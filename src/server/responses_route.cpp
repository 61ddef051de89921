// POST /v1/responses (OpenAI's Responses API) for plain text generation, as vLLM serves it:
// the input (a string, or message items with input_text / output_text parts) and instructions
// become chat messages, run through the chat completions path, and the result is reshaped into
// a Response object; with stream: true, into the Responses event sequence
// (response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done, response.completed).
// Tools, reasoning items, previous_response_id and background mode are refused with 400.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "server/openai_names.h"
#include "server/server_impl.h"

namespace ls {

namespace {

// Text of a Responses content value: a string, or parts of type input_text / output_text / text.
Result<Json> item_content(const Json& content, size_t index) {
  if (content.is_string()) return content;
  if (!content.is_array()) {
    return invalid_argument("input[{}].content must be a string or a list of parts", index);
  }
  Json parts = Json::array();
  for (const Json& part : content) {
    const Json* type = part.is_object() ? find_field(part, "type") : nullptr;
    const Json* text = part.is_object() ? find_field(part, "text") : nullptr;
    const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if ((kind != "input_text" && kind != "output_text" && kind != "text") || text == nullptr ||
        !text->is_string()) {
      return invalid_argument(
          "input[{}]: only input_text / output_text content parts are supported", index);
    }
    parts.push_back(Json{{"type", "text"}, {"text", *text}});
  }
  return parts;
}

// The chat completions body a Responses request stands for.
Result<Json> chat_body_from_responses(const Json& body) {
  for (const char* unsupported : {"previous_response_id", "tools", "reasoning", "background",
                                  "conversation", "prompt"}) {
    const Json* field = find_field(body, unsupported);
    if (field != nullptr && !(field->is_array() && field->empty())) {
      return invalid_argument("'{}' is not supported by this server's /v1/responses",
                              unsupported);
    }
  }
  Json messages = Json::array();
  if (const Json* instructions = find_field(body, "instructions")) {
    if (!instructions->is_string()) return invalid_argument("'instructions' must be a string");
    messages.push_back(Json{{"role", "system"}, {"content", *instructions}});
  }
  const Json* input = find_field(body, "input");
  if (input == nullptr) return invalid_argument("'input' is required");
  if (input->is_string()) {
    messages.push_back(Json{{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& item = (*input)[i];
      if (!item.is_object()) return invalid_argument("input[{}] must be an object", i);
      const Json* type = find_field(item, "type");
      if (type != nullptr && (!type->is_string() || type->get<std::string>() != "message")) {
        return invalid_argument("input[{}]: only message items are supported", i);
      }
      const Json* role = find_field(item, "role");
      if (role == nullptr || !role->is_string()) {
        return invalid_argument("input[{}] needs a string 'role'", i);
      }
      const Json* content = find_field(item, "content");
      if (content == nullptr) return invalid_argument("input[{}] needs 'content'", i);
      LS_ASSIGN_OR_RETURN(Json text, item_content(*content, i));
      messages.push_back(Json{{"role", *role}, {"content", std::move(text)}});
    }
  } else {
    return invalid_argument("'input' must be a string or a list of input items");
  }
  Json chat = Json::object();
  if (const Json* model = find_field(body, "model")) chat["model"] = *model;
  chat["messages"] = std::move(messages);
  for (const char* key : {"temperature", "top_p", "top_k", "seed", "stream", "min_p",
                          "repetition_penalty", "presence_penalty", "frequency_penalty"}) {
    if (const Json* v = find_field(body, key)) chat[key] = *v;
  }
  if (const Json* v = find_field(body, "max_output_tokens")) chat["max_tokens"] = *v;
  return chat;
}

struct ResponseIds {
  std::string response_id;
  std::string message_id;
  int64_t created_at = 0;
  std::string model;
};

Json response_object(const ResponseIds& ids, const Json& request, const std::string& status,
                     const std::string& text, const Json& usage, const char* incomplete) {
  Json output = Json::array();
  if (status != "in_progress") {
    output.push_back(Json{{"id", ids.message_id},
                          {"type", "message"},
                          {"status", "completed"},
                          {"role", "assistant"},
                          {"content", Json::array({Json{{"type", "output_text"},
                                                        {"text", text},
                                                        {"annotations", Json::array()},
                                                        {"logprobs", Json::array()}}})}});
  }
  auto field = [&](const char* key) {
    const Json* v = find_field(request, key);
    return v != nullptr ? *v : Json(nullptr);
  };
  Json out = {{"id", ids.response_id},
              {"object", "response"},
              {"created_at", ids.created_at},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details",
               incomplete != nullptr ? Json{{"reason", incomplete}} : Json(nullptr)},
              {"instructions", field("instructions")},
              {"max_output_tokens", field("max_output_tokens")},
              {"model", ids.model},
              {"output", std::move(output)},
              {"parallel_tool_calls", true},
              {"temperature", field("temperature")},
              {"tool_choice", "auto"},
              {"tools", Json::array()},
              {"top_p", field("top_p")},
              {"metadata", Json::object()},
              {"usage", usage}};
  return out;
}

Json responses_usage(const Json& chat_usage) {
  if (!chat_usage.is_object()) return nullptr;
  const int64_t input = chat_usage.value("prompt_tokens", int64_t{0});
  const int64_t output = chat_usage.value("completion_tokens", int64_t{0});
  int64_t cached = 0;
  auto details = chat_usage.find("prompt_tokens_details");
  if (details != chat_usage.end() && details->is_object()) {
    cached = details->value("cached_tokens", int64_t{0});
  }
  return Json{{"input_tokens", input},
              {"input_tokens_details", {{"cached_tokens", cached}}},
              {"output_tokens", output},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", input + output}};
}

// Turns the chat stream of one Responses request into Responses events.
class ResponsesStream {
 public:
  ResponsesStream(ResponseIds ids, Json request) : ids_(std::move(ids)), request_(std::move(request)) {}

  std::vector<std::string> opening() {
    std::vector<std::string> events;
    const Json created = response_object(ids_, request_, "in_progress", "", nullptr, nullptr);
    events.push_back(event("response.created", {{"response", created}}));
    events.push_back(event("response.in_progress", {{"response", created}}));
    events.push_back(event("response.output_item.added",
                           {{"output_index", 0},
                            {"item",
                             {{"id", ids_.message_id},
                              {"type", "message"},
                              {"status", "in_progress"},
                              {"role", "assistant"},
                              {"content", Json::array()}}}}));
    events.push_back(event("response.content_part.added",
                           {{"item_id", ids_.message_id},
                            {"output_index", 0},
                            {"content_index", 0},
                            {"part", part("")}}));
    return events;
  }

  // One chat SSE event ("data: {...}\n\n" or "data: [DONE]\n\n") in, Responses events out.
  std::vector<std::string> translate(const std::string& chat_event) {
    std::vector<std::string> events;
    const std::string prefix = "data: ";
    if (chat_event.rfind(prefix, 0) != 0) return events;
    std::string payload = chat_event.substr(prefix.size());
    while (!payload.empty() && (payload.back() == '\n' || payload.back() == '\r')) {
      payload.pop_back();
    }
    if (payload == "[DONE]") return closing();
    const Json chunk = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded() || !chunk.is_object()) return events;
    if (const Json* error = find_field(chunk, "error")) {
      failed_ = true;
      Json failed = response_object(ids_, request_, "failed", text_, nullptr, nullptr);
      failed["error"] = {{"code", "server_error"},
                         {"message", error->value("message", std::string("engine error"))}};
      events.push_back(event("response.failed", {{"response", std::move(failed)}}));
      return events;
    }
    if (const Json* usage = find_field(chunk, "usage")) usage_ = *usage;
    const Json* choices = find_field(chunk, "choices");
    if (choices == nullptr || !choices->is_array()) return events;
    for (const Json& choice : *choices) {
      const Json* delta = find_field(choice, "delta");
      const Json* content = delta != nullptr ? find_field(*delta, "content") : nullptr;
      if (content != nullptr && content->is_string() && !content->get<std::string>().empty()) {
        text_ += content->get<std::string>();
        events.push_back(event("response.output_text.delta",
                               {{"item_id", ids_.message_id},
                                {"output_index", 0},
                                {"content_index", 0},
                                {"delta", *content},
                                {"logprobs", Json::array()}}));
      }
      const Json* reason = find_field(choice, "finish_reason");
      if (reason != nullptr && reason->is_string() && reason->get<std::string>() == "length") {
        incomplete_ = true;
      }
    }
    return events;
  }

 private:
  Json part(const std::string& text) const {
    return Json{{"type", "output_text"},
                {"text", text},
                {"annotations", Json::array()},
                {"logprobs", Json::array()}};
  }

  std::vector<std::string> closing() {
    std::vector<std::string> events;
    if (failed_) return events;
    events.push_back(event("response.output_text.done", {{"item_id", ids_.message_id},
                                                         {"output_index", 0},
                                                         {"content_index", 0},
                                                         {"text", text_},
                                                         {"logprobs", Json::array()}}));
    events.push_back(event("response.content_part.done", {{"item_id", ids_.message_id},
                                                          {"output_index", 0},
                                                          {"content_index", 0},
                                                          {"part", part(text_)}}));
    const Json done = response_object(ids_, request_, incomplete_ ? "incomplete" : "completed",
                                      text_, responses_usage(usage_),
                                      incomplete_ ? "max_output_tokens" : nullptr);
    events.push_back(event("response.output_item.done",
                           {{"output_index", 0}, {"item", done["output"][0]}}));
    events.push_back(event(incomplete_ ? "response.incomplete" : "response.completed",
                           {{"response", done}}));
    return events;
  }

  std::string event(const char* type, Json fields) {
    Json payload = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [key, value] : fields.items()) payload[key] = std::move(value);
    return "event: " + std::string(type) + "\n" + sse_event(payload);
  }

  ResponseIds ids_;
  Json request_;
  std::string text_;
  Json usage_;
  int64_t sequence_ = 0;
  bool incomplete_ = false;
  bool failed_ = false;
};

}  // namespace

void Server::Impl::handle_responses(HttpRequest& req, HttpResponse& res) {
  if (stopping || draining) {
    send_error(res, make_api_error(503, "The server is shutting down"));
    return;
  }
  Result<Json> body = parse_json_object(req.body);
  if (!body.ok()) return send_status_error(res, body.status());
  Result<Json> chat = chat_body_from_responses(*body);
  if (!chat.ok()) return send_status_error(res, chat.status());
  bool stream = false;
  if (Status s = read_bool(*body, "stream", &stream); !s.ok()) return send_status_error(res, s);
  // The usage of a stream comes from the chat path's usage chunk.
  if (stream) (*chat)["stream_options"] = {{"include_usage", true}};
  Result<ParsedRequest> parsed = parse_chat_request(*chat, request_context);
  if (!parsed.ok()) return send_status_error(res, parsed.status());

  ResponseIds ids{make_response_id("resp_"), make_response_id("msg_"), unix_time_seconds(),
                  config.served_model_name};
  ResponseMeta meta{make_response_id("chatcmpl-"), ids.created_at, config.served_model_name};
  auto session = std::make_shared<GenerationSession>(std::move(parsed).value(), std::move(meta),
                                                     *engine, *tokenizer, metrics, live);
  if (Status status = session->start(); !status.ok()) return send_status_error(res, status);
  const auto poll = std::chrono::milliseconds(config.stream_poll_ms);
  if (!stream) {
    Result<std::string> response = session->wait_for_response(poll, req.client_gone);
    if (!response.ok()) {
      if (response.status().code() == StatusCode::kCancelled) res.close_connection = true;
      return send_status_error(res, response.status());
    }
    const Json chat_out = Json::parse(*response);
    const Json& choice = chat_out["choices"][0];
    const std::string text = choice["message"].value("content", std::string());
    const bool incomplete = choice.value("finish_reason", std::string()) == "length";
    send_json(res, dump_json(response_object(
                       ids, *body, incomplete ? "incomplete" : "completed", text,
                       responses_usage(chat_out["usage"]),
                       incomplete ? "max_output_tokens" : nullptr)));
    return;
  }
  auto translator = std::make_shared<ResponsesStream>(ids, *body);
  auto opened = std::make_shared<bool>(false);
  res.content_type = "text/event-stream";
  res.stream = [session, translator, opened, poll](StreamSink& sink) {
    try {
      std::vector<std::string> out;
      if (!*opened) {
        out = translator->opening();
        *opened = true;
      }
      std::vector<std::string> chat_events;
      const bool complete = session->next_events(poll, &chat_events);
      for (const std::string& e : chat_events) {
        for (std::string& r : translator->translate(e)) out.push_back(std::move(r));
      }
      for (const std::string& e : out) {
        if (!sink.write(e)) {
          session->abort();
          return false;
        }
      }
      if (complete) {
        sink.done();
        return true;
      }
      if (out.empty() && sink.client_gone()) {
        session->abort();
        return false;
      }
      return true;
    } catch (const std::exception& e) {
      LS_LOG_ERROR("server: responses stream failed: {}", e.what());
    }
    session->abort();
    return false;
  };
  res.on_stream_end = [session](bool success) {
    if (!success) session->abort();
  };
}

}  // namespace ls
