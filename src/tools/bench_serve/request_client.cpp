#include "tools/bench_serve/request_client.h"

#include <fmt/format.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "core/clock.h"

namespace ls {

using Json = nlohmann::ordered_json;

std::string make_request_body(const Endpoint& endpoint, const RequestSpec& spec) {
  Json body;
  body["model"] = spec.model;
  if (endpoint.chat) {
    body["messages"] = Json::array();
    for (size_t i = 0; i < spec.history.size(); ++i) {
      body["messages"].push_back(
          Json{{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", spec.history[i]}});
    }
    body["messages"].push_back(Json{{"role", "user"}, {"content", spec.prompt}});
    body["temperature"] = spec.temperature;
    body["max_completion_tokens"] = spec.max_tokens;
  } else {
    std::string prompt;
    for (const std::string& turn : spec.history) prompt += turn;
    body["prompt"] = prompt + spec.prompt;
    body["temperature"] = spec.temperature;
    body["repetition_penalty"] = 1.0;
    body["max_tokens"] = spec.max_tokens;
    body["logprobs"] = nullptr;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (spec.ignore_eos) body["ignore_eos"] = true;
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void SseTimer::feed(const char* data, size_t size, double now_s) {
  pending_.append(data, size);
  size_t start = 0;
  for (size_t nl = pending_.find('\n', start); nl != std::string::npos;
       nl = pending_.find('\n', start)) {
    handle_line(pending_.substr(start, nl - start), now_s);
    start = nl + 1;
  }
  pending_.erase(0, start);
}

void SseTimer::handle_line(const std::string& raw, double now_s) {
  // Like the vLLM client: strip, skip blank lines and ":" comments, drop the "data:" prefix.
  const size_t first = raw.find_first_not_of(" \t\r");
  if (first == std::string::npos || raw[first] == ':') return;
  const size_t last = raw.find_last_not_of(" \t\r");
  std::string line = raw.substr(first, last - first + 1);
  if (line.rfind("data:", 0) == 0) {
    line.erase(0, 5);
    if (!line.empty() && line[0] == ' ') line.erase(0, 1);
  }
  if (line == "[DONE]") {
    done_ = true;
    return;
  }
  const Json message = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object()) {
    outcome_->error = "unparseable stream message: " + line.substr(0, 200);
    return;
  }
  if (const auto error = message.find("error"); error != message.end()) {
    const auto text = error->is_object() ? error->find("message") : error->end();
    outcome_->error = (error->is_object() && text != error->end() && text->is_string())
                          ? text->get<std::string>()
                          : error->dump();
    return;
  }
  if (const auto choices = message.find("choices");
      choices != message.end() && choices->is_array() && !choices->empty()) {
    if (!first_received_) {
      first_received_ = true;
      outcome_->ttft_s = now_s - outcome_->start_s;
    } else {
      outcome_->itl_s.push_back(now_s - last_s_);
    }
    last_s_ = now_s;
    const Json& choice = choices->front();
    const Json* text = nullptr;
    if (chat_) {
      const auto delta = choice.find("delta");
      if (delta != choice.end() && delta->is_object()) {
        const auto content = delta->find("content");
        if (content != delta->end()) text = &*content;
      }
    } else {
      const auto it = choice.find("text");
      if (it != choice.end()) text = &*it;
    }
    if (text != nullptr && text->is_string()) outcome_->generated_text += text->get<std::string>();
  }
  if (const auto usage = message.find("usage"); usage != message.end() && usage->is_object()) {
    const auto tokens = usage->find("completion_tokens");
    if (tokens != usage->end() && tokens->is_number_integer()) {
      outcome_->output_tokens = tokens->get<int32_t>();
    }
    const auto prompt = usage->find("prompt_tokens");
    if (prompt != usage->end() && prompt->is_number_integer()) {
      outcome_->usage_prompt_tokens = prompt->get<int32_t>();
    }
    const auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) {
      const auto cached = details->find("cached_tokens");
      if (cached != details->end() && cached->is_number_integer()) {
        outcome_->cached_tokens = cached->get<int32_t>();
      }
    }
  }
}

void SseTimer::finish() {
  if (!pending_.empty()) handle_line(pending_, last_s_);
  pending_.clear();
  // An in-band error fails the request even after tokens (vLLM's client would count it).
  if (!outcome_->error.empty()) {
    outcome_->success = false;
  } else if (!first_received_) {
    outcome_->success = false;
    outcome_->error =
        "Never received a valid chunk to calculate TTFT. This response will be marked as failed!";
  } else {
    outcome_->success = true;
  }
  outcome_->latency_s = first_received_ ? last_s_ - outcome_->start_s : 0.0;
}

RequestOutcome send_streaming_request(const Endpoint& endpoint, const RequestSpec& spec) {
  RequestOutcome outcome;
  outcome.prompt_len = spec.prompt_len;
  try {
    httplib::Client client(endpoint.base_url);
    client.set_connection_timeout(30, 0);
    const auto timeout_s = static_cast<time_t>(endpoint.timeout_s);
    client.set_read_timeout(timeout_s, 0);
    client.set_write_timeout(timeout_s, 0);
    client.set_keep_alive(false);

    httplib::Request request;
    request.method = "POST";
    request.path = endpoint.path;
    request.headers = {{"Content-Type", "application/json"}};
    if (!endpoint.api_key.empty()) {
      request.headers.emplace("Authorization", "Bearer " + endpoint.api_key);
    }
    request.body = make_request_body(endpoint, spec);
    int status = 0;
    std::string error_body;
    SseTimer timer(&outcome, endpoint.chat);
    request.response_handler = [&](const httplib::Response& response) {
      status = response.status;
      return true;
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (status == 200) {
        timer.feed(data, size, now_seconds());
      } else if (error_body.size() < 4096) {
        error_body.append(data, size);
      }
      return true;
    };
    outcome.start_s = now_seconds();
    const httplib::Result result = client.send(request);
    if (!result) {
      outcome.error = "request failed: " + httplib::to_string(result.error());
      return outcome;
    }
    if (status != 200) {
      outcome.error = fmt::format("HTTP {}: {}", status, error_body);
      return outcome;
    }
    timer.finish();
  } catch (const std::exception& e) {
    outcome.success = false;
    outcome.error = e.what();
  }
  return outcome;
}

}  // namespace ls
