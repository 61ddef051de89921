#pragma once
// Sequence: one choice of a request as the engine tracks it (control plane only). A request with
// n choices becomes n sequences sharing its id.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "tokenizer/detokenizer.h"

namespace ls {

enum class SequenceStatus { kWaiting, kRunning, kFinished };

// State shared by the choices of one request.
struct RequestState {
  std::string request_id;
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
  StopParams stop;
  OutputSink sink;
  int64_t arrival_ns = 0;
  int32_t num_unfinished = 0;  // choices not yet finished
  // Prompt tokens found in the prefix cache at the first admission of one of its choices
  // (usage.prompt_tokens_details.cached_tokens); -1 until then.
  int32_t num_cached_tokens = -1;
};

struct Sequence {
  Sequence(std::shared_ptr<RequestState> request, int32_t index, uint64_t seed,
           const Tokenizer* tokenizer, int32_t max_out);

  std::shared_ptr<RequestState> request;
  int32_t index = 0;                // choice index
  std::vector<int32_t> output_ids;  // generated tokens
  SequenceStatus status = SequenceStatus::kWaiting;
  int32_t slot = -1;          // KV slot while running
  int32_t num_computed = 0;   // tokens whose K/V are in the cache
  int64_t arrival_order = 0;  // FCFS key (preempted sequences keep theirs)
  int64_t first_scheduled_ns = 0;  // now_ns() of its first step (0: not yet scheduled)
  int32_t max_output_tokens = 0;  // min(max_tokens, what the context leaves)
  int32_t num_preemptions = 0;    // times the scheduler freed its KV to recompute it later
  // Layer-segmented prefill (docs/layer-segmented-prefill.md): set while the sequence's prefill
  // runs layer by layer over all its uncomputed tokens; segment_units_done counts finished units.
  bool layer_segmented = false;
  int32_t segment_units_done = 0;
  SequenceSamplingState sampling;
  StopChecker stop;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;  // null without a tokenizer
  // Prompt logprobs (sampling.prompt_logprobs >= 0): entry j is prompt token j + 1, collected
  // from the logits of prompt position j as prefill chunks run; sent with the first output.
  std::vector<TokenLogprob> prompt_logprobs;                   // [collected]
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;  // [collected][N]
  std::vector<int32_t> prompt_ranks;                           // [collected]
  bool prompt_logprobs_sent = false;
  // The most tokens one prefill chunk may take (0: no limit beyond the scheduler's); set by the
  // engine so that the prompt positions' logit rows of a step fit its row buffer.
  int32_t max_chunk_tokens = 0;

  // Whether the next prefill chunk needs prompt-position logits.
  bool wants_prompt_logprobs() const {
    return request->sampling.prompt_logprobs >= 0 && !prompt_logprobs_sent &&
           static_cast<int32_t>(prompt_logprobs.size()) < prompt_len() - 1;
  }
  // Restricts the next token (structured outputs); null when unconstrained. It follows the
  // output tokens, which a preemption keeps, so it needs no rewinding.
  std::unique_ptr<TokenConstraint> constraint;

  int32_t prompt_len() const { return static_cast<int32_t>(request->prompt_ids.size()); }
  int32_t num_tokens() const { return prompt_len() + static_cast<int32_t>(output_ids.size()); }
  int32_t token_at(int32_t i) const {
    return i < prompt_len() ? request->prompt_ids[static_cast<size_t>(i)]
                            : output_ids[static_cast<size_t>(i - prompt_len())];
  }
  // Tokens whose K/V are not cached yet: the whole prompt at first, one token per decode step,
  // the prompt and the outputs so far after a preemption (recompute).
  int32_t num_uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace ls
