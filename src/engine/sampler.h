#pragma once
// Token sampling for one sequence at a time, with vLLM / Hugging Face semantics.
//
// Pipeline, in vLLM v1's order (HF's warpers agree):
//   logit_bias -> repetition penalty -> presence / frequency penalties -> forbidden ids (-inf)
//   -> greedy (temperature < 1e-5): argmax, ties to the lowest id
//   -> else temperature -> min_p -> top_k -> top_p -> one draw from the renormalized rest.
// top_k keeps every token whose value ties the k-th largest (vLLM and HF do the same); top_p keeps
// the smallest prefix of the tokens sorted by probability (ties: lower id first) whose mass
// reaches top_p (a token is kept when the mass strictly before it is < top_p), computed over what
// min_p and top_k left.
//
// Determinism: all randomness comes from the SequenceSamplingState: greedy draws nothing, other
// tokens one uniform each (top_p over the whole vocabulary, which samples by rejection, a few
// more on rejections), and which ones are drawn depends only on the logits and earlier draws. A
// sequence therefore produces the same tokens for the same seed and logits whatever else is in
// the batch, and after a preemption as long as the engine keeps its state.
//
// Cost: a few vectorized passes over the [vocab] row (portable SIMD through the compiler's vector
// extension); nothing orders the vocabulary. Greedy is a max and a find; top_k and min_p keep
// only their survivors (top_k in one pass with a rising floor, then nth_element on a small
// buffer); temperature alone weighs every token once and draws through per-block masses; top_p
// without top_k/min_p draws from all tokens and accepts the draw when the mass ranked before it
// is below top_p (one more pass; expected 1/top_p rounds), and over a top_k/min_p survivor set
// finds its cut by quickselect on mass. Scratch buffers are thread_local, so calls from several
// threads are safe.

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampling_params.h"

namespace ls {

// What one sequence carries between steps: its RNG and the token statistics the penalties need.
class SequenceSamplingState {
 public:
  // `seed` comes from sequence_seed(). `prompt_ids` is only read here, and only kept (as a sorted
  // set) when params.repetition_penalty != 1: vLLM and HF penalize prompt and output tokens.
  // sample() must then be called with the same params.
  SequenceSamplingState(const SamplingParams& params, uint64_t seed,
                        std::span<const int32_t> prompt_ids);

  // Records an output token (call once per generated token, after sample()).
  void append(int32_t token);
  // While fewer than `num_output_tokens` tokens were appended, `ids` get -inf before sampling.
  // min_tokens uses it with the ids that would stop the sequence (see min_tokens_forbidden_ids()
  // in engine/stop_checker.h). A later call replaces the earlier one.
  void forbid_until(std::span<const int32_t> ids, int32_t num_output_tokens);

  int32_t num_output_tokens() const { return num_output_tokens_; }
  // The ids forbidden for the next token (empty once enough tokens were appended).
  std::span<const int32_t> active_forbidden_ids() const;
  // How many times `token` was appended (the frequency penalty's count).
  int32_t output_count(int32_t token) const;
  // Whether repetition_penalty applies to `token`: seen in the prompt or the output.
  bool seen(int32_t token) const;
  // A uniform double in [0, 1) from this sequence's generator (53 random bits).
  double next_uniform();

 private:
  friend void apply_penalties(std::span<float>, const SamplingParams&,
                              const SequenceSamplingState&);
  // std::mt19937_64 because the standard fixes its output sequence for a given seed, so a seed
  // replays identically across compilers and platforms.
  std::mt19937_64 rng_;
  std::vector<int32_t> prompt_set_;                     // [unique prompt ids] sorted ascending
  std::unordered_map<int32_t, int32_t> output_counts_;  // id -> times generated
  std::vector<int32_t> forbidden_ids_;
  int32_t forbidden_until_tokens_ = 0;
  int32_t num_output_tokens_ = 0;
};

// The seed of choice `choice_index` of a request: the request's seed plus the index when it gave
// one (so the n choices differ and each replays exactly), else `engine_seed`, which the engine
// draws from its own RNG for each sequence.
uint64_t sequence_seed(const SamplingParams& params, int32_t choice_index, uint64_t engine_seed);

// Filled by sample() when params.logprobs >= 0. Values are the model's raw log-softmax, taken
// before penalties, temperature and filtering (vLLM's default "raw_logprobs"), so they describe
// the model, not the sampler; -inf stays -inf (the server clamps it to -9999 as vLLM does).
struct SampleOutput {
  float logprob = 0.0f;                    // of the chosen token
  std::vector<TokenLogprob> top_logprobs;  // the params.logprobs most likely ids, most likely
                                           // first, ties to the lower id
};

// Chooses the next token of one sequence. `logits` is [vocab] f32 for the sequence's last
// position; it may be modified (penalties and forbidden ids are applied in place). NaN logits
// count as -inf; a +inf logit is certain (the lowest such id). Degenerate rows still yield a valid
// id: if forbidding would leave no finite logit, the forbidden ids are allowed for this step; if no
// logit is finite at all, the result is 0. Does not call state.append(): the caller records the
// token once it accepts it. `out` may be null.
int32_t sample(std::span<float> logits, const SamplingParams& params, SequenceSamplingState& state,
               SampleOutput* out);

// Raw log-softmax of one [vocab] row: `token`'s logprob and the `num_top` most likely ids (as
// SampleOutput; the prompt logprobs use it on prompt positions).
void raw_logprobs(std::span<const float> logits, int32_t token, int32_t num_top, SampleOutput* out);

// The penalties step alone, in place on [vocab] logits (exposed for tests and for callers that
// need the penalized logits):
//   repetition (HF / vLLM): for ids seen in prompt or output, l > 0 ? l / r : l * r;
//   then l -= frequency_penalty * count + presence_penalty * (count > 0) over output counts.
// Ids outside [0, vocab) are ignored.
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     const SequenceSamplingState& state);

}  // namespace ls
