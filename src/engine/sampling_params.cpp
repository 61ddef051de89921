#include "engine/sampling_params.h"

#include <cmath>

// Ranges follow vLLM's SamplingParams._verify_args, so a request vLLM rejects is rejected here
// with a message that names the field and the value received.

namespace ls {

Status SamplingParams::validate(int32_t vocab_size) const {
  if (vocab_size <= 0) return invalid_argument("vocab_size must be positive, got {}", vocab_size);
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return invalid_argument("temperature must be non-negative, got {}", temperature);
  }
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) {
    return invalid_argument("top_p must be in (0, 1], got {}", top_p);
  }
  if (top_k < -1) {
    return invalid_argument("top_k must be 0 or -1 (disable), or at least 1, got {}", top_k);
  }
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f) {
    return invalid_argument("min_p must be in [0, 1], got {}", min_p);
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return invalid_argument("repetition_penalty must be greater than zero, got {}",
                            repetition_penalty);
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f) {
    return invalid_argument("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f) {
    return invalid_argument("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  if (logprobs < -1) return invalid_argument("logprobs must be non-negative, got {}", logprobs);
  if (logprobs > kMaxLogprobs) {
    return invalid_argument(
        "Requested sample logprobs of {}, which is greater than max allowed: {}", logprobs,
        kMaxLogprobs);
  }
  if (logprobs > vocab_size) {
    return invalid_argument("logprobs ({}) exceeds the vocabulary size ({})", logprobs, vocab_size);
  }
  if (prompt_logprobs < -1) {
    return invalid_argument("prompt_logprobs must be non-negative, got {}", prompt_logprobs);
  }
  if (prompt_logprobs > kMaxLogprobs) {
    return invalid_argument(
        "Requested prompt logprobs of {}, which is greater than max allowed: {}", prompt_logprobs,
        kMaxLogprobs);
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("token_id(s) [{}] in logit_bias contain out-of-vocab token ids. "
                              "Vocabulary size: {}", id, vocab_size);
    }
    if (!std::isfinite(bias)) return invalid_argument("logit_bias values must be finite");
  }
  return {};
}

Status StopParams::validate() const {
  if (max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got {}", max_tokens);
  if (min_tokens < 0) {
    return invalid_argument("min_tokens must be greater than or equal to 0, got {}", min_tokens);
  }
  if (min_tokens > max_tokens) {
    return invalid_argument("min_tokens must be less than or equal to max_tokens={}, got {}",
                            max_tokens, min_tokens);
  }
  for (int32_t id : eos_token_ids) {
    if (id < 0) return invalid_argument("eos_token_ids must be non-negative, got {}", id);
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0) return invalid_argument("stop_token_ids must be non-negative, got {}", id);
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("stop cannot contain an empty string");
  }
  return {};
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "none";
}

}  // namespace ls
