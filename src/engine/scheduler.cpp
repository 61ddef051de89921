#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <cmath>

namespace ls {

namespace {

// A sequence's own chunk limit (prompt logprobs), none when 0.
int32_t chunk_cap(const Sequence* seq) {
  return seq->max_chunk_tokens > 0 ? seq->max_chunk_tokens : std::numeric_limits<int32_t>::max();
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add(Sequence* seq) {
  seq->arrival_order = next_arrival_++;
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(seq);
}

int32_t Scheduler::reserve_target(const Sequence& seq) const {
  const int32_t len = seq.num_tokens();
  const int32_t remaining =
      std::max(0, seq.max_output_tokens - static_cast<int32_t>(seq.output_ids.size()));
  const auto share = static_cast<int32_t>(std::ceil(config_.decode_reserve_ratio * len));
  return len + std::min(remaining, std::max(kv_.geometry().page_tokens, share));
}

int64_t Scheduler::working_set(const Sequence& seq) const {
  if (working_set_ == nullptr) return 0;
  const bool prefilling = seq.slot < 0 || kv_.sequence(seq.slot).prefilling;
  return prefilling ? working_set_->prefill_pages(seq.num_tokens())
                    : working_set_->decode_pages(seq.slot, seq.num_tokens());
}

bool Scheduler::admissible(const Sequence& seq) const {
  // a. KV blocks: what the running sequences are still owed, plus the newcomer's whole target.
  BlockCount owed = kv_.blocks_for_new_sequence(reserve_target(seq));
  for (const Sequence* r : running_) {
    const BlockCount b = kv_.blocks_needed(r->slot, reserve_target(*r));
    owed.retrieval += b.retrieval;
    owed.streaming += b.streaming;
  }
  if (!kv_.can_allocate(owed)) return false;
  // b. Device page cache. A request alone always runs (validate_request refuses one that could
  //    never fit), so a large working set delays a request but never blocks it for good.
  if (working_set_ == nullptr || running_.empty()) return true;
  int64_t sum = working_set(seq);
  for (const Sequence* r : running_) sum += working_set(*r);
  return sum <= working_set_->cache_pages();
}

void Scheduler::preempt(Sequence* seq) {
  num_recomputed_tokens_ += seq->num_computed;
  if (seq->layer_segmented && config_.num_layers > 0) {
    // Its finished units, in tokens' worth (num_computed stays 0 until the last unit).
    num_recomputed_tokens_ += std::min<int64_t>(
        seq->num_uncomputed(),
        int64_t{seq->segment_units_done} * config_.segment_tokens / config_.num_layers);
  }
  ++seq->num_preemptions;
  if (seq == segmented_) segmented_ = nullptr;  // starts over when admitted again
  seq->layer_segmented = false;
  seq->segment_units_done = 0;
  kv_.remove_sequence(seq->slot);
  seq->slot = -1;
  seq->num_computed = 0;
  seq->status = SequenceStatus::kWaiting;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  // Back among the waiting at its arrival position, so FCFS order holds.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence* w) {
    return w->arrival_order > seq->arrival_order;
  });
  waiting_.insert(pos, seq);
  ++num_preemptions_;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;

  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    if (seq->layer_segmented) {  // its share is planned below, after the running tokens
      ++i;
      continue;
    }
    const bool prefilling = kv_.sequence(seq->slot).prefilling;
    const int32_t want = prefilling ? std::min({seq->num_uncomputed(), budget,
                                                config_.max_chunk_tokens, chunk_cap(seq)})
                                    : 1;
    const int32_t new_len = seq->num_computed + want;
    bool scheduled = false;
    while (true) {
      if (kv_.can_allocate(kv_.blocks_needed(seq->slot, new_len))) {
        if (kv_.grow(seq->slot, new_len).ok()) scheduled = true;
        break;
      }
      Sequence* victim = running_.back();
      const bool self = victim == seq;
      preempt(victim);
      out.preempted.push_back(victim);
      if (self) break;
    }
    if (!scheduled) {
      if (seq->status == SequenceStatus::kRunning) ++i;  // grow failed for another reason
      continue;
    }
    out.chunks.push_back({seq, want, prefilling, seq->num_computed + want == seq->num_tokens()});
    out.num_tokens += want;
    budget -= want;
    ++i;
  }

