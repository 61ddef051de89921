#pragma once
// The host-side, per-step part of the attention plan: facts about each sequence of a step and
// what the policy decides for it. Plain data with no backend headers, so the control plane
// (engine, scheduler) can build steps without seeing device memory.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ls {

// Host-side facts about one sequence in this step's batch.
struct StepSequence {
  int32_t slot = 0;        // the sequence's row in the KV tables and selection store
  int32_t q_len = 0;       // tokens computed this step
  int32_t kv_len = 0;      // tokens in the cache after this step's append
  bool prefilling = true;  // this step's tokens are prompt tokens
};

// What a policy decides for one step; host arrays, [num_seqs] each, uploaded with the step.
struct StepAttentionPlan {
  std::vector<int32_t> local_tokens;   // streaming window of each sequence
  std::vector<int32_t> selected_rows;  // row whose selection the sequence uses, or -1 (causal)
  std::vector<int32_t> select_rows;    // row page_select writes this step, or -1
  bool any_select = false;             // some sequence reselects: run select()
  void resize(size_t n) {
    local_tokens.assign(n, 0);
    selected_rows.assign(n, -1);
    select_rows.assign(n, -1);
    any_select = false;
  }
};

}  // namespace ls
