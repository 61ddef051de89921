#include "server/openai_response.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "server/openai_names.h"
#include "tokenizer/tokenizer.h"

namespace ls {

std::string make_response_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (static_cast<uint64_t>(std::random_device{}()) << 32)};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

double clamp_logprob(float logprob) {
  if (std::isnan(logprob)) return -9999.0;
  return std::max(static_cast<double>(logprob), -9999.0);
}

int64_t utf8_length(const std::string& text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

std::string sse_event(const Json& payload) {
  return "data: " + dump_json(payload) + "\n\n";
}

Json usage_json(const Usage& usage, bool with_details) {
  Json out = {{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  if (usage.cached_tokens >= 0) {
    out["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  } else if (with_details) {
    out["prompt_tokens_details"] = nullptr;
  }
  return out;
}

namespace {

Json finish_reason_json(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return finish_reason_text(reason);
}

bool all_digits(const std::string& text) {
  return !text.empty() && text.size() < 11 &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool contains(const std::vector<int32_t>& ids, int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

ResponseWriter::ResponseWriter(ApiKind kind, ResponseMeta meta, const Tokenizer& tokenizer,
                               const StopParams& stop, int32_t num_logprobs)
    : kind_(kind),
      meta_(std::move(meta)),
      tokenizer_(tokenizer),
      stop_(stop),
      num_logprobs_(num_logprobs) {}

// vLLM reports the matched stop string, the matched stop_token_ids entry as an integer, and
// null for EOS; the engine hands all of them over as text.
Json ResponseWriter::stop_reason_json(FinishReason finish_reason,
                                      const std::string& stop_reason) const {
  if (finish_reason != FinishReason::kStop || stop_reason.empty()) return nullptr;
  if (std::find(stop_.stop.begin(), stop_.stop.end(), stop_reason) != stop_.stop.end()) {
    return stop_reason;
  }
  if (all_digits(stop_reason)) {
    const int64_t id = std::stoll(stop_reason);
    if (contains(stop_.stop_token_ids, id)) return id;
    if (contains(stop_.eos_token_ids, id)) return nullptr;
  }
  return stop_reason;
}

std::string ResponseWriter::token_text(int32_t token_id) const {
  return tokenizer_.decode(std::span<const int32_t>(&token_id, 1), /*skip_special_tokens=*/false);
}

Json ResponseWriter::completion_logprobs(const TokenDelta& delta, int64_t text_offset) const {
  if (num_logprobs_ < 0 || delta.logprobs == nullptr) return nullptr;
  Json offsets = Json::array();
  Json token_logprobs = Json::array();
  Json tokens = Json::array();
  Json top = Json::array();
  auto add = [&](const TokenLogprob& chosen, const std::vector<TokenLogprob>* alternatives) {
    std::string text = token_text(chosen.token_id);
    offsets.push_back(text_offset);
    text_offset += utf8_length(text);
    token_logprobs.push_back(clamp_logprob(chosen.logprob));
    // vLLM's dict: the sampled token first, then the top N alternatives (a repeated token string
    // keeps its first position and takes the later value, like a Python dict).
    Json step = Json::object();
    step[text] = clamp_logprob(chosen.logprob);
    if (alternatives != nullptr) {
      const size_t count = std::min(alternatives->size(), static_cast<size_t>(num_logprobs_));
      for (size_t k = 0; k < count; ++k) {
        step[token_text((*alternatives)[k].token_id)] = clamp_logprob((*alternatives)[k].logprob);
      }
    }
    tokens.push_back(std::move(text));
    top.push_back(std::move(step));
  };
  if (delta.prompt.token_ids != nullptr && !delta.prompt.token_ids->empty()) {
    // The first prompt token has no logprob: its text with nulls, as vLLM echoes it.
    std::string text = token_text(delta.prompt.token_ids->front());
    offsets.push_back(text_offset);
    text_offset += utf8_length(text);
    token_logprobs.push_back(nullptr);
    tokens.push_back(std::move(text));
    top.push_back(nullptr);
    const std::vector<TokenLogprob>& prompt = *delta.prompt.logprobs;
    for (size_t i = 0; i < prompt.size(); ++i) {
      const bool has_top =
          delta.prompt.top_logprobs != nullptr && i < delta.prompt.top_logprobs->size();
      add(prompt[i], has_top ? &(*delta.prompt.top_logprobs)[i] : nullptr);
    }
  }
  const size_t num_tokens = delta.logprobs->size();
  for (size_t i = 0; i < num_tokens; ++i) {
    const bool has_top = delta.top_logprobs != nullptr && i < delta.top_logprobs->size();
    add((*delta.logprobs)[i], has_top ? &(*delta.top_logprobs)[i] : nullptr);
  }
  return Json{{"text_offset", std::move(offsets)},
              {"token_logprobs", std::move(token_logprobs)},
              {"tokens", std::move(tokens)},
              {"top_logprobs", std::move(top)}};
}

Json ResponseWriter::chat_logprobs(const TokenDelta& delta) const {
  if (num_logprobs_ < 0 || delta.logprobs == nullptr) return nullptr;
  auto entry = [&](const TokenLogprob& lp) {
    std::string text = token_text(lp.token_id);
    Json bytes = Json::array();
    for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
    return Json{{"token", std::move(text)},
                {"logprob", clamp_logprob(lp.logprob)},
                {"bytes", std::move(bytes)}};
  };
  Json content = Json::array();
  for (size_t i = 0; i < delta.logprobs->size(); ++i) {
    Json item = entry((*delta.logprobs)[i]);
    Json top = Json::array();
    if (delta.top_logprobs != nullptr && i < delta.top_logprobs->size()) {
      const auto& alternatives = (*delta.top_logprobs)[i];
      const size_t count = std::min(alternatives.size(), static_cast<size_t>(num_logprobs_));
      for (size_t k = 0; k < count; ++k) top.push_back(entry(alternatives[k]));
    }
    item["top_logprobs"] = std::move(top);
    content.push_back(std::move(item));
  }
  return Json{{"content", std::move(content)}};
}

Json ResponseWriter::full_response(const std::vector<ChoiceResult>& choices,
                                   const Usage& usage) const {
  const bool chat = kind_ == ApiKind::kChat;
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& choice = choices[i];
    TokenDelta delta{&choice.token_ids, &choice.logprobs, &choice.top_logprobs, {}};
    if (choice.echo_logprobs && choice.prompt_ids != nullptr) {
      delta.prompt = {choice.prompt_ids, &choice.prompt_logprobs, &choice.prompt_top_logprobs};
    }
    Json item = {{"index", static_cast<int64_t>(i)}};
    if (chat) {
      item["message"] = {
          {"role", "assistant"}, {"content", choice.text}, {"tool_calls", Json::array()}};
      if (choice.tool_calls) {
        if (choice.text.empty()) item["message"]["content"] = nullptr;
        item["message"]["tool_calls"] = *choice.tool_calls;
      }
      item["logprobs"] = chat_logprobs(delta);
    } else {
      item["text"] = choice.text;
      item["logprobs"] = completion_logprobs(delta, 0);
    }
    item["finish_reason"] = finish_reason_json(choice.finish_reason);
    if (choice.tool_calls_finish && choice.finish_reason == FinishReason::kStop) {
      item["finish_reason"] = "tool_calls";
    }
    item["stop_reason"] = stop_reason_json(choice.finish_reason, choice.stop_reason);
    if (!chat && choice.with_prompt_logprobs && choice.prompt_ids != nullptr) {
      item["prompt_logprobs"] = prompt_logprobs_json(*choice.prompt_ids, choice);
    }
    out_choices.push_back(std::move(item));
  }
  Json out = {{"id", meta_.id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"choices", std::move(out_choices)},
              {"usage", usage_json(usage, /*with_details=*/true)}};
  if (chat && !choices.empty() && choices.front().with_prompt_logprobs &&
      choices.front().prompt_ids != nullptr) {
    out["prompt_logprobs"] = prompt_logprobs_json(*choices.front().prompt_ids, choices.front());
  }
  return out;
}

Json ResponseWriter::chunk_envelope() const {
  const bool chat = kind_ == ApiKind::kChat;
  return Json{{"id", meta_.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model}};
}

std::string ResponseWriter::completion_chunk(int32_t index, const std::string& text,
                                             const TokenDelta& delta, int64_t text_offset,
                                             FinishReason finish_reason,
                                             const std::string& stop_reason) const {
  Json chunk = chunk_envelope();
  Json choice = {{"index", index},
                 {"text", text},
                 {"logprobs", completion_logprobs(delta, text_offset)},
                 {"finish_reason", finish_reason_json(finish_reason)},
                 {"stop_reason", stop_reason_json(finish_reason, stop_reason)}};
  chunk["choices"] = Json::array({std::move(choice)});
  chunk["usage"] = nullptr;
  return sse_event(chunk);
}

std::string ResponseWriter::chat_role_chunk(int32_t index) const {
  Json chunk = chunk_envelope();
  Json choice = {{"index", index},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  chunk["choices"] = Json::array({std::move(choice)});
  return sse_event(chunk);
}

std::string ResponseWriter::chat_chunk(int32_t index, const std::string& text,
                                       const TokenDelta& delta, FinishReason finish_reason,
                                       const std::string& stop_reason) const {
  Json chunk = chunk_envelope();
  Json choice = {{"index", index},
                 {"delta", {{"content", text}}},
                 {"logprobs", chat_logprobs(delta)},
                 {"finish_reason", finish_reason_json(finish_reason)}};
  // vLLM sets stop_reason only on the final chunk of a choice.
  if (finish_reason != FinishReason::kNone) {
    choice["stop_reason"] = stop_reason_json(finish_reason, stop_reason);
  }
  chunk["choices"] = Json::array({std::move(choice)});
  return sse_event(chunk);
}

Json ResponseWriter::prompt_logprobs_json(const std::vector<int32_t>& prompt_ids,
                                          const ChoiceResult& choice) const {
  Json out = Json::array();
  if (prompt_ids.empty()) return out;
  out.push_back(nullptr);
  for (size_t i = 0; i < choice.prompt_logprobs.size(); ++i) {
    const TokenLogprob& token = choice.prompt_logprobs[i];
    Json step = Json::object();
    auto entry = [&](const TokenLogprob& lp, int64_t rank) {
      return Json{{"logprob", clamp_logprob(lp.logprob)},
                  {"rank", rank},
                  {"decoded_token", token_text(lp.token_id)}};
    };
    const int64_t rank = i < choice.prompt_ranks.size() ? choice.prompt_ranks[i] : 0;
    step[std::to_string(token.token_id)] = entry(token, rank);
    if (i < choice.prompt_top_logprobs.size()) {
      const auto& top = choice.prompt_top_logprobs[i];
      for (size_t k = 0; k < top.size(); ++k) {
        const std::string key = std::to_string(top[k].token_id);
        if (!step.contains(key)) step[key] = entry(top[k], static_cast<int64_t>(k) + 1);
      }
    }
    out.push_back(std::move(step));
  }
  return out;
}

std::string ResponseWriter::usage_chunk(const Usage& usage) const {
  Json chunk = chunk_envelope();
  chunk["choices"] = Json::array();
  chunk["usage"] = usage_json(usage, /*with_details=*/false);
  return sse_event(chunk);
}

std::string ResponseWriter::chat_delta_chunk(int32_t index, Json delta_json,
                                             const TokenDelta& delta, FinishReason finish_reason,
                                             const std::string& stop_reason,
                                             bool tool_calls_finish) const {
  Json chunk = chunk_envelope();
  Json reason = finish_reason_json(finish_reason);
  if (tool_calls_finish && finish_reason == FinishReason::kStop) reason = "tool_calls";
  Json choice = {{"index", index},
                 {"delta", std::move(delta_json)},
                 {"logprobs", chat_logprobs(delta)},
                 {"finish_reason", std::move(reason)}};
  if (finish_reason != FinishReason::kNone) {
    choice["stop_reason"] = stop_reason_json(finish_reason, stop_reason);
  }
  chunk["choices"] = Json::array({std::move(choice)});
  return sse_event(chunk);
}

std::string make_tool_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("chatcmpl-tool-{:016x}{:016x}", rng(), rng());
}

}  // namespace ls
