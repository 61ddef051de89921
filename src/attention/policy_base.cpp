#include "attention/policy_base.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace ls {

PolicyBase::PolicyBase(std::string name, KvGeometry geometry,
                       std::vector<kernels::HeadMode> modes)
    : name_(std::move(name)), geometry_(std::move(geometry)), modes_(std::move(modes)) {
  assert(modes_.size() ==
         static_cast<size_t>(geometry_.num_layers) * static_cast<size_t>(geometry_.num_kv_heads));
}

Status PolicyBase::bind(Backend& backend, int32_t /*max_seqs*/) {
  const int32_t layers = geometry_.num_layers;
  const int32_t heads = geometry_.num_kv_heads;
  std::vector<int32_t> host(static_cast<size_t>(layers) * 2 * static_cast<size_t>(heads));
  for (int32_t l = 0; l < layers; ++l) {
    for (int32_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>(l) * 2 * static_cast<size_t>(heads);
      host[base + static_cast<size_t>(h)] =
          static_cast<int32_t>(modes_[static_cast<size_t>(l * heads + h)]);
      host[base + static_cast<size_t>(heads + h)] = geometry_.roles.slot(l, h);
    }
  }
  const auto bytes = static_cast<int64_t>(host.size() * sizeof(int32_t));
  LS_ASSIGN_OR_RETURN(head_arrays_, backend.allocate(bytes));
  backend.copy_bytes(head_arrays_.data(), host.data(), bytes);
  backend.synchronize();
  return {};
}

int64_t PolicyBase::exact_decode_len() const {
  if (geometry_.roles.num_streaming() == 0) return std::numeric_limits<int64_t>::max();
  // A query at position t of a streaming head sees [0, sink) and its last `local` keys: all of
  // [0, t] while t + 1 <= sink + local, for the decode and the prefill window alike.
  return int64_t{geometry_.sink_tokens} +
         std::min(geometry_.prefill_local_tokens, geometry_.decode_local_tokens);
}

const int32_t* PolicyBase::head_modes(int32_t layer) const {
  return head_arrays_.as<int32_t>() + static_cast<ptrdiff_t>(layer) * 2 * geometry_.num_kv_heads;
}

const int32_t* PolicyBase::head_slots(int32_t layer) const {
  return head_modes(layer) + geometry_.num_kv_heads;
}

void PolicyBase::plan_step(std::span<const StepSequence> seqs, StepAttentionPlan& plan) {
  plan.resize(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    plan.local_tokens[i] =
        seqs[i].prefilling ? geometry_.prefill_local_tokens : geometry_.decode_local_tokens;
  }
}

void PolicyBase::fill_attention(int32_t layer, kernels::AttentionParams& params) const {
  params.head_mode = head_modes(layer);
  params.head_slot = head_slots(layer);
  params.sink_tokens = geometry_.sink_tokens;
  params.num_sink_pages = geometry_.num_sink_pages();
}

void PolicyBase::fill_append(int32_t layer, const kernels::PageSummaries& /*summaries*/,
                             kernels::KvAppendParams& params) const {
  params.head_mode = head_modes(layer);
  params.head_slot = head_slots(layer);
  params.num_sink_pages = geometry_.num_sink_pages();
}

}  // namespace ls

namespace ls {

KvGeometry make_policy_geometry(const AttentionConfig& config, const PolicyModelInfo& model,
                                const std::vector<bool>& streaming, int32_t page_tokens,
                                int32_t logical_page_tokens, bool keep_summaries) {
  KvGeometry g;
  g.num_layers = model.num_layers;
  g.num_kv_heads = model.num_kv_heads;
  g.head_dim = model.head_dim;
  g.page_tokens = page_tokens;
  g.logical_page_tokens = logical_page_tokens;
  g.keep_summaries = keep_summaries;
  if (keep_summaries && config.page_summary_levels == 2) {
    g.summary_group_pages = config.summary_group_pages > 0
                                ? config.summary_group_pages
                                : std::max(1, kDefaultSummaryGroupTokens / page_tokens);
  }
  g.roles = HeadRoles(model.num_layers, model.num_kv_heads, streaming);
  g.sink_tokens = config.sink_tokens;
  g.prefill_local_tokens = config.prefill_local_tokens;
  g.decode_local_tokens = config.decode_local_tokens;
  return g;
}

std::vector<bool> rank_streaming_heads(const std::vector<bool>& global,
                                       const PolicyModelInfo& model) {
  if (model.kv_head_ids.empty()) return global;
  std::vector<bool> mine;
  mine.reserve(static_cast<size_t>(model.num_layers) * model.kv_head_ids.size());
  const auto g = static_cast<size_t>(model.global_num_kv_heads);
  const auto k = static_cast<size_t>(model.num_kv_heads);
  for (size_t l = 0; l < static_cast<size_t>(model.num_layers); ++l) {
    for (size_t j = 0; j < k; ++j) {
      mine.push_back(global[l * g + static_cast<size_t>(model.kv_head_ids[l * k + j])]);
    }
  }
  return mine;
}

std::vector<kernels::HeadMode> modes_for(const std::vector<bool>& streaming,
                                         kernels::HeadMode retrieval_mode) {
  std::vector<kernels::HeadMode> modes(streaming.size());
  for (size_t i = 0; i < streaming.size(); ++i) {
    modes[i] = streaming[i] ? kernels::HeadMode::kStreaming : retrieval_mode;
  }
  return modes;
}

}  // namespace ls
