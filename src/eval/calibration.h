#pragma once
// Head calibration: which kv heads a model can afford to make streaming heads, measured from its
// own behaviour on synthetic retrieval prompts (`longserve calibrate`; docs/eval.md).
//
// The measure is DuoAttention's objective in its plainest form, the output deviation caused by
// streaming heads: the drop of the answer's teacher-forced log-probability (summed over the
// answer tokens, averaged over the prompts) when some heads attend only to their sinks and local
// window, in prefill too, so that the window is the one decode would use.
//
// - greedy (default): forward selection. Start with every head streaming and give full attention,
//   one round at a time, to the head that recovers the most log-probability, until the drop is
//   within `tolerance_nats` of dense (or every head is full). Selected heads get gates in
//   (0.5, 1] falling with their round; the others get gates in [0, 0.5) by how much they
//   recovered in the last round. This finds a small set of full heads that suffices *together*,
//   which matters because retrieval in a model is usually spread over redundant heads.
// - leave-one-out: each head alone made streaming, every other head full; gates are the drops
//   over the largest. N + 1 passes, but redundant heads all look dispensable (measured on the
//   bundled model: only one head of 24 costs more than 0.01 nats alone; docs/eval.md).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attention/head_pattern.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "eval/eval_prompt.h"

namespace ls::eval {

enum class CalibrationMethod { kGreedy, kLeaveOneOut };

struct CalibrationOptions {
  CalibrationMethod method = CalibrationMethod::kGreedy;
  // The streaming heads' sinks and window while measuring (prefill uses the decode window).
  int32_t sink_tokens = 128;
  int32_t local_tokens = 256;
  // greedy: stop once the mean answer log-probability is within this of dense.
  double tolerance_nats = 0.05;
  std::function<void(const std::string&)> log;  // progress lines (optional)
};

struct CalibrationResult {
  HeadGates gates;            // [num_layers * num_kv_heads] in [0, 1]
  double dense_logprob = 0;   // mean answer log-probability with every head full
  double streaming_drop = 0;  // greedy: the drop with every head streaming
  // [num_layers * num_kv_heads]: leave-one-out: the drop when the head alone is streaming.
  // greedy: the log-probability the head recovered in the round it was selected, or in the last
  // round for heads never selected.
  std::vector<double> scores;
  std::vector<int32_t> selected;    // greedy: heads (l * H + h) given full attention, in order
  std::vector<double> round_drops;  // greedy: the drop after each round
  int64_t num_scored_tokens = 0;    // work done, for the log
  int32_t num_passes = 0;           // scoring passes over the prompts
};

// `base` names the model and engine limits; its attention settings are replaced. Prompts are
// scored with their answers appended (teacher forcing); at least one is needed. Deterministic
// for a given model, prompts and options.
Result<CalibrationResult> calibrate_heads(const EngineConfig& base,
                                          const std::vector<EvalPrompt>& prompts,
                                          const CalibrationOptions& options);

}  // namespace ls::eval
