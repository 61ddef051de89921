// The scheduler's part of layer-segmented prefill (docs/layer-segmented-prefill.md): which
// waiting sequence takes it, its all-at-once KV reservation, and each step's share of units.
#include <algorithm>

#include "engine/scheduler.h"

namespace ls {

bool Scheduler::wants_layer_segments(const Sequence* seq) const {
  const int32_t n = seq->num_uncomputed();
  // Prompt logprobs need every prompt position's logits, which only chunked prefill returns.
  return !seq->wants_prompt_logprobs() && config_.layer_segment_min_tokens > 0 && config_.num_layers > 0 &&
         config_.segment_tokens > 0 && seq->num_computed == 0 &&
         n >= config_.layer_segment_min_tokens && n <= config_.max_layer_segment_tokens;
}

bool Scheduler::admit_layer_segmented(Sequence* seq) {
  if (segmented_ != nullptr) return false;  // one arena: the next long prompt waits (FCFS)
  const int32_t n = seq->num_uncomputed();
  // Every block at once: a layer's units read the K/V of every earlier segment of that layer,
  // so the prompt's pages must exist before layer 0 ends; reserving them now also means the
  // prefill never grows, so it never preempts anyone. With the host tier on these are homes in
  // host memory; the device holds the row's cache partition (one layer's pages at least).
  if (!kv_.can_allocate(kv_.blocks_for_new_sequence(n))) return false;
  auto slot = kv_.add_sequence();
  if (!slot.ok()) return false;
  for (int32_t len = 0; len < n;) {  // grow() takes one ring chunk at a time
    len = std::min(n, len + config_.max_chunk_tokens);
    if (!kv_.grow(*slot, len).ok()) {
      kv_.remove_sequence(*slot);
      return false;
    }
  }
  count_prefix_hit(*seq, 0);
  seq->slot = *slot;
  seq->status = SequenceStatus::kRunning;
  seq->layer_segmented = true;
  seq->segment_units_done = 0;
  segmented_ = seq;
  return true;
}

void Scheduler::schedule_segments(SchedulerOutput& out, int32_t& budget) const {
  Sequence* seq = segmented_;
  if (seq == nullptr || out.segments.seq != nullptr) return;
  const int32_t n = seq->num_uncomputed();  // num_computed stays 0 until the last unit
  const int32_t seg = config_.segment_tokens;
  const int32_t num_segments = (n + seg - 1) / seg;
  const int32_t num_units = num_segments * config_.num_layers;
  // A unit of `len` tokens costs about what `len` tokens cost in one of `num_layers` layers, so
  // the budget left after the running tokens buys budget x num_layers token-layers of units (a
  // step then takes about as long as a chunked step of the same budget). At least one unit, so
  // the prefill always moves.
  const int64_t allowance = int64_t{std::max(budget, 0)} * config_.num_layers;
  int64_t used = 0;
  int32_t u = seq->segment_units_done;
  while (u < num_units) {
    const int32_t begin = (u % num_segments) * seg;
    const int32_t len = std::min(seg, n - begin);
    if (u > seq->segment_units_done && used + len > allowance) break;
    used += len;
    ++u;
  }
  const auto spent = static_cast<int32_t>((used + config_.num_layers - 1) / config_.num_layers);
  out.segments = {seq, n, seq->segment_units_done, u, u == num_units, spent};
  budget = std::max(0, budget - spent);
}

void Scheduler::finish_segments(const LayerSegmentShare& share) {
  Sequence* seq = share.seq;
  if (seq == nullptr || seq != segmented_) return;
  seq->segment_units_done = share.unit_end;
  if (!share.samples) return;
  seq->num_computed = share.num_tokens;
  kv_.register_pages(seq->slot, tokens_of(*seq), seq->num_computed);
  kv_.finish_prefill(seq->slot);
  seq->layer_segmented = false;
  seq->segment_units_done = 0;
  segmented_ = nullptr;
}

}  // namespace ls
