#pragma once
// One engine step, host side. Sequence s owns tokens [q_indptr[s], q_indptr[s+1]) where the
// indptr is the prefix sum of seqs[].q_len; their positions are kv_len - q_len .. kv_len - 1.

#include <cstdint>
#include <vector>

#include "attention/step_plan.h"

namespace ls {

struct StepInput {
  std::vector<int32_t> tokens;      // [T]
  std::vector<StepSequence> seqs;   // [S]
  std::vector<int32_t> logit_rows;  // [R] rows of `tokens` whose logits are wanted
};

}  // namespace ls
