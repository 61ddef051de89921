#include "server/openai_request.h"

#include <algorithm>
#include <charconv>
#include <system_error>
#include <limits>

#include "server/chat_messages.h"
#include "server/structured_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ls {

namespace {

int32_t clamp_to_int32(int64_t value) {
  return static_cast<int32_t>(std::clamp<int64_t>(value, std::numeric_limits<int32_t>::min(),
                                                  std::numeric_limits<int32_t>::max()));
}

Status read_float_into(const Json& body, std::string_view key, float* out) {
  std::optional<double> value;
  LS_RETURN_IF_ERROR(read_double(body, key, &value));
  if (value) *out = static_cast<float>(*value);
  return Status::ok_status();
}

// Sampling fields shared by both endpoints; anything not given keeps the engine's default
// (generation_config.json).
Status read_sampling(const Json& body, const Engine& engine, SamplingParams* sampling) {
  *sampling = engine.default_sampling();
  LS_RETURN_IF_ERROR(read_float_into(body, "temperature", &sampling->temperature));
  LS_RETURN_IF_ERROR(read_float_into(body, "top_p", &sampling->top_p));
  LS_RETURN_IF_ERROR(read_float_into(body, "min_p", &sampling->min_p));
  LS_RETURN_IF_ERROR(read_float_into(body, "repetition_penalty", &sampling->repetition_penalty));
  LS_RETURN_IF_ERROR(read_float_into(body, "presence_penalty", &sampling->presence_penalty));
  LS_RETURN_IF_ERROR(read_float_into(body, "frequency_penalty", &sampling->frequency_penalty));
  std::optional<int64_t> top_k;
  LS_RETURN_IF_ERROR(read_int64(body, "top_k", &top_k));
  if (top_k) sampling->top_k = clamp_to_int32(*top_k);
  std::optional<int64_t> seed;
  LS_RETURN_IF_ERROR(read_int64(body, "seed", &seed));
  if (seed) sampling->seed = static_cast<uint64_t>(*seed);
  // logit_bias: {"token id": bias}, each bias clamped to [-100, 100] as vLLM does; ids are
  // checked against the vocabulary by SamplingParams::validate.
  if (const Json* bias = find_field(body, "logit_bias")) {
    if (!bias->is_object()) return invalid_argument("'logit_bias' must be an object");
    for (const auto& [key, value] : bias->items()) {
      int64_t id = 0;
      const char* end = key.data() + key.size();
      const auto [ptr, ec] = std::from_chars(key.data(), end, id);
      if (key.empty() || ec != std::errc() || ptr != end || id < 0 ||
          id > std::numeric_limits<int32_t>::max()) {
        return invalid_argument("'logit_bias' keys must be token ids, got '{}'", key);
      }
      if (!value.is_number()) {
        return invalid_argument("'logit_bias' values must be numbers (token '{}')", key);
      }
      const double clamped = std::clamp(value.get<double>(), -100.0, 100.0);
      sampling->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(clamped));
    }
  }
  return Status::ok_status();
}

// prompt_logprobs (vLLM's extra field on both endpoints): -1 when not given.
Status read_prompt_logprobs(const Json& body, int32_t* out) {
  std::optional<int64_t> value;
  LS_RETURN_IF_ERROR(read_int64(body, "prompt_logprobs", &value));
  if (!value) return Status::ok_status();
  if (*value < 0) {
    // vLLM's -1 means "the whole vocabulary", which max_logprobs (20) refuses anyway.
    return invalid_argument("prompt_logprobs must be non-negative, got {}", *value);
  }
  *out = clamp_to_int32(*value);
  return Status::ok_status();
}

// truncate_prompt_tokens: keep the last k prompt tokens (-1: max_model_len), as vLLM truncates
// from the left. 0 when not given.
Status read_truncate_prompt_tokens(const Json& body, const Engine& engine, int32_t* out) {
  std::optional<int64_t> value;
  LS_RETURN_IF_ERROR(read_int64(body, "truncate_prompt_tokens", &value));
  if (!value) return Status::ok_status();
  if (*value == -1) {
    *out = engine.max_model_len();
    return Status::ok_status();
  }
  if (*value < 1) {
    return invalid_argument("truncate_prompt_tokens must be -1 or at least 1, got {}", *value);
  }
  if (*value > engine.max_model_len()) {
    return invalid_argument(
        "truncate_prompt_tokens value ({}) is greater than max_model_len ({}). Please, select a "
        "smaller truncation size.",
        *value, engine.max_model_len());
  }
  *out = static_cast<int32_t>(*value);
  return Status::ok_status();
}

