#pragma once
// Scheduler: continuous batching with chunked prefill, FCFS (control plane: it sees KvManager's
// block accounting, never device memory).
//
// Each step, under --max-num-batched-tokens and --max-num-seqs:
//  1. running sequences in arrival order: decoding ones take one token, prefilling ones a chunk of
//     what the budget leaves. A sequence whose KV cannot grow preempts the latest-arrived running
//     sequence (its KV is freed and it waits at the front, to be recomputed) until it fits or is
//     itself the latest, which then waits;
//  2. waiting sequences in arrival order are admitted while the budget, a slot and the KV blocks
//     for their first chunk are available. No waiting sequence jumps an earlier one (FCFS).
// Decode tokens go first so running streams keep their pace; prefill chunks fill what is left.

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_manager.h"

namespace ls {

struct SchedulerConfig {
  int32_t max_num_seqs = 16;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_chunk_tokens = 2048;  // one sequence's prefill chunk at most (the KV ring's bound)
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t num_tokens = 0;   // tokens computed this step: [seq->num_computed, + num_tokens)
  bool prefilling = false;  // prompt (or recompute) tokens, not a decode token
  bool samples = false;     // the chunk reaches the last token: its logits give the next token
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  int32_t num_tokens = 0;
  std::vector<Sequence*> preempted;  // sequences preempted by this step (for metrics)
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvManager& kv);

  void add(Sequence* seq);  // a new sequence waits at the back
  SchedulerOutput schedule();
  // After the step ran: advances num_computed, ends prefill phases.
  void on_step_done(const SchedulerOutput& out);
  // Frees everything a finished or aborted sequence holds and forgets it.
  void remove(Sequence* seq);

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }

 private:
  void preempt(Sequence* seq);

  SchedulerConfig config_;
  KvManager& kv_;
  std::vector<Sequence*> running_;  // in arrival order
  std::deque<Sequence*> waiting_;   // in arrival order (preempted ones re-enter at their place)
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace ls
