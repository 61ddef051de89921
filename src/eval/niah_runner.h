#pragma once
// Runs evaluation prompts through an EngineCore with greedy decoding and scores the replies.
// Prompts of one context length are submitted together and the engine is stepped until all are
// done, so the evaluation exercises continuous batching (many sequences in flight, chunked
// prefill next to decode) exactly as serving does.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "eval/eval_prompt.h"

namespace ls::eval {

struct PromptResult {
  EvalPrompt prompt;
  std::string prediction;  // the generated text (end tokens dropped)
  std::string cut;         // what was compared (first line, stripped)
  bool exact = false;
  double recall = 0;
  double contained = 0;  // RULER's string_match_all over the whole prediction (scoring.h)
  int32_t prompt_tokens = 0;  // as the engine counted them
  int32_t completion_tokens = 0;
  std::string finish_reason;
};

struct RunOptions {
  int32_t max_tokens = 40;  // new tokens at most (the answers need about 5-20)
  // false when `prompt` is already a rendered chat template (which writes its own BOS).
  bool add_special_tokens = true;
  // Called after each context length finishes: (length, prompts, seconds).
  std::function<void(int32_t, int32_t, double)> on_length_done;
};

// Greedy generation for every prompt (in groups of equal context_tokens, in first-seen order);
// results come back in the order of `prompts`. A request the engine rejects or fails is an error.
Result<std::vector<PromptResult>> run_prompts(EngineCore& engine,
                                              const std::vector<EvalPrompt>& prompts,
                                              const RunOptions& options);

}  // namespace ls::eval
