// lserve (LServe): streaming heads (sinks + local window) chosen from a DuoAttention pattern,
// and retrieval heads that select 64-token physical pages by 16-token logical-page summaries.
#include <algorithm>

#include "attention/head_pattern.h"
#include "attention/policies/policies.h"
#include "attention/selecting_policy.h"
#include "core/log.h"

namespace ls {
namespace {

class LservePolicy final : public SelectingPolicy {
 public:
  LservePolicy(KvGeometry g, std::vector<kernels::HeadMode> modes, const AttentionConfig& c)
      : SelectingPolicy("lserve", std::move(g), std::move(modes), c.token_budget,
                        c.select_interval, c.keep_first_page) {}
};

}  // namespace

Result<std::unique_ptr<AttentionPolicy>> make_lserve_policy(const AttentionConfig& config,
                                                            const PolicyModelInfo& model) {
  const int32_t page = config.page_tokens > 0 ? config.page_tokens : 64;
  const int32_t logical = config.logical_page_tokens > 0 ? config.logical_page_tokens
                                                         : std::min(16, page);
  if (page % logical != 0) {
    return invalid_argument("--page-tokens ({}) must be a multiple of --logical-page-tokens ({})",
                            page, logical);
  }
  // The pattern is chosen over the whole model; a tensor-parallel rank keeps its heads' roles.
  const int32_t all_kv_heads =
      model.kv_head_ids.empty() ? model.num_kv_heads : model.global_num_kv_heads;
  std::vector<bool> streaming;
  if (!config.head_pattern_path.empty()) {
    LS_ASSIGN_OR_RETURN(HeadGates gates, load_head_gates(config.head_pattern_path,
                                                         model.num_layers, all_kv_heads));
    streaming = choose_streaming_heads(gates, config.streaming_ratio);
  } else {
    if (config.streaming_ratio > 0) {
      LS_LOG_WARN(
          "lserve: no --head-pattern given; making the last {:.0f}% of kv heads of every layer "
          "streaming heads (run `longserve calibrate` to find the model's own pattern)",
          config.streaming_ratio * 100);
    }
    streaming = default_streaming_heads(model.num_layers, all_kv_heads, config.streaming_ratio);
  }
  streaming = rank_streaming_heads(streaming, model);
  KvGeometry g = make_policy_geometry(config, model, streaming, page, logical, true);
  return std::unique_ptr<AttentionPolicy>(
      new LservePolicy(std::move(g), modes_for(streaming, kernels::HeadMode::kSelected), config));
}

}  // namespace ls
