#include "attention/selecting_policy.h"

#include <algorithm>
#include <utility>

namespace ls {

SelectingPolicy::SelectingPolicy(std::string name, KvGeometry geometry,
                                 std::vector<kernels::HeadMode> modes, int32_t token_budget,
                                 int32_t select_interval, bool keep_first_page)
    : PolicyBase(std::move(name), std::move(geometry), std::move(modes)),
      token_budget_(token_budget),
      select_interval_(select_interval),
      keep_first_page_(keep_first_page) {}

int32_t SelectingPolicy::budget_pages() const {
  return std::max(1, token_budget_ / geometry_.page_tokens);
}

int64_t SelectingPolicy::exact_decode_len() const {
  // plan_step: a decode step whose context is within the budget reads every page.
  return std::min<int64_t>(PolicyBase::exact_decode_len(), token_budget_);
}

int32_t SelectingPolicy::max_selected() const { return std::max(3, budget_pages()); }

int32_t SelectingPolicy::decode_pages_per_head() const {
  return max_selected() + (select_interval_ + geometry_.page_tokens - 1) / geometry_.page_tokens + 1;
}

Status SelectingPolicy::bind(Backend& backend, int32_t max_seqs) {
  LS_RETURN_IF_ERROR(PolicyBase::bind(backend, max_seqs));
  max_seqs_ = max_seqs;
  steps_since_select_.assign(static_cast<size_t>(max_seqs), -1);
  const int64_t rows = static_cast<int64_t>(geometry_.num_layers) * max_seqs * geometry_.num_kv_heads;
  LS_ASSIGN_OR_RETURN(selected_, backend.allocate(rows * max_selected() * 4));
  LS_ASSIGN_OR_RETURN(num_selected_, backend.allocate(rows * 4));
  backend.fill_zero(selected_.data(), selected_.bytes());
  backend.fill_zero(num_selected_.data(), num_selected_.bytes());
  return {};
}

void SelectingPolicy::plan_step(std::span<const StepSequence> seqs, StepAttentionPlan& plan) {
  PolicyBase::plan_step(seqs, plan);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const StepSequence& s = seqs[i];
    int32_t& since = steps_since_select_[static_cast<size_t>(s.slot)];
    if (s.prefilling || s.kv_len <= token_budget_) {
      // Prefill attends causally; a context within the budget uses every page.
      since = -1;
      continue;
    }
    if (since < 0 || since >= select_interval_) {
      plan.select_rows[i] = s.slot;
      plan.any_select = true;
      since = 0;
    }
    ++since;
    plan.selected_rows[i] = s.slot;
  }
}

int32_t* SelectingPolicy::layer_selected(int32_t layer) const {
  return selected_.as<int32_t>() +
         static_cast<ptrdiff_t>(layer) * max_seqs_ * geometry_.num_kv_heads * max_selected();
}

int32_t* SelectingPolicy::layer_num_selected(int32_t layer) const {
  return num_selected_.as<int32_t>() +
         static_cast<ptrdiff_t>(layer) * max_seqs_ * geometry_.num_kv_heads;
}

void SelectingPolicy::select(Backend& backend, const LayerAttentionContext& ctx) {
  kernels::PageSelectParams p;
  p.q = ctx.q;
  p.q_dtype = ctx.act_dtype;
  p.num_seqs = ctx.num_seqs;
  p.q_indptr = ctx.q_indptr;
  p.num_q_heads = ctx.num_q_heads;
  p.num_kv_heads = ctx.num_kv_heads;
  p.head_dim = ctx.head_dim;
  p.kv_lens = ctx.kv_lens;
  p.head_mode = head_modes(ctx.layer);
  p.head_slot = head_slots(ctx.layer);
  p.page_tokens = geometry_.page_tokens;
  p.retrieval_blocks = ctx.retrieval_blocks;
  p.retrieval_blocks_stride = ctx.retrieval_blocks_stride;
  p.heads_per_block = geometry_.roles.num_retrieval();
  p.summaries = ctx.summaries;
  p.budget_pages = budget_pages();
  p.keep_first_page = keep_first_page_ ? 1 : 0;
  p.out_rows = ctx.select_rows;
  p.selected = layer_selected(ctx.layer);
  p.num_selected = layer_num_selected(ctx.layer);
  p.max_selected = max_selected();
  backend.page_select(p);
  if (hook_) hook_(backend, ctx.layer, p);
}

void SelectingPolicy::fill_attention(int32_t layer, kernels::AttentionParams& params) const {
  PolicyBase::fill_attention(layer, params);
  params.selected = layer_selected(layer);
  params.num_selected = layer_num_selected(layer);
  params.max_selected = max_selected();
}

void SelectingPolicy::fill_append(int32_t layer, const kernels::PageSummaries& summaries,
                                  kernels::KvAppendParams& params) const {
  PolicyBase::fill_append(layer, summaries, params);
  params.summaries = summaries;
}

}  // namespace ls
