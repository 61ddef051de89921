#pragma once
// The collectives of one tensor-parallel decode step, timed alone (docs/tensor-parallel.md,
// "All-reduce share"): on every rank's thread, the step's collectives on its own communicator and
// stream, recorded once as a CUDA graph (as the recorded decode step holds them) and replayed
// many times: 2 all-reduces per layer (after o_proj and down_proj) and one for the embedding,
// each of [rows, hidden] act dtype, and the LM head's all-gather of [rows, vocab slice]. The
// ranks replay together (a collective needs every rank), rank 0's wall time per replay is the
// result. Divided by a measured TPOT it is the share of a decode step spent in collectives
// (a lower bound of what they cost inside the step: there they also absorb the ranks' skew).

#include <cstdint>

#include "core/status.h"
#include "model/model_stack.h"

namespace ls::bench {

struct TpCollectiveTime {
  double step_ms = 0;        // all of one step's collectives
  double all_reduce_ms = 0;  // the step's all-reduces only (2 per layer + the embedding's)
  int32_t all_reduces = 0;   // per step
  bool recorded = false;     // replayed from a CUDA graph (else enqueued op by op)
};

// `stack`: a tensor-parallel stack (tp_ranks and tp_comms set); rows: the step's tokens (the
// decode batch). Runs every rank on a thread of its own. Call it before the stack runs a step:
// it drops every recording of the ranks' backends when done (the runners' too).
Result<TpCollectiveTime> time_tp_collectives(ModelStack& stack, int32_t rows, int32_t replays);

}  // namespace ls::bench
