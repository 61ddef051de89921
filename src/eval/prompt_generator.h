#pragma once
// PromptGenerator builds the evaluation prompts of scripts/model/retrieval_tasks.py (`eval_docs`,
// `build_doc` with split="eval", raw form) in C++: for the same seed, lengths, depths and sample
// count it yields the same prompt texts, token counts, depths and needle positions as
// `train_tiny.py --emit-only --emit-eval-jsonl` (tests/eval/prompt_generator_test.cpp checks it
// against a JSONL the script emitted). Prompts fill their target length with filler sentences up
// to less than one sentence; items are inserted by depth (docs/training.md, part 1).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/eval_prompt.h"
#include "eval/numpy_rng.h"
#include "eval/task_text.h"
#include "tokenizer/tokenizer.h"

namespace ls::eval {

// Grammar sentences drawn once (Python FillerPool) with their token counts; prompts draw
// sentences from here i.i.d.
struct FillerPool {
  std::vector<std::string> texts;  // [num_sentences] sentences, without the leading space
  std::vector<int64_t> lens;       // [num_sentences] tokens of " " + text
  double mean_len = 0;             // mean of lens (sizes the first draw of sample())

  // Python FillerPool(enc, num_sentences, seed).
  static FillerPool build(const Tokenizer& tokenizer, int32_t num_sentences, uint64_t seed);
  // Indices of i.i.d. sentences whose token total stays within budget_tokens (Python sample()).
  std::vector<int64_t> sample(NumpyRng& rng, int64_t budget_tokens) const;
};

struct GridSpec {
  std::vector<Task> tasks;       // evaluated in this list's order; seeds use the task's index
  std::vector<int32_t> lengths;  // target context lengths L (prompt tokens with BOS, at most)
  std::vector<double> depths;    // niah_single's depth grid; the other tasks draw depths
  int32_t samples_per_cell = 4;  // prompts per (task, length); niah_single spreads them over
                                 // the depths: ceil(samples / depths) per depth
  uint64_t seed = 0;             // train_tiny.py --seed
};

// round(x, 2) of numpy.linspace(0, 1, n): the default depth grid (11 points: 0, 0.1, ..., 1).
std::vector<double> depth_grid(int32_t num_points);
// Python round(x, digits) (correctly rounded, ties to even on the exact binary value).
double round_digits(double x, int digits);

class PromptGenerator {
 public:
  // The filler pool is seeded with seed + 1 and holds 20,000 sentences, as train_tiny.py's
  // evaluation pool.
  static Result<PromptGenerator> create(std::shared_ptr<const Tokenizer> tokenizer, uint64_t seed,
                                        int32_t pool_sentences = 20000);

  // One prompt of at most max_prompt_tokens tokens (with BOS). `depth` places the first answer
  // item; none draws it. The id and context_tokens are the caller's.
  Result<EvalPrompt> build(Task task, NumpyRng& rng, int32_t max_prompt_tokens,
                           std::optional<double> depth) const;
  // The grid of Python eval_docs (every prompt has its own RNG stream derived from (seed, task
  // index, length, depth index, sample), so a cell does not change when others are added).
  Result<std::vector<EvalPrompt>> grid(const GridSpec& spec) const;

  // Prompts whose depths are all drawn (niah_single included), from RNG streams apart from the
  // evaluation grid's: samples_per_cell per (task, length); spec.depths is ignored. For
  // calibration, so that it never sees the evaluation prompts of the same seed.
  Result<std::vector<EvalPrompt>> random_depth_prompts(const GridSpec& spec) const;

  const FillerPool& pool() const { return pool_; }

 private:
  PromptGenerator(std::shared_ptr<const Tokenizer> tokenizer, FillerPool pool)
      : tokenizer_(std::move(tokenizer)), pool_(std::move(pool)) {}
  int64_t num_tokens(const std::string& text, bool add_special = false) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  FillerPool pool_;
};

}  // namespace ls::eval
