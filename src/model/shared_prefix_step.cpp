#include "model/shared_prefix_step.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ls {

namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Result<SharedPrefixStep> SharedPrefixStep::create(Backend& backend, const KvGeometry& geometry,
                                                  bool reads_every_page,
                                                  const SharedPrefixStepConfig& c) {
  SharedPrefixStep s;
  s.config_ = c;
  s.reads_every_page_ = reads_every_page;
  s.enabled_now_ = c.enabled;
  if (!c.enabled) return s;
  if (c.max_seqs <= 0 || c.max_model_len <= 0 || c.num_q_heads <= 0 || c.num_kv_heads <= 0 ||
      c.plan.split_tokens <= 0 || c.plan.max_rows <= 0) {
    return invalid_argument("shared-prefix attention: bad runner limits");
  }
  s.layer_ok_.assign(static_cast<size_t>(geometry.num_layers), 0);
  for (int32_t l = 0; l < geometry.num_layers; ++l) {
    s.layer_ok_[static_cast<size_t>(l)] =
        geometry.roles.num_layers() > 0 && geometry.roles.num_streaming_in_layer(l) == 0;
  }
  // Every sequence has at most ceil(max_model_len / split) suffix items, and a group's prefix
  // items number at most that many per member: 2 x max_seqs x chunks bounds any plan.
  const int64_t chunks = (int64_t{c.max_model_len} + c.plan.split_tokens - 1) / c.plan.split_tokens;
  s.max_items_ = static_cast<int32_t>(2 * int64_t{c.max_seqs} * chunks);
  s.item_seqs_offset_ = align_up(int64_t{c.max_seqs} * 4);
  s.items_offset_ = s.item_seqs_offset_ + align_up(2 * int64_t{c.max_seqs} * 4);
  const int64_t bytes =
      s.items_offset_ + int64_t{s.max_items_} * static_cast<int64_t>(sizeof(kernels::SharedPrefixItem));
  LS_ASSIGN_OR_RETURN(s.plan_, backend.allocate(bytes));
  s.staging_.resize(static_cast<size_t>(bytes));
  s.modes_.assign(static_cast<size_t>(c.num_kv_heads), static_cast<int32_t>(kernels::HeadMode::kCausal));
  return s;
}

void SharedPrefixStep::plan_step(Backend& backend, const StepInput& step, const KvManager& kv,
                                 const StepAttentionPlan& plan, bool tiered) {
  active_ = false;
  const auto num_seqs = static_cast<int32_t>(step.seqs.size());
  if (!enabled_now_ || tiered || num_seqs < 2 ||
      static_cast<int32_t>(step.tokens.size()) != num_seqs || num_seqs > config_.max_seqs) {
    return;
  }
  // Retrieval heads that select pages visit their own selections: shared only while no sequence
  // of the step uses one (the kernels then treat them as causal).
  if (!reads_every_page_) {
    for (const int32_t row : plan.selected_rows) {
      if (row >= 0) return;
    }
  }
  if (std::none_of(layer_ok_.begin(), layer_ok_.end(), [](uint8_t ok) { return ok != 0; })) {
    return;
  }
  int32_t stride = 1;
  for (const StepSequence& s : step.seqs) {
    stride = std::max(stride, static_cast<int32_t>(kv.sequence(s.slot).retrieval.size()));
  }
  kv_lens_.resize(static_cast<size_t>(num_seqs));
  blocks_.assign(static_cast<size_t>(num_seqs) * static_cast<size_t>(stride), -1);
  for (int32_t i = 0; i < num_seqs; ++i) {
    const StepSequence& s = step.seqs[static_cast<size_t>(i)];
    kv_lens_[static_cast<size_t>(i)] = s.kv_len;
    const std::vector<int32_t>& row = kv.sequence(s.slot).retrieval;
    std::copy(row.begin(), row.end(), blocks_.begin() + int64_t{i} * stride);
  }
  const int32_t page_tokens = kv.geometry().page_tokens;
  const kernels::SharedPrefixGroups groups = kernels::find_shared_prefix_groups(
      num_seqs, kv_lens_.data(), blocks_.data(), stride, page_tokens);
  if (groups.prefix_tokens.empty()) return;
  Result<kernels::SharedPrefixPlan> planned = kernels::plan_shared_prefix(
      num_seqs, kv_lens_.data(), config_.num_q_heads, config_.num_kv_heads, modes_.data(),
      nullptr, blocks_.data(), stride, page_tokens, groups, config_.plan);
  // A refusal (it cannot happen with groups found from the tables) or a plan larger than the
  // buffer leaves the step to the ordinary kernel.
  if (!planned.ok() || static_cast<int64_t>(planned->items.size()) > max_items_ ||
      static_cast<int64_t>(planned->item_seqs.size()) > 2 * int64_t{config_.max_seqs}) {
    return;
  }
  const kernels::SharedPrefixPlan& p = *planned;
  num_items_ = static_cast<int32_t>(p.items.size());
  max_parts_ = p.max_parts;
  max_item_rows_ = p.max_item_rows;
  uint8_t* base = staging_.data();
  std::memcpy(base, p.num_parts.data(), p.num_parts.size() * 4);
  std::memcpy(base + item_seqs_offset_, p.item_seqs.data(), p.item_seqs.size() * 4);
  std::memcpy(base + items_offset_, p.items.data(), p.items.size() * sizeof(kernels::SharedPrefixItem));
  backend.copy_bytes(plan_.data(), base,
                     items_offset_ + int64_t{num_items_} *
                                         static_cast<int64_t>(sizeof(kernels::SharedPrefixItem)));
  active_ = true;
  ++stats_.steps;
  stats_.layer_calls += std::count(layer_ok_.begin(), layer_ok_.end(), uint8_t{1});
  stats_.shared_keys += p.shared_keys;
  for (size_t g = 0; g < groups.prefix_tokens.size(); ++g) {
    stats_.prefix_tokens += int64_t{groups.prefix_tokens[g]} *
                            (groups.group_indptr[g + 1] - groups.group_indptr[g]);
  }
}

kernels::SharedPrefixParams SharedPrefixStep::params(const kernels::AttentionParams& attn) const {
  kernels::SharedPrefixParams sp;
  sp.attn = attn;
  const auto* base = static_cast<const uint8_t*>(plan_.data());
  sp.num_parts = reinterpret_cast<const int32_t*>(base);
  sp.item_seqs = reinterpret_cast<const int32_t*>(base + item_seqs_offset_);
  sp.items = reinterpret_cast<const kernels::SharedPrefixItem*>(base + items_offset_);
  sp.num_items = num_items_;
  sp.max_parts = max_parts_;
  sp.max_item_rows = max_item_rows_;
  return sp;
}

}  // namespace ls
