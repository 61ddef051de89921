// quest (Tang et al. 2024): every head selects pages by the key min/max bound; flat pages, the
// physical page is the logical page (16 tokens by default, any size with --page-tokens).
#include "attention/policies/policies.h"
#include "attention/selecting_policy.h"

namespace ls {
namespace {

class QuestPolicy final : public SelectingPolicy {
 public:
  QuestPolicy(KvGeometry g, std::vector<kernels::HeadMode> modes, const AttentionConfig& c)
      : SelectingPolicy("quest", std::move(g), std::move(modes), c.token_budget,
                        c.select_interval, c.keep_first_page) {}
};

}  // namespace

Result<std::unique_ptr<AttentionPolicy>> make_quest_policy(const AttentionConfig& config,
                                                           const PolicyModelInfo& model) {
  const int32_t page = config.page_tokens > 0 ? config.page_tokens : 16;
  std::vector<bool> streaming(static_cast<size_t>(model.num_layers * model.num_kv_heads), false);
  KvGeometry g = make_policy_geometry(config, model, streaming, page, page, true);
  return std::unique_ptr<AttentionPolicy>(
      new QuestPolicy(std::move(g), modes_for(streaming, kernels::HeadMode::kSelected), config));
}

}  // namespace ls
