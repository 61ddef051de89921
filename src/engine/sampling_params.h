#pragma once
// What a request asks of generation: sampling knobs and stop conditions (vLLM semantics).
// Plain data; validate() gives one clear message per bad field.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ls {

inline constexpr int32_t kMaxLogprobs = 20;

struct SamplingParams {
  float temperature = 1.0f;         // < 1e-5 means greedy (argmax)
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = -1;               // 0 or -1 means off (validate() rejects < -1)
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; HF rule: logit > 0 ? logit / p : logit * p over
                                    // tokens seen in prompt and output
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI rule, over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI rule, over output tokens
  std::optional<uint64_t> seed;     // per-request RNG seed; unset: drawn from the engine's RNG
  int32_t logprobs = -1;            // -1: none; N >= 0: chosen token's logprob + top N
                                    // (at most kMaxLogprobs, vLLM's default max_logprobs)
  int32_t prompt_logprobs = -1;     // -1: none; N >= 0: each prompt token's logprob (from the
                                    // first on; the first has none) + top N, delivered with the
                                    // choice's first output. Costs logit rows of prompt positions
                                    // only when asked.
  // Added to the raw logits before penalties (vLLM's logit_bias), values within [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;  // [num_biased] (token id, bias)

  bool greedy() const { return temperature < 1e-5f; }
  Status validate(int32_t vocab_size) const;
};

struct StopParams {
  int32_t max_tokens = 16;              // output tokens at most (>= 1)
  int32_t min_tokens = 0;               // eos / stop ids ignored before this many
  std::vector<int32_t> eos_token_ids;   // from generation_config.json (stop on any)
  std::vector<int32_t> stop_token_ids;  // extra ids that stop (the id is not shown)
  std::vector<std::string> stop;        // stop strings, cut from the output by default
  bool ignore_eos = false;              // keep going past eos (benchmarks)
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;  // drop special tokens from the text

  Status validate() const;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error"; "none" for kNone (the server sends null, not this name).
const char* finish_reason_name(FinishReason reason);

}  // namespace ls
