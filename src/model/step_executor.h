#pragma once
// The engine's view of "run the model on one step": ModelRunner implements it; scheduler and
// engine tests implement it with a fake model so they run without weights.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/step_input.h"

namespace ls {

// The hierarchical KV tier's state for metrics (docs/hierarchical-kv.md); all zero when it is off.
struct KvTierStats {
  bool enabled = false;
  int64_t host_bytes = 0;          // the host pool (pinned on GPU backends)
  int64_t host_pinned_bytes = 0;   // page-locked host memory the backend holds (0 on the CPU)
  int64_t device_cache_bytes = 0;  // the device page cache (K + V slots)
  int64_t hits = 0;                // mandatory pages found resident, since start
  int64_t misses = 0;              // pages copied from host homes, since start
  int64_t bytes_retrieved = 0;     // host-to-device bytes those copies moved
  // The cache in head-pages, for working-set admission (docs/working-set-scheduling.md).
  int64_t cache_pages = 0;             // device cache slots, all rows
  int32_t slots_per_row = 0;           // one request row's partition
  int32_t decode_pages_per_head = 0;   // pages a selecting head reads per decode step (0: all)
  // [rows, kernels::kRowCounters] per request row since start: mandatory pages, those reused
  // from the previous step, hits, misses (kernels/page_residency.h)
  std::vector<int64_t> row_counters;
  // Per-request device budgets (docs/device-cache-budgets.md): whether the executor takes them,
  // and each row's partition now, in head-page slots ([rows]).
  bool elastic_budgets = false;
  std::vector<int32_t> row_budgets;
};

// One tensor-parallel rank's numbers for /metrics (docs/tensor-parallel.md): its share of the
// head pattern (kv heads summed over the layers) and its own hierarchical KV tier.
struct TpRankStats {
  int32_t retrieval_kv_heads = 0;  // retrieval kv heads, summed over layers
  int32_t streaming_kv_heads = 0;  // streaming kv heads, summed over layers
  KvTierStats tier;                // the rank's tier (row_counters, row_budgets left empty)
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual KvTierStats kv_tier_stats() const { return {}; }
  // Not ok once the executor cannot run any more steps (a tensor-parallel group that a failed rank
  // took down): every later step fails with this error. The engine then fails every request and
  // reports itself unhealthy (docs/tensor-parallel.md, "Failures").
  virtual Status fatal_error() const { return {}; }
  // [ranks] each tensor-parallel rank's numbers; empty without tensor parallelism.
  virtual std::vector<TpRankStats> tp_rank_stats() const { return {}; }
  // Decode steps that ran shared-prefix attention (docs/shared-prefix-attention.md), since start.
  virtual int64_t shared_prefix_steps() const { return 0; }
  // Prefix tokens those steps' sequences attended through the shared path (prefix x members).
  virtual int64_t shared_prefix_tokens() const { return 0; }
  // Resizes the device-cache partitions: row r gets `slots[r]` head-page slots (the engine's
  // budget plan, applied between steps). Only with the tier on and elastic budgets.
  virtual Status set_device_budgets(const std::vector<int32_t>& /*slots*/) {
    return unimplemented("this executor has no elastic device-cache budgets");
  }
  // Appends the step's K/V, runs the layers and returns `logits` [logit_rows, vocab] f32 (host).
  virtual Status forward(const StepInput& step, std::vector<float>& logits) = 0;
  virtual int32_t vocab_size() const = 0;
  // Layer-segmented prefill (docs/layer-segmented-prefill.md): runs `in`'s units; `logits`
  // becomes [1, vocab] f32 (the last token's) when the share ends the prefill, else empty.
  // Executors that cannot (layer_segment_tokens() == 0) refuse.
  virtual Status forward_layer_segments(const LayerSegmentInput& /*in*/,
                                        std::vector<float>& /*logits*/) {
    return unimplemented("this executor has no layer-segmented prefill");
  }
  // Layers of the model (the scheduler's unit count); 0 when layer-segmented prefill is off.
  virtual int32_t num_layers() const { return 0; }
  // Longest prompt a layer-segmented prefill may hold (the hidden-state arena's rows); 0: none.
  virtual int32_t max_layer_segment_tokens() const { return 0; }
  // Device bytes of the hidden-state arena ([max_layer_segment_tokens, hidden] act dtype).
  virtual int64_t layer_segment_arena_bytes() const { return 0; }
};

}  // namespace ls
