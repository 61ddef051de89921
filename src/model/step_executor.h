#pragma once
// The engine's view of "run the model on one step": ModelRunner implements it; scheduler and
// engine tests implement it with a fake model so they run without weights.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/step_input.h"

namespace ls {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Appends the step's K/V, runs the layers and returns `logits` [logit_rows, vocab] f32 (host).
  virtual Status forward(const StepInput& step, std::vector<float>& logits) = 0;
  virtual int32_t vocab_size() const = 0;
};

}  // namespace ls
