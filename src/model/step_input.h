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

// One step's share of a layer-segmented prefill (docs/layer-segmented-prefill.md). The sequence's
// tokens [0, num_tokens) are cut into segments of segment_tokens (the last may be shorter) at the
// same boundaries chunked prefill would use, and the prefill is the grid of units (layer,
// segment) taken layer by layer: unit u is layer u / num_segments(), segment u % num_segments().
// A step runs units [unit_begin, unit_end) in order; the executor keeps the prompt's hidden states
// between steps. unit_begin == 0 (re)starts the prefill; any other unit_begin must continue where
// the previous share of the same slot ended.
struct LayerSegmentInput {
  int32_t slot = -1;            // the sequence's KV row; its blocks cover num_tokens already
  int32_t num_tokens = 0;       // tokens being prefilled (positions 0 .. num_tokens - 1)
  int32_t segment_tokens = 0;   // tokens per segment (<= the runner's step tokens)
  int32_t unit_begin = 0;
  int32_t unit_end = 0;
  std::vector<int32_t> tokens;  // [num_tokens] when the share has layer-0 units, else empty

  int32_t num_segments() const {
    return segment_tokens > 0 ? (num_tokens + segment_tokens - 1) / segment_tokens : 0;
  }
};

}  // namespace ls