void truncate_left(std::vector<int32_t>& ids, int32_t keep) {
  if (keep > 0 && static_cast<int64_t>(ids.size()) > keep) {
    ids.erase(ids.begin(), ids.end() - keep);
  }
}

// Stop fields shared by both endpoints; max_tokens is set by the caller.
Status read_stop(const Json& body, const Engine& engine, StopParams* stop) {
  *stop = engine.default_stop();
  std::optional<int64_t> min_tokens;
  LS_RETURN_IF_ERROR(read_int64(body, "min_tokens", &min_tokens));
  if (min_tokens) stop->min_tokens = clamp_to_int32(*min_tokens);
  std::vector<int64_t> stop_ids;
  LS_RETURN_IF_ERROR(read_int_list(body, "stop_token_ids", &stop_ids));
  for (int64_t id : stop_ids) {
    if (id < 0 || id >= engine.vocab_size()) {
      return invalid_argument("stop_token_ids contains {}, outside the vocabulary [0, {})", id,
                              engine.vocab_size());
    }
    stop->stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  LS_RETURN_IF_ERROR(read_string_or_list(body, "stop", &stop->stop));
  LS_RETURN_IF_ERROR(read_bool(body, "ignore_eos", &stop->ignore_eos));
  LS_RETURN_IF_ERROR(
      read_bool(body, "include_stop_str_in_output", &stop->include_stop_str_in_output));
  LS_RETURN_IF_ERROR(read_bool(body, "skip_special_tokens", &stop->skip_special_tokens));
  // The tokenizer.json decode puts no spaces between special tokens (true, vLLM's default, is
  // what it does); false only matters while special tokens are shown, and is not implemented.
  bool spaces_between_special_tokens = true;
  LS_RETURN_IF_ERROR(
      read_bool(body, "spaces_between_special_tokens", &spaces_between_special_tokens));
  if (!spaces_between_special_tokens && !stop->skip_special_tokens) {
    return invalid_argument(
        "spaces_between_special_tokens=false with skip_special_tokens=false is not supported");
  }
  return Status::ok_status();
}

// n, stream and stream_options, shared by both endpoints.
Status read_choices_and_stream(const Json& body, const RequestContext& ctx, ParsedRequest* out) {
  std::optional<int64_t> n;
  LS_RETURN_IF_ERROR(read_int64(body, "n", &n));
  if (n) {
    if (*n < 1) return invalid_argument("n must be at least 1, got {}.", *n);
    if (*n > ctx.max_n) return invalid_argument("n must be at most {}, got {}.", ctx.max_n, *n);
    out->n = static_cast<int32_t>(*n);
  }
  LS_RETURN_IF_ERROR(read_bool(body, "stream", &out->stream));
  if (const Json* options = find_field(body, "stream_options")) {
    if (!out->stream) {
      return invalid_argument("Stream options can only be defined when `stream=True`.");
    }
    if (!options->is_object()) return invalid_argument("'stream_options' must be an object");
    LS_RETURN_IF_ERROR(read_bool(*options, "include_usage", &out->include_usage));
  }
  return Status::ok_status();
}

Status check_prompt_bytes(std::string_view text, const RequestContext& ctx) {
  if (ctx.max_prompt_bytes <= 0) return Status::ok_status();
  // Leading and trailing whitespace may be stripped by a normalizer: not counted.
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  const size_t bytes = first == std::string_view::npos ? 0 : last - first + 1;
  if (static_cast<int64_t>(bytes) <= ctx.max_prompt_bytes) return Status::ok_status();
  return invalid_argument(
      "This model's maximum context length is {} tokens. However, your prompt is {} bytes, "
      "more than {} tokens can hold. Please reduce the length of the input.",
      ctx.engine->max_model_len(), bytes, ctx.engine->max_model_len());
}

Status check_token_ids(const std::vector<int32_t>& ids, int32_t vocab_size) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("Token id {} is out of vocabulary [0, {})", id, vocab_size);
    }
  }
  return Status::ok_status();
}

