// dense: every head attends to every earlier token. The exact reference all sparse policies
// reduce to (lserve with ratio 0 and a budget >= the context).
#include "attention/policies/policies.h"
#include "attention/policy_base.h"

namespace ls {
namespace {

class DensePolicy final : public PolicyBase {
 public:
  DensePolicy(KvGeometry g, std::vector<kernels::HeadMode> modes)
      : PolicyBase("dense", std::move(g), std::move(modes)) {}
};

}  // namespace

Result<std::unique_ptr<AttentionPolicy>> make_dense_policy(const AttentionConfig& config,
                                                           const PolicyModelInfo& model) {
  const int32_t page = config.page_tokens > 0 ? config.page_tokens : 64;
  std::vector<bool> streaming(static_cast<size_t>(model.num_layers * model.num_kv_heads), false);
  KvGeometry g = make_policy_geometry(config, model, streaming, page, page, false);
  return std::unique_ptr<AttentionPolicy>(
      new DensePolicy(std::move(g), modes_for(streaming, kernels::HeadMode::kCausal)));
}

}  // namespace ls
