#pragma once
// Shared machinery of the policies: per-layer head modes and slots on the device, and the
// per-sequence local window. Policies that select pages extend it (selecting_policy.h).

#include <string>
#include <vector>

#include "attention/attention_config.h"
#include "attention/attention_policy.h"

namespace ls {

class PolicyBase : public AttentionPolicy {
 public:
  std::string_view name() const override { return name_; }
  const KvGeometry& kv_geometry() const override { return geometry_; }
  Status bind(Backend& backend, int32_t max_seqs) override;
  void plan_step(std::span<const StepSequence> seqs, StepAttentionPlan& plan) override;
  void select(Backend&, const LayerAttentionContext&) override {}
  // Streaming heads see every key while the context fits their sinks and both windows.
  int64_t exact_decode_len() const override;
  void fill_attention(int32_t layer, kernels::AttentionParams& params) const override;
  // Head modes/slots only: no index request.
  void fill_append(int32_t layer, const kernels::PageSummaries& summaries,
                   kernels::KvAppendParams& params) const override;

 protected:
  // modes[l * H + h]: how head h of layer l attends; it must agree with geometry.roles
  // (kStreaming exactly for streaming heads).
  PolicyBase(std::string name, KvGeometry geometry, std::vector<kernels::HeadMode> modes);

  const int32_t* head_modes(int32_t layer) const;
  const int32_t* head_slots(int32_t layer) const;

  std::string name_;
  KvGeometry geometry_;
  std::vector<kernels::HeadMode> modes_;  // [num_layers * num_kv_heads]
  Buffer head_arrays_;  // [num_layers, 2, num_kv_heads] i32: modes, then slots, per layer
};

}  // namespace ls

namespace ls {

// Tokens a coarse summary group covers by default (--summary-group-pages -1): 64 logical pages of
// 16 tokens, so the coarse level is 1/64 of the fine one for both quest and lserve paging.
inline constexpr int32_t kDefaultSummaryGroupTokens = 1024;

// The geometry shared by every policy: windows from the config, roles from `streaming`; with
// --page-summary-levels 2 and summaries kept, the coarse group size.
KvGeometry make_policy_geometry(const AttentionConfig& config, const PolicyModelInfo& model,
                                const std::vector<bool>& streaming, int32_t page_tokens,
                                int32_t logical_page_tokens, bool keep_summaries);

// A role mask over the whole model ([num_layers * global_num_kv_heads]) cut down to the kv heads
// this rank holds in each layer (model.kv_head_ids); the mask itself when the model is not split.
std::vector<bool> rank_streaming_heads(const std::vector<bool>& global,
                                       const PolicyModelInfo& model);

// Modes for a role mask: streaming heads kStreaming, the others `retrieval_mode`.
std::vector<kernels::HeadMode> modes_for(const std::vector<bool>& streaming,
                                         kernels::HeadMode retrieval_mode);

}  // namespace ls