Result<std::vector<int32_t>> json_token_ids(const Json& list) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const Json& item : list) {
    const std::optional<int64_t> id = json_integer(item);
    if (!id || *id < std::numeric_limits<int32_t>::min() ||
        *id > std::numeric_limits<int32_t>::max()) {
      return invalid_argument("'prompt' token ids must be integers");
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

// "prompt": a string, a list of strings, a list of token ids, or a list of token id lists.
Result<std::vector<PromptInput>> read_prompts(const Json& body, bool want_text,
                                              int32_t truncate_to, const RequestContext& ctx) {
  const Json* prompt = find_field(body, "prompt");
  if (prompt == nullptr) return invalid_argument("'prompt' is required");
  bool add_special_tokens = true;
  LS_RETURN_IF_ERROR(read_bool(body, "add_special_tokens", &add_special_tokens));
  const Tokenizer& tokenizer = *ctx.tokenizer;
  auto from_text = [&](std::string text) -> Result<PromptInput> {
    // A truncated prompt may be longer than the context: no size check then.
    if (truncate_to == 0) LS_RETURN_IF_ERROR(check_prompt_bytes(text, ctx));
    PromptInput input;
    input.token_ids = tokenizer.encode(text, add_special_tokens);
    if (truncate_to > 0 && static_cast<int64_t>(input.token_ids.size()) > truncate_to) {
      truncate_left(input.token_ids, truncate_to);
      if (want_text) text = tokenizer.decode(input.token_ids, /*skip_special_tokens=*/false);
    }
    input.text = std::move(text);
    return input;
  };
  auto from_ids = [&](const Json& list) -> Result<PromptInput> {
    PromptInput input;
    LS_ASSIGN_OR_RETURN(input.token_ids, json_token_ids(list));
    LS_RETURN_IF_ERROR(check_token_ids(input.token_ids, ctx.engine->vocab_size()));
    truncate_left(input.token_ids, truncate_to);
    if (want_text) input.text = tokenizer.decode(input.token_ids, /*skip_special_tokens=*/false);
    return input;
  };
  constexpr const char* kShapeError =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of token id "
      "lists";

  std::vector<PromptInput> prompts;
  if (prompt->is_string()) {
    LS_ASSIGN_OR_RETURN(PromptInput input, from_text(prompt->get<std::string>()));
    prompts.push_back(std::move(input));
    return prompts;
  }
  if (!prompt->is_array()) return invalid_argument(kShapeError);
  if (prompt->empty()) return invalid_argument("'prompt' must not be an empty list");
  const Json& first = prompt->front();
  if (first.is_string()) {
    for (const Json& item : *prompt) {
      if (!item.is_string()) return invalid_argument(kShapeError);
      LS_ASSIGN_OR_RETURN(PromptInput input, from_text(item.get<std::string>()));
      prompts.push_back(std::move(input));
    }
  } else if (first.is_number()) {
    LS_ASSIGN_OR_RETURN(PromptInput input, from_ids(*prompt));
    prompts.push_back(std::move(input));
  } else if (first.is_array()) {
    for (const Json& item : *prompt) {
      if (!item.is_array()) return invalid_argument(kShapeError);
      LS_ASSIGN_OR_RETURN(PromptInput input, from_ids(item));
      prompts.push_back(std::move(input));
    }
  } else {
    return invalid_argument(kShapeError);
  }
  return prompts;
}

// Context checks, then the engine's own field validation (vLLM checks the input length first).
Status finish_validation(ParsedRequest& request, const Engine& engine) {
  for (const PromptInput& prompt : request.prompts) {
    if (prompt.token_ids.empty()) return invalid_argument("The decoder prompt cannot be empty");
  }
  LS_RETURN_IF_ERROR(request.sampling.validate(engine.vocab_size()));
  LS_RETURN_IF_ERROR(request.stop.validate());
  return Status::ok_status();
}

}  // namespace

Status check_context_length(int64_t num_prompt_tokens, int64_t max_tokens, int32_t max_model_len) {
  if (num_prompt_tokens >= max_model_len) {
    return invalid_argument(
        "This model's maximum context length is {} tokens. However, your request has {} input "
        "tokens. Please reduce the length of the input messages.",
        max_model_len, num_prompt_tokens);
  }
  if (max_tokens >= 0 && max_tokens > max_model_len - num_prompt_tokens) {
    return invalid_argument(
        "'max_tokens' or 'max_completion_tokens' is too large: {}. This model's maximum context "
        "length is {} tokens and your request has {} input tokens ({} > {} - {}).",
        max_tokens, max_model_len, num_prompt_tokens, max_tokens, max_model_len, num_prompt_tokens);
  }
  return Status::ok_status();
}

Status check_model_name(const Json& body, const RequestContext& ctx) {
  std::optional<std::string> model;
  LS_RETURN_IF_ERROR(read_string(body, "model", &model));
  if (model && *model != ctx.served_model_name) {
    return not_found("The model `{}` does not exist.", *model);
  }
  return Status::ok_status();
}

Result<ParsedRequest> parse_completion_request(const Json& body, const RequestContext& ctx) {
  LS_RETURN_IF_ERROR(check_model_name(body, ctx));
  const Engine& engine = *ctx.engine;
  ParsedRequest request;
  request.kind = ApiKind::kCompletion;
  LS_RETURN_IF_ERROR(read_sampling(body, engine, &request.sampling));
  LS_RETURN_IF_ERROR(read_stop(body, engine, &request.stop));
  LS_RETURN_IF_ERROR(read_choices_and_stream(body, ctx, &request));
  // best_of: as vLLM's V1 engine, only best_of == n (its default) is served; more candidates
  // than returned choices would need ranking by cumulative logprob, which is not implemented.
  std::optional<int64_t> best_of;
  LS_RETURN_IF_ERROR(read_int64(body, "best_of", &best_of));
  if (best_of && *best_of != request.n) {
    return invalid_argument("best_of must equal n ({}); best_of > n is not supported, got {}.",
                            request.n, *best_of);
  }

  std::optional<int64_t> logprobs;
  LS_RETURN_IF_ERROR(read_int64(body, "logprobs", &logprobs));
  if (logprobs) {
    if (*logprobs < 0) return invalid_argument("logprobs must be non-negative, got {}", *logprobs);
    request.num_logprobs = clamp_to_int32(*logprobs);
  }
  request.sampling.logprobs = request.num_logprobs;
  LS_RETURN_IF_ERROR(read_bool(body, "echo", &request.echo));
  // Prompt logprobs as vLLM: the explicit field, else logprobs N when echoing.
  LS_RETURN_IF_ERROR(read_prompt_logprobs(body, &request.prompt_logprobs));
  if (request.prompt_logprobs < 0 && request.echo) request.prompt_logprobs = request.num_logprobs;
  request.sampling.prompt_logprobs = request.prompt_logprobs;
  if (request.stream && find_field(body, "prompt_logprobs") != nullptr) {
    return invalid_argument("`prompt_logprobs` are not available when `stream=True`.");
  }

  std::optional<int64_t> max_tokens;
  LS_RETURN_IF_ERROR(read_int64(body, "max_tokens", &max_tokens));
  int64_t max_new_tokens = max_tokens.value_or(16);
  if (request.echo && max_new_tokens == 0) {
    // Score the prompt only: one token is generated and left out of the response (vLLM).
    request.echo_without_generation = true;
    max_new_tokens = 1;
  }
  int32_t truncate_to = 0;
  LS_RETURN_IF_ERROR(read_truncate_prompt_tokens(body, engine, &truncate_to));
  LS_ASSIGN_OR_RETURN(request.prompts, read_prompts(body, request.echo, truncate_to, ctx));
  // A list of prompts multiplies the choices: the same bound as n holds for prompts x n.
  const auto choices = static_cast<int64_t>(request.prompts.size()) * request.n;
  if (choices > ctx.max_n) {
    return invalid_argument("A request may ask for at most {} choices (prompts x n), got {}.",
                            ctx.max_n, choices);
  }
  for (const PromptInput& prompt : request.prompts) {
    LS_RETURN_IF_ERROR(check_context_length(static_cast<int64_t>(prompt.token_ids.size()),
                                            max_new_tokens, engine.max_model_len()));
  }
  request.stop.max_tokens = clamp_to_int32(max_new_tokens);
  LS_RETURN_IF_ERROR(read_structured_request(body, ctx, &request));
  LS_RETURN_IF_ERROR(finish_validation(request, engine));
  return request;
}

Result<std::vector<int32_t>> tokenize_chat(const Json& body, bool default_add_special_tokens,
                                           const RequestContext& ctx, bool refuse_past_context) {
  if (ctx.chat_template == nullptr) {
    return invalid_argument(
        "This model has no chat template; pass one to the server or use /v1/completions");
  }
  const Json* messages = find_field(body, "messages");
  if (messages == nullptr) return invalid_argument("'messages' is required");
  LS_ASSIGN_OR_RETURN(Json normalized, prepare_chat_messages(*messages, *ctx.chat_template));
  bool add_generation_prompt = true;
  LS_RETURN_IF_ERROR(read_bool(body, "add_generation_prompt", &add_generation_prompt));
  bool continue_final_message = false;
  LS_RETURN_IF_ERROR(read_bool(body, "continue_final_message", &continue_final_message));
  if (continue_final_message && add_generation_prompt) {
    return invalid_argument(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  bool add_special_tokens = default_add_special_tokens;
  LS_RETURN_IF_ERROR(read_bool(body, "add_special_tokens", &add_special_tokens));

  // The tokenizer's special tokens first, then the request's chat_template_kwargs over them,
  // as transformers builds the template context.
  Json extra_context = Json::object();
  const Tokenizer& tokenizer = *ctx.tokenizer;
  if (const std::optional<int32_t> bos = tokenizer.bos_token_id()) {
    extra_context["bos_token"] = tokenizer.id_to_token(*bos);
  }
  if (const std::optional<int32_t> eos = tokenizer.eos_token_id()) {
    extra_context["eos_token"] = tokenizer.id_to_token(*eos);
  }
  if (const Json* kwargs = find_field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return invalid_argument("'chat_template_kwargs' must be an object");
    for (const auto& [key, value] : kwargs->items()) extra_context[key] = value;
  }
  if (const Json* tools = find_field(body, "tools")) {
    if (!tools->is_array()) return invalid_argument("'tools' must be a list");
    extra_context["tools"] = *tools;
  }
  Result<std::string> rendered =
      ctx.chat_template->render(normalized, add_generation_prompt, extra_context);
  if (!rendered.ok()) {
    return invalid_argument("chat template: {}", rendered.status().message());
  }
  if (continue_final_message) {
    LS_ASSIGN_OR_RETURN(*rendered, cut_after_final_message(*rendered, normalized));
  }
  if (refuse_past_context) LS_RETURN_IF_ERROR(check_prompt_bytes(*rendered, ctx));
  return ctx.tokenizer->encode(*rendered, add_special_tokens);
}

Result<ParsedRequest> parse_chat_request(const Json& body, const RequestContext& ctx) {
  LS_RETURN_IF_ERROR(check_model_name(body, ctx));
  const Engine& engine = *ctx.engine;
  ParsedRequest request;
  request.kind = ApiKind::kChat;
  LS_RETURN_IF_ERROR(read_sampling(body, engine, &request.sampling));
  LS_RETURN_IF_ERROR(read_stop(body, engine, &request.stop));
  LS_RETURN_IF_ERROR(read_choices_and_stream(body, ctx, &request));

  bool logprobs = false;
  LS_RETURN_IF_ERROR(read_bool(body, "logprobs", &logprobs));
  std::optional<int64_t> top_logprobs;
  LS_RETURN_IF_ERROR(read_int64(body, "top_logprobs", &top_logprobs));
  if (top_logprobs && *top_logprobs < 0) {
    return invalid_argument("top_logprobs must be non-negative, got {}", *top_logprobs);
  }
  if (top_logprobs && *top_logprobs > 0 && !logprobs) {
    return invalid_argument("when using `top_logprobs`, `logprobs` must be set to true.");
  }
  if (logprobs) request.num_logprobs = clamp_to_int32(top_logprobs.value_or(0));
  request.sampling.logprobs = request.num_logprobs;
  LS_RETURN_IF_ERROR(read_prompt_logprobs(body, &request.prompt_logprobs));
  request.sampling.prompt_logprobs = request.prompt_logprobs;
  if (request.stream && request.prompt_logprobs >= 0) {
    return invalid_argument("`prompt_logprobs` are not available when `stream=True`.");
  }
  int32_t truncate_to = 0;
  LS_RETURN_IF_ERROR(read_truncate_prompt_tokens(body, engine, &truncate_to));

  // max_completion_tokens wins over the deprecated max_tokens; neither means "the rest of the
  // context".
  std::optional<int64_t> max_tokens;
  LS_RETURN_IF_ERROR(read_int64(body, "max_completion_tokens", &max_tokens));
  if (!max_tokens) LS_RETURN_IF_ERROR(read_int64(body, "max_tokens", &max_tokens));

  PromptInput prompt;
  LS_ASSIGN_OR_RETURN(prompt.token_ids,
                      tokenize_chat(body, /*default_add_special_tokens=*/false, ctx,
                                    /*refuse_past_context=*/truncate_to == 0));
  truncate_left(prompt.token_ids, truncate_to);
  const int64_t num_prompt_tokens = static_cast<int64_t>(prompt.token_ids.size());
  LS_RETURN_IF_ERROR(
      check_context_length(num_prompt_tokens, max_tokens.value_or(-1), engine.max_model_len()));
  request.stop.max_tokens =
      clamp_to_int32(max_tokens.value_or(engine.max_model_len() - num_prompt_tokens));
  request.prompts.push_back(std::move(prompt));
  LS_RETURN_IF_ERROR(read_structured_request(body, ctx, &request));
  LS_RETURN_IF_ERROR(finish_validation(request, engine));
  return request;
}

}  // namespace ls