  schedule_segments(out, budget);

  // 2. Waiting sequences, in order, while everything fits; the first that does not fit blocks
  //    the rest (FCFS). Not in a step that preempted: the blocks just freed belong to the
  //    running sequences that needed them, and re-admitting the victim would only restart its
  //    prefill to be preempted again (vLLM v1 admits nothing in such a step either).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    // Prefix caching: the cached pages of its tokens, short of the last (whose logits it needs);
    // none for prompt logprobs, which need every prompt position's logits.
    const PrefixHit hit = seq->wants_prompt_logprobs()
                              ? PrefixHit{}
                              : kv_.match_prefix(tokens_of(*seq), seq->num_tokens() - 1);
    if (hit.num_tokens == 0 && wants_layer_segments(seq)) {
      // Its blocks, the running sequences' reserves or the arena are not free yet.
      if (!admissible(*seq) || !admit_layer_segmented(seq)) break;
      waiting_.pop_front();
      running_.push_back(seq);
      std::stable_sort(running_.begin(), running_.end(), [](const Sequence* a, const Sequence* b) {
        return a->arrival_order < b->arrival_order;
      });
      schedule_segments(out, budget);
      continue;
    }
    const int32_t want = std::min(
        {seq->num_uncomputed() - hit.num_tokens, budget, config_.max_chunk_tokens, chunk_cap(seq)});
    if (!admissible(*seq)) break;
    auto slot = kv_.add_sequence();
    if (!slot.ok()) break;
    kv_.attach_prefix(*slot, hit);
    if (!kv_.grow(*slot, hit.num_tokens + want).ok()) {
      kv_.remove_sequence(*slot);
      break;
    }
    waiting_.pop_front();
    count_prefix_hit(*seq, hit.num_tokens);
    seq->num_computed = hit.num_tokens;
    seq->slot = *slot;
    seq->status = SequenceStatus::kRunning;
    running_.push_back(seq);
    std::stable_sort(running_.begin(), running_.end(), [](const Sequence* a, const Sequence* b) {
      return a->arrival_order < b->arrival_order;
    });
    out.chunks.push_back({seq, want, true, seq->num_computed + want == seq->num_tokens()});
    out.num_tokens += want;
    budget -= want;
  }
  working_set_pages_ = 0;
  for (const Sequence* r : running_) working_set_pages_ += working_set(*r);
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    Sequence* seq = c.seq;
    seq->num_computed += c.num_tokens;
    // Key the pages this step filled (prefix caching) before the ring may shrink.
    kv_.register_pages(seq->slot, tokens_of(*seq), seq->num_computed);
    if (c.prefilling && seq->num_computed == seq->num_tokens()) kv_.finish_prefill(seq->slot);
  }
  finish_segments(out.segments);
}

TokenView Scheduler::tokens_of(const Sequence& seq) {
  return {seq.request->prompt_ids, seq.output_ids};
}

void Scheduler::count_prefix_hit(Sequence& seq, int32_t hit_tokens) {
  if (!kv_.prefix_caching()) return;
  prefix_queries_ += seq.num_tokens();
  prefix_hits_ += hit_tokens;
  RequestState& req = *seq.request;
  if (req.num_cached_tokens < 0) {  // the request's first admission (of any of its choices)
    req.num_cached_tokens = std::min(hit_tokens, seq.prompt_len());
    prompt_tokens_cached_ += req.num_cached_tokens;
  }
}

void Scheduler::remove(Sequence* seq) {
  if (seq == segmented_) segmented_ = nullptr;
  seq->layer_segmented = false;
  if (seq->slot >= 0) kv_.remove_sequence(seq->slot);
  seq->slot = -1;
  seq->status = SequenceStatus::kFinished;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
}

}  // namespace ls
