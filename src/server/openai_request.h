#pragma once
// Turns an OpenAI /v1/completions or /v1/chat/completions body into what the engine runs:
// tokenized prompts, SamplingParams and StopParams, with vLLM's defaults, field rules and error
// messages (including the two context-length messages clients match on). Missing sampling
// fields come from Engine::default_sampling(), eos ids from Engine::default_stop().

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "server/json_fields.h"

namespace ls {

class Tokenizer;
class ChatTemplate;
namespace grammar {
class GrammarCache;
class ToolCallParser;
}  // namespace grammar

enum class ApiKind { kCompletion, kChat };

struct PromptInput {
  std::vector<int32_t> token_ids;  // [num_prompt_tokens]
  std::string text;                // the prompt as text (decoded when given as ids), for echo
};

struct ParsedRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::vector<PromptInput> prompts;  // completions: one or more; chat: exactly one
  SamplingParams sampling;
  StopParams stop;
  int32_t n = 1;  // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // -1: no logprobs. Completions: the int N; chat: top_logprobs when logprobs is true.
  int32_t num_logprobs = -1;
  bool echo = false;  // completions only: prepend the prompt to the text
  // Completions with echo and max_tokens 0 (lm-eval's loglikelihood requests): the engine runs
  // one token, as vLLM does, and the response shows only the prompt.
  bool echo_without_generation = false;
  // -1: none. Prompt tokens' logprobs + top N (vLLM's prompt_logprobs; echo with logprobs N
  // asks for them too), in sampling.prompt_logprobs as well.
  int32_t prompt_logprobs = -1;
  // Structured outputs and tool calls (server/structured_request.h).
  TokenConstraintFactory constraint;                      // null: unconstrained
  std::shared_ptr<const grammar::ToolCallParser> tool_parser;  // null: no tool-call parsing
  bool tool_calls_finish = false;  // finish_reason "tool_calls" when calls were made
};

// What parsing needs from the server around it.
struct RequestContext {
  const Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat requests are rejected
  std::string served_model_name;
  int32_t max_n = 128;  // largest accepted "n"
  // Text prompts longer than this many bytes are refused before tokenizing, since they cannot
  // fit the context (see Server::create); 0: no such check.
  int64_t max_prompt_bytes = 0;
  // Structured outputs: compiled grammars for this tokenizer (null: refused with 400).
  grammar::GrammarCache* grammars = nullptr;
  // --tool-call-parser (empty: none) and --enable-auto-tool-choice.
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
};

// Errors: kInvalidArgument (→ 400) for bad fields and too-long prompts, kNotFound (→ 404) for a
// model name that is not served.
Result<ParsedRequest> parse_completion_request(const Json& body, const RequestContext& ctx);
Result<ParsedRequest> parse_chat_request(const Json& body, const RequestContext& ctx);

// The "model" field, if given, must name the served model.
Status check_model_name(const Json& body, const RequestContext& ctx);

// Renders the chat template over `body`'s messages and tokenizes the result without special
// tokens (the template emits BOS itself). Used by chat completions and /tokenize. With
// refuse_past_context, a rendered prompt too many bytes to fit the context is refused before
// tokenizing (ctx.max_prompt_bytes).
Result<std::vector<int32_t>> tokenize_chat(const Json& body, bool default_add_special_tokens,
                                           const RequestContext& ctx,
                                           bool refuse_past_context = false);

// vLLM's two context-length checks. max_tokens < 0 means "not given" (chat default: the rest of
// the context), which only checks the prompt.
Status check_context_length(int64_t num_prompt_tokens, int64_t max_tokens, int32_t max_model_len);

}  // namespace ls
