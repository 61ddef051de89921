#include "server/generation_session.h"

#include <algorithm>

#include "core/clock.h"
#include "core/log.h"
#include "server/api_error.h"

namespace ls {

void LiveRequests::add(const std::vector<std::string>& ids) {
  std::lock_guard lock(mu_);
  ids_.insert(ids.begin(), ids.end());
}

void LiveRequests::remove(const std::vector<std::string>& ids) {
  std::lock_guard lock(mu_);
  for (const std::string& id : ids) {
    const auto it = ids_.find(id);
    if (it != ids_.end()) ids_.erase(it);
  }
}

std::vector<std::string> LiveRequests::snapshot() const {
  std::lock_guard lock(mu_);
  return {ids_.begin(), ids_.end()};
}

GenerationSession::GenerationSession(ParsedRequest request, ResponseMeta meta, Engine& engine,
                                     const Tokenizer& tokenizer,
                                     std::shared_ptr<ServerMetrics> metrics, LiveRequests& live)
    : request_(std::move(request)),
      engine_(engine),
      tokenizer_(tokenizer),
      metrics_(std::move(metrics)),
      live_(live),
      writer_(request_.kind, std::move(meta), tokenizer_, request_.stop, request_.num_logprobs),
      choices_(request_.prompts.size() * static_cast<size_t>(request_.n)) {}

GenerationSession::~GenerationSession() {
  if (!complete_) abort();
  live_.remove(engine_ids_);
}

Status GenerationSession::start() {
  const int64_t submit_ns = now_ns();
  for (size_t p = 0; p < request_.prompts.size(); ++p) {
    const PromptInput& prompt = request_.prompts[p];
    GenerateRequest engine_request;
    engine_request.request_id = fmt::format("{}-{}", writer_.meta().id, p);
    engine_request.prompt_ids = prompt.token_ids;
    engine_request.sampling = request_.sampling;
    engine_request.stop = request_.stop;
    engine_request.n = request_.n;
    engine_request.constraint = request_.constraint;
    // One timer per choice; the engine delivers a request's outputs in order on one thread.
    auto timers = std::make_shared<std::vector<RequestTimer>>(
        static_cast<size_t>(request_.n),
        RequestTimer(metrics_, submit_ns, static_cast<int32_t>(prompt.token_ids.size())));
    // Per engine request: the parameter histograms are observed once all its choices ended.
    struct Params {
      int32_t unfinished = 0;
      int32_t max_generation_tokens = 0;
    };
    auto params = std::make_shared<Params>(Params{request_.n, 0});
    OutputSink sink = [channel = channel_, timers, params, metrics = metrics_, n = request_.n,
                       max_tokens = request_.stop.max_tokens,
                       prompt_index = static_cast<int32_t>(p)](const RequestOutput& output) {
      if (output.index >= 0 && static_cast<size_t>(output.index) < timers->size()) {
        (*timers)[static_cast<size_t>(output.index)].on_output(output, now_ns());
      }
      if (output.finished && params->unfinished > 0) {
        params->max_generation_tokens =
            std::max(params->max_generation_tokens, output.completion_tokens);
        if (--params->unfinished == 0 && metrics) {
          metrics->observe_request_params(n, max_tokens, params->max_generation_tokens);
        }
      }
      channel->push(prompt_index, output);
    };
    const std::string id = engine_request.request_id;
    Status status = engine_.submit(std::move(engine_request), std::move(sink));
    if (!status.ok()) {
      abort();
      complete_ = true;
      return status;
    }
    engine_ids_.push_back(id);
    live_.add({id});
  }
  return Status::ok_status();
}

void GenerationSession::abort() {
  for (const std::string& id : engine_ids_) engine_.abort(id);
}

Usage GenerationSession::usage() const {
  Usage usage;
  for (const PromptInput& prompt : request_.prompts) {
    usage.prompt_tokens += static_cast<int64_t>(prompt.token_ids.size());
  }
  for (const ChoiceState& choice : choices_) usage.completion_tokens += choice.completion_tokens;
  // Cached prompt tokens, once per prompt (its n choices are one engine request).
  for (size_t p = 0; p < request_.prompts.size(); ++p) {
    int32_t cached = -1;
    for (int32_t i = 0; i < request_.n; ++i) {
      cached = std::max(cached, choices_[p * static_cast<size_t>(request_.n) + static_cast<size_t>(i)].cached_tokens);
    }
    if (cached >= 0) usage.cached_tokens = std::max<int64_t>(usage.cached_tokens, 0) + cached;
  }
  return usage;
}

void GenerationSession::apply(const ChannelItem& item, std::vector<std::string>* events) {
  const RequestOutput& out = item.output;
  if (out.index < 0 || out.index >= request_.n || item.prompt_index < 0 ||
      static_cast<size_t>(item.prompt_index) >= request_.prompts.size()) {
    LS_LOG_WARN("server: dropping an engine output with choice index {}", out.index);
    return;
  }
  const int32_t index = item.prompt_index * request_.n + out.index;
  ChoiceState& choice = choices_[static_cast<size_t>(index)];
  if (choice.finished) return;
  choice.cached_tokens = std::max(choice.cached_tokens, out.cached_tokens);

  if (out.finish_reason == FinishReason::kError) {
    error_ = out.error.empty() ? std::string("the engine failed to run the request") : out.error;
    // 503 for a request the engine refused because it is down, 500 for a step that failed.
    error_code_ = out.error_code == StatusCode::kOk ? StatusCode::kInternal : out.error_code;
    abort();
    complete_ = true;
    if (events != nullptr) {
      events->push_back(api_error_from_status(Status(error_code_, error_)).sse_event());
      events->push_back("data: [DONE]\n\n");
    }
    return;
  }

  ChoiceResult& result = choice.result;
  const PromptInput& prompt = request_.prompts[static_cast<size_t>(item.prompt_index)];
  if (!out.prompt_logprobs.empty() || !out.prompt_ranks.empty()) {
    result.prompt_logprobs = out.prompt_logprobs;
    result.prompt_top_logprobs = out.prompt_top_logprobs;
    result.prompt_ranks = out.prompt_ranks;
  }
  if (request_.echo_without_generation) {
    // The one token run for an echo with max_tokens 0 is not shown (vLLM).
    RequestOutput hidden = out;
    hidden.text.clear();
    hidden.token_ids.clear();
    hidden.logprobs.clear();
    hidden.top_logprobs.clear();
    apply_output(index, prompt, hidden, events);
    return;
  }
  apply_output(index, prompt, out, events);
}

void GenerationSession::apply_output(int32_t index, const PromptInput& prompt,
                                     const RequestOutput& out, std::vector<std::string>* events) {
  ChoiceState& choice = choices_[static_cast<size_t>(index)];
  ChoiceResult& result = choice.result;
  result.text += out.text;
  result.token_ids.insert(result.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
  result.logprobs.insert(result.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  result.top_logprobs.insert(result.top_logprobs.end(), out.top_logprobs.begin(),
                             out.top_logprobs.end());
  if (out.finished) {
    choice.finished = true;
    ++num_finished_;
    result.finish_reason = out.finish_reason;
    result.stop_reason = out.stop_reason;
    choice.completion_tokens = out.completion_tokens > 0
                                   ? out.completion_tokens
                                   : static_cast<int32_t>(result.token_ids.size());
  }

  if (events != nullptr) {
    // Outputs with neither tokens nor text (a chunked-prefill step) are not sent, as in vLLM;
    // the final output of a choice always is, since it carries finish_reason.
    const bool has_content = !out.token_ids.empty() || !out.text.empty() || out.finished;
    TokenDelta delta{&out.token_ids, &out.logprobs, &out.top_logprobs, {}};
    const FinishReason reason = out.finished ? out.finish_reason : FinishReason::kNone;
    if (request_.kind == ApiKind::kChat) {
      if (!role_sent_) {
        for (int32_t i = 0; i < static_cast<int32_t>(choices_.size()); ++i) {
          events->push_back(writer_.chat_role_chunk(i));
        }
        role_sent_ = true;
      }
      if (has_content && request_.tool_parser) {
        apply_tool_stream(index, choice, out, events);
      } else if (has_content) {
        events->push_back(writer_.chat_chunk(index, out.text, delta, reason, out.stop_reason));
      }
    } else if (has_content) {
      std::string text = out.text;
      if (request_.echo && !choice.echoed) {
        text = prompt.text + text;
        if (request_.prompt_logprobs >= 0 && request_.num_logprobs >= 0) {
          delta.prompt = {&prompt.token_ids, &result.prompt_logprobs,
                          &result.prompt_top_logprobs};
        }
        choice.echoed = true;
      }
      events->push_back(writer_.completion_chunk(index, text, delta, choice.text_sent_chars, reason,
                                                 out.stop_reason));
      choice.text_sent_chars += utf8_length(text);
    }
  }

  if (num_finished_ == static_cast<int32_t>(choices_.size())) {
    complete_ = true;
    if (events != nullptr) finish_stream(events);
  }
}

void GenerationSession::apply_tool_stream(int32_t index, ChoiceState& choice,
                                          const RequestOutput& out,
                                          std::vector<std::string>* events) {
  if (!choice.tools) choice.tools = std::make_unique<grammar::ToolCallStreamer>(*request_.tool_parser);
  const grammar::ToolCallStreamer::Delta d = choice.tools->push(out.text, out.finished);
  Json delta_json = Json::object();
  if (!d.content.empty()) delta_json["content"] = d.content;
  if (!d.calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : d.calls) {
      Json call = {{"index", c.index}};
      if (c.first) {
        choice.tool_call_ids.push_back(make_tool_call_id());
        call["id"] = choice.tool_call_ids.back();
        call["type"] = "function";
        call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
      } else {
        call["function"] = {{"arguments", c.arguments}};
      }
      calls.push_back(std::move(call));
    }
    delta_json["tool_calls"] = std::move(calls);
  }
  if (delta_json.empty() && !out.finished) return;
  if (delta_json.empty()) delta_json["content"] = "";
  const TokenDelta delta{&out.token_ids, &out.logprobs, &out.top_logprobs};
  const FinishReason reason = out.finished ? out.finish_reason : FinishReason::kNone;
  const bool tool_finish = request_.tool_calls_finish && choice.tools->calls_started() > 0;
  events->push_back(writer_.chat_delta_chunk(index, std::move(delta_json), delta, reason,
                                             out.stop_reason, tool_finish));
}

void GenerationSession::finish_stream(std::vector<std::string>* events) {
  if (request_.include_usage) events->push_back(writer_.usage_chunk(usage()));
  events->push_back("data: [DONE]\n\n");
}

Result<std::string> GenerationSession::wait_for_response(
    std::chrono::milliseconds poll, const std::function<bool()>& client_gone) {
  while (!complete_) {
    if (client_gone && client_gone()) {
      abort();
      return cancelled("the client closed its connection");
    }
    for (const ChannelItem& item : channel_->pop_all(poll)) {
      apply(item, nullptr);
      if (complete_) break;
    }
  }
  if (!error_.empty()) return Status(error_code_, error_);
  std::vector<ChoiceResult> results;
  results.reserve(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceResult result = choices_[i].result;
    const PromptInput& prompt = request_.prompts[i / static_cast<size_t>(request_.n)];
    if (request_.echo) result.text = prompt.text + result.text;
    result.prompt_ids = &prompt.token_ids;
    result.with_prompt_logprobs = request_.prompt_logprobs >= 0;
    result.echo_logprobs = request_.echo && request_.prompt_logprobs >= 0 &&
                           request_.num_logprobs >= 0;
    if (request_.tool_parser) {
      const grammar::ToolParse parse = request_.tool_parser->parse(result.text, /*final=*/true);
      Json calls = Json::array();
      for (const grammar::ParsedToolCall& c : parse.calls) {
        calls.push_back({{"id", make_tool_call_id()},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      }
      result.text = parse.content;
      result.tool_calls_finish = request_.tool_calls_finish && !parse.calls.empty();
      result.tool_calls = std::move(calls);
    }
    results.push_back(std::move(result));
  }
  return dump_json(writer_.full_response(results, usage()));
}

bool GenerationSession::next_events(std::chrono::milliseconds wait,
                                    std::vector<std::string>* events) {
  if (complete_) return true;
  for (const ChannelItem& item : channel_->pop_all(wait)) {
    apply(item, events);
    if (complete_) break;
  }
  return complete_;
}

}  // namespace ls
