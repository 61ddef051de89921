// streaming (StreamingLLM): every head keeps only its attention sinks and a local window.
#include "attention/policies/policies.h"
#include "attention/policy_base.h"

namespace ls {
namespace {

class StreamingPolicy final : public PolicyBase {
 public:
  StreamingPolicy(KvGeometry g, std::vector<kernels::HeadMode> modes)
      : PolicyBase("streaming", std::move(g), std::move(modes)) {}
};

}  // namespace

Result<std::unique_ptr<AttentionPolicy>> make_streaming_policy(const AttentionConfig& config,
                                                               const PolicyModelInfo& model) {
  const int32_t page = config.page_tokens > 0 ? config.page_tokens : 64;
  std::vector<bool> streaming(static_cast<size_t>(model.num_layers * model.num_kv_heads), true);
  KvGeometry g = make_policy_geometry(config, model, streaming, page, page, false);
  return std::unique_ptr<AttentionPolicy>(
      new StreamingPolicy(std::move(g), modes_for(streaming, kernels::HeadMode::kStreaming)));
}

}  // namespace ls
