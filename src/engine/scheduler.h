#pragma once
// Scheduler: continuous batching with chunked prefill, FCFS (control plane: it sees KvManager's
// block accounting, never device memory).
//
// Each step, under --max-num-batched-tokens and --max-num-seqs:
//  1. running sequences in arrival order: decoding ones take one token, prefilling ones a chunk of
//     what the budget leaves. A sequence whose KV cannot grow preempts the latest-arrived running
//     sequence (its KV is freed and it waits at the front, to be recomputed) until it fits or is
//     itself the latest, which then waits. Admission below makes this the last resort;
//  2. waiting sequences in arrival order are admitted while the budget and a slot are available
//     and admission control agrees. No waiting sequence jumps an earlier one (FCFS). With prefix
//     caching on, an admitted sequence starts after the longest cached prefix of its tokens
//     (KvManager::match_prefix; admission still counts its whole length, so a hit never makes
//     admission looser than without caching).
// Decode tokens go first so running streams keep their pace; prefill chunks fill what is left.
//
// Admission control (docs/working-set-scheduling.md), so that admitted work never has to be
// thrown away and recomputed:
//  a. KV blocks: every sequence is owed its target length, reserve_target(): the tokens it still
//     has to prefill plus a decode reserve of min(output tokens it may still produce,
//     max(one page, decode_reserve_ratio x its length)). A waiting sequence is admitted only if
//     the free blocks cover what the running sequences are still owed plus its whole target.
//     Long requests, whose preemption costs the most recompute, get the largest reserve.
//  b. Device page cache (the host KV tier on; SparseServe's Algorithm 1): with a WorkingSetModel,
//     also only if the running sequences' working sets plus the newcomer's fit the cache.
// Layer-segmented prefill (docs/layer-segmented-prefill.md), when layer_segment_min_tokens > 0:
// a waiting sequence with at least that many tokens to prefill is admitted only when the KV
// blocks for all of them are free (reserved at once, so it is never preempted for growth) and no
// other layer-segmented prefill runs (the runner has one hidden-state arena). While it runs, each
// step gives it a share of units (layer, segment) worth the token budget left after the running
// sequences' tokens times the number of layers (SparseServe's maxInjectToken = chunk x layers),
// at least one unit; it is preempted like any running sequence and then starts over.

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_manager.h"
#include "kv/prefix_key.h"

namespace ls {

struct SchedulerConfig {
  int32_t max_num_seqs = 16;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_chunk_tokens = 2048;  // one sequence's prefill chunk at most (the KV ring's bound)
  double decode_reserve_ratio = 1.0 / 16;  // decode reserve per sequence, share of its length
  // Layer-segmented prefill; layer_segment_min_tokens == 0 turns it off.
  int32_t layer_segment_min_tokens = 0;  // prompts (tokens to prefill) of at least this many
  int32_t segment_tokens = 2048;         // tokens per segment (<= max_chunk_tokens)
  int32_t num_layers = 0;                // units per segment
  int32_t max_layer_segment_tokens = 0;  // the longest prefill the runner's arena holds
};

// The device page cache as admission sees it, in head-pages (the host KV tier on).
class WorkingSetModel {
 public:
  virtual ~WorkingSetModel() = default;
  virtual int64_t cache_pages() const = 0;
  // Working set of a sequence that still prefills up to `prompt_end` tokens: what its largest
  // (last) chunk needs resident at once, and what its first decode steps will read.
  virtual int64_t prefill_pages(int32_t prompt_end) const = 0;
  // Working set of the decoding sequence in KV slot `slot` at `context` tokens.
  virtual int64_t decode_pages(int32_t slot, int32_t context) const = 0;
};

// A step's share of the running layer-segmented prefill (model/step_input.h, LayerSegmentInput).
struct LayerSegmentShare {
  Sequence* seq = nullptr;  // null: no share this step
  int32_t num_tokens = 0;   // tokens being prefilled: [0, num_tokens)
  int32_t unit_begin = 0;
  int32_t unit_end = 0;
  bool samples = false;  // the share ends the prefill: the last token's logits give the next token
  int32_t token_equivalents = 0;  // the share's token-layers / num_layers: tokens' worth of work
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
  LayerSegmentShare segments;        // the layer-segmented prefill's share, if any
  bool empty() const { return chunks.empty() && segments.seq == nullptr; }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvManager& kv);
  // Turns on working-set admission (b); `model` must outlive the scheduler.
  void set_working_set_model(const WorkingSetModel* model) { working_set_ = model; }

  void add(Sequence* seq);  // a new sequence waits at the back
  SchedulerOutput schedule();
  // After the step ran: advances num_computed (and a layer-segmented prefill's units), ends
  // prefill phases. The sequences in `out` must all still be scheduled (not removed).
  void on_step_done(const SchedulerOutput& out);
  // Frees everything a finished or aborted sequence holds and forgets it.
  void remove(Sequence* seq);

  const SchedulerConfig& config() const { return config_; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  const std::vector<Sequence*>& running() const { return running_; }  // in arrival order
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Tokens computed again because their sequence was preempted, since start.
  int64_t num_recomputed_tokens() const { return num_recomputed_tokens_; }
  // Summed working sets of the running sequences after the last schedule() (0 without a model).
  int64_t working_set_pages() const { return working_set_pages_; }
  // The working set of a running sequence as admission counts it (0 without a model).
  int64_t working_set(const Sequence& seq) const;
  // The length a sequence is owed KV blocks for (admission a).
  int32_t reserve_target(const Sequence& seq) const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  // Prefix caching (vLLM's counters, in tokens): tokens looked up at admissions, tokens found
  // cached, and prompt tokens found cached at requests' first admissions.
  int64_t prefix_cache_queries() const { return prefix_queries_; }
  int64_t prefix_cache_hits() const { return prefix_hits_; }
  int64_t prompt_tokens_cached() const { return prompt_tokens_cached_; }
  // The sequence whose prefill runs layer by layer now, or null.
  const Sequence* layer_segmented() const { return segmented_; }

 private:
  void preempt(Sequence* seq);
  static TokenView tokens_of(const Sequence& seq);
  // Counts an admission's prefix-cache lookup that found hit_tokens cached.
  void count_prefix_hit(Sequence& seq, int32_t hit_tokens);
  bool admissible(const Sequence& seq) const;
  bool wants_layer_segments(const Sequence* seq) const;
  // Admits `seq` (the first waiting one) into layer-segmented prefill if its blocks fit.
  bool admit_layer_segmented(Sequence* seq);
  // The running layer-segmented prefill's units for this step, out of `budget` tokens.
  void schedule_segments(SchedulerOutput& out, int32_t& budget) const;
  // After the step: advances the share's progress; the last share ends the prefill.
  void finish_segments(const LayerSegmentShare& share);

  SchedulerConfig config_;
  KvManager& kv_;
  std::vector<Sequence*> running_;  // in arrival order
  std::deque<Sequence*> waiting_;   // in arrival order (preempted ones re-enter at their place)
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_recomputed_tokens_ = 0;
  int64_t working_set_pages_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  int64_t prompt_tokens_cached_ = 0;
  const WorkingSetModel* working_set_ = nullptr;
  Sequence* segmented_ = nullptr;  // the running layer-segmented prefill
};

}  // namespace ls
