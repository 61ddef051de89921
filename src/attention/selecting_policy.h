#pragma once
// Policies whose retrieval heads choose pages per query (Quest, LServe): they keep key min/max
// summaries per logical page (index, requested from the KV append in fill_append), score pages
// with the Quest bound and keep the top-K under a token budget (select), and reuse a selection
// for `select_interval` decode steps.
//
// Selection is per kv head, shared by its query group, so each page is read once per group.
// The group's score of a logical page is max over its query heads h of
// (bound_h(page) - max_p bound_h(p)): each head's bounds are measured from that head's own best
// page, because softmax only cares about logits relative to the head's maximum. A plain max
// across heads (ShadowKV) lets a head with large-norm queries crowd out the pages another head
// needs; the per-head offset gives every head's top pages score 0 and ranks the rest by how far
// they fall behind for their most interested head.

#include <utility>
#include <vector>

#include "attention/attention_config.h"
#include "attention/selection_hook.h"
#include "attention/policy_base.h"

namespace ls {

class SelectingPolicy : public PolicyBase {
 public:
  Status bind(Backend& backend, int32_t max_seqs) override;
  void plan_step(std::span<const StepSequence> seqs, StepAttentionPlan& plan) override;
  void select(Backend& backend, const LayerAttentionContext& ctx) override;
  void fill_attention(int32_t layer, kernels::AttentionParams& params) const override;
  // Head modes/slots plus the index request (params.summaries = summaries).
  void fill_append(int32_t layer, const kernels::PageSummaries& summaries,
                   kernels::KvAppendParams& params) const override;

  // The selection plus the pages started since it was made (at most select_interval tokens).
  int32_t decode_pages_per_head() const override;
  // Also bounded by the token budget: a longer context decodes over a page selection.
  int64_t exact_decode_len() const override;

  int32_t token_budget() const { return token_budget_; }
  int32_t budget_pages() const;
  int32_t max_selected() const;
  // Test/bench only (attention/selection_hook.h): called after every page_select; empty (the
  // default) calls nothing.
  void set_selection_hook(SelectionHook hook) { hook_ = std::move(hook); }

 protected:
  SelectingPolicy(std::string name, KvGeometry geometry, std::vector<kernels::HeadMode> modes,
                  int32_t token_budget, int32_t select_interval, bool keep_first_page);

 private:
  int32_t* layer_selected(int32_t layer) const;
  int32_t* layer_num_selected(int32_t layer) const;

  int32_t token_budget_;
  int32_t select_interval_;
  bool keep_first_page_;  // page 0 (the attention sink) always selected (AttentionConfig)
  int32_t max_seqs_ = 0;
  // Decode steps since each row last selected; -1: no selection cached (prefill, short context).
  std::vector<int32_t> steps_since_select_;  // [max_seqs]
  Buffer selected_;      // [num_layers, max_seqs, num_kv_heads, max_selected] i32
  Buffer num_selected_;  // [num_layers, max_seqs, num_kv_heads] i32
  SelectionHook hook_;
};

}  // namespace ls
