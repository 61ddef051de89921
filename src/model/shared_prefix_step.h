#pragma once
// SharedPrefixStep: the model runner's shared-prefix (Hydragen) decode attention
// (docs/shared-prefix-attention.md). Once per decode step, on the host, it finds the sequences
// whose retrieval block tables start with the same physical blocks (prefix caching shares
// cached blocks by reference count), plans the prefix items (once per group) and the suffix
// items (per sequence), and uploads the plan into one device buffer of fixed capacity; each
// layer whose heads all read every page then runs backend.shared_prefix_attention instead of
// backend.attention. Everything else (prefill chunks, steps without a group, sparse layers,
// the host KV tier) keeps the ordinary kernel.
//
// Per head mode:
//  - kCausal (dense policy, every retrieval head of a layer): shared.
//  - kSelected (quest, lserve retrieval heads): each sequence visits its own page selection, so
//    a layer with such heads is shared only in a step where no sequence uses a selection (the
//    policy treats those heads as causal then); otherwise per sequence.
//  - kStreaming (lserve streaming heads): sinks and a ring, not the prefix pages: a layer with
//    a streaming head runs the ordinary kernel for all its heads.
//
// CUDA graphs: the plan lives at a fixed device address (sized for the largest plan the runner
// can see) and its contents change every step, but the kernels' grids depend on the item count
// and the partial slots per row, so shape() is part of the runner's recorded-step key. In a
// steady batch both stay put (suffix items grow by one per split_tokens generated tokens).

#include <cstdint>
#include <vector>

#include "attention/step_plan.h"
#include "backend/backend.h"
#include "core/status.h"
#include "kernels/paged_kv.h"
#include "kernels/shared_prefix.h"
#include "kv/kv_geometry.h"
#include "kv/kv_manager.h"
#include "model/step_input.h"

namespace ls {

struct SharedPrefixStepConfig {
  bool enabled = true;
  int32_t max_seqs = 16;         // sequences per step
  int32_t max_model_len = 4096;  // longest sequence
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  // Keys per item (prefix and suffix); the CUDA kernel takes items of at most 64 rows.
  kernels::SharedPrefixPlanConfig plan;
};

// Counters since the runner was made (host, for benchmarks and tests).
struct SharedPrefixStats {
  int64_t steps = 0;        // decode steps that ran shared-prefix attention
  int64_t layer_calls = 0;  // layers of those steps that did
  int64_t shared_keys = 0;  // per step: prefix keys not read again per member (sum over steps)
  // Per step: shared-prefix keys the members' queries attended through the shared path (each
  // group's prefix length times its members), summed over steps.
  int64_t prefix_tokens = 0;
};

class SharedPrefixStep {
 public:
  // Allocates the plan's device buffer on `backend` (nothing when config.enabled is false).
  static Result<SharedPrefixStep> create(Backend& backend, const KvGeometry& geometry,
                                         bool reads_every_page, const SharedPrefixStepConfig& c);
  SharedPrefixStep() = default;

  // Host, once per forward step, after the policy planned it: decides whether this step runs
  // shared-prefix attention and, if so, uploads the plan. `tiered`: the host KV tier is on (its
  // residency op maps each sequence's pages into the sequence's own device-cache slots, so a
  // prefix read through one member's table would not be resident for the others: off).
  void plan_step(Backend& backend, const StepInput& step, const KvManager& kv,
                 const StepAttentionPlan& plan, bool tiered);
  // Benchmarks: turns the shared path off and on again (on only if it was made enabled).
  void set_enabled(bool on) { enabled_now_ = on && config_.enabled; }
  // Forgets the step (after its ops are enqueued; layer-segmented units never share).
  void clear() { active_ = false; }

  bool active() const { return active_; }
  // Whether layer `layer` of the active step runs shared-prefix attention.
  bool use_layer(int32_t layer) const {
    return active_ && layer_ok_[static_cast<size_t>(layer)] != 0;
  }
  // The kernel parameters for this layer: `attn` is the layer's ordinary decode params.
  kernels::SharedPrefixParams params(const kernels::AttentionParams& attn) const;
  // What the recorded decode step depends on besides the runner's own shape: item count and
  // partial slots per row (0 when inactive).
  int64_t shape() const {
    return active_ ? (int64_t{num_items_} << 20) | int64_t{max_parts_} : 0;
  }
  const SharedPrefixStats& stats() const { return stats_; }

 private:
  SharedPrefixStepConfig config_;
  std::vector<uint8_t> layer_ok_;       // [num_layers] every kv head is a retrieval head
  bool reads_every_page_ = false;       // the policy's retrieval heads never select pages
  bool enabled_now_ = false;            // config_.enabled unless a benchmark turned it off
  Buffer plan_;                         // device: num_parts, item_seqs, items (below)
  int64_t item_seqs_offset_ = 0;        // bytes; num_parts [max_seqs] i32 at 0
  int64_t items_offset_ = 0;            // bytes; item_seqs [2 * max_seqs] i32 before it
  int32_t max_items_ = 0;               // items [max_items] SharedPrefixItem after it
  std::vector<uint8_t> staging_;        // host copy of the used part of plan_
  std::vector<int32_t> kv_lens_, blocks_, modes_;  // host scratch of the step
  bool active_ = false;
  int32_t num_items_ = 0;
  int32_t max_parts_ = 0;
  int32_t max_item_rows_ = 0;
  SharedPrefixStats stats_;
};

}  // namespace ls
