#pragma once
// JSON shapes of vLLM's OpenAI responses: full completion / chat responses, the SSE chunks of a
// stream (completions: every field present, "usage":null; chat: only the fields vLLM sets), the
// usage-only chunk ("choices":[]), and both logprob formats. -inf logprobs become -9999.0.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "server/json_fields.h"
#include "server/openai_request.h"

namespace ls {

class Tokenizer;

struct ResponseMeta {
  std::string id;  // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens found in the prefix cache: prompt_tokens_details.cached_tokens; -1 (prefix
  // caching off) leaves prompt_tokens_details null, as vLLM does.
  int64_t cached_tokens = -1;
};

// Everything one choice produced, for non-streaming responses.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> token_ids;                       // [num_tokens]
  std::vector<TokenLogprob> logprobs;                   // [num_tokens] when asked
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [num_tokens][N] when asked
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;
  // Chat with tool parsing: the message's tool_calls (then content is null when empty), and
  // whether finish_reason becomes "tool_calls".
  std::optional<Json> tool_calls;
  bool tool_calls_finish = false;
  // Prompt logprobs when asked (RequestOutput's fields): entry i is prompt token i + 1.
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  std::vector<int32_t> prompt_ranks;
  const std::vector<int32_t>* prompt_ids = nullptr;  // the choice's prompt, for the two below
  bool echo_logprobs = false;         // completions echo + logprobs: prompt entries go first
  bool with_prompt_logprobs = false;  // add vLLM's "prompt_logprobs"
};

// The prompt's part of an echoed completion's logprobs: the first token gets nulls, token i + 1
// the entries of prompt_logprobs[i].
struct PromptDelta {
  const std::vector<int32_t>* token_ids = nullptr;  // [num_prompt_tokens]
  const std::vector<TokenLogprob>* logprobs = nullptr;
  const std::vector<std::vector<TokenLogprob>>* top_logprobs = nullptr;
};

// One output's new tokens and their logprobs, for a stream chunk.
struct TokenDelta {
  const std::vector<int32_t>* token_ids = nullptr;
  const std::vector<TokenLogprob>* logprobs = nullptr;
  const std::vector<std::vector<TokenLogprob>>* top_logprobs = nullptr;
  PromptDelta prompt;  // completions with echo: goes first
};

class ResponseWriter {
 public:
  ResponseWriter(ApiKind kind, ResponseMeta meta, const Tokenizer& tokenizer,
                 const StopParams& stop, int32_t num_logprobs);

  const ResponseMeta& meta() const { return meta_; }

  // The whole non-streaming response; choices are indexed in order.
  Json full_response(const std::vector<ChoiceResult>& choices, const Usage& usage) const;

  // "data: {…}\n\n" events of a stream.
  // Completions: one choice's delta. text_offset is the text length (code points) already sent.
  std::string completion_chunk(int32_t index, const std::string& text, const TokenDelta& delta,
                               int64_t text_offset, FinishReason finish_reason,
                               const std::string& stop_reason) const;
  // Chat: the first chunk of a choice, {"role":"assistant","content":""}.
  std::string chat_role_chunk(int32_t index) const;
  std::string chat_chunk(int32_t index, const std::string& text, const TokenDelta& delta,
                         FinishReason finish_reason, const std::string& stop_reason) const;
  std::string usage_chunk(const Usage& usage) const;
  // vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...],
  // each dict the prompt token first, then its top N.
  Json prompt_logprobs_json(const std::vector<int32_t>& prompt_ids,
                            const ChoiceResult& choice) const;
  // Chat with tool parsing: a chunk whose delta is given ({"content"} and/or {"tool_calls"}).
  std::string chat_delta_chunk(int32_t index, Json delta_json, const TokenDelta& delta,
                               FinishReason finish_reason, const std::string& stop_reason,
                               bool tool_calls_finish) const;

 private:
  Json chunk_envelope() const;
  Json stop_reason_json(FinishReason finish_reason, const std::string& stop_reason) const;
  Json completion_logprobs(const TokenDelta& delta, int64_t text_offset) const;
  Json chat_logprobs(const TokenDelta& delta) const;
  std::string token_text(int32_t token_id) const;

  ApiKind kind_;
  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  const StopParams& stop_;
  int32_t num_logprobs_;
};

Json usage_json(const Usage& usage, bool with_details);
// Logprob as vLLM sends it: max(logprob, -9999.0), with NaN also -9999.0.
double clamp_logprob(float logprob);
// Number of Unicode code points in UTF-8 text (Python's len()).
int64_t utf8_length(const std::string& text);
std::string sse_event(const Json& payload);
// "chatcmpl-tool-" and 32 random hex digits, as vLLM names tool calls.
std::string make_tool_call_id();

}  // namespace ls
