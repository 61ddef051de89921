// Qwen3 (dense): per-head RMSNorm q_norm / k_norm after the projections and before RoPE;
// head_dim is explicit in config.json and may differ from hidden / heads.
#include "model/architecture.h"

namespace ls {

const ArchitectureSpec& qwen3_architecture() {
  static const ArchitectureSpec spec{"Qwen3ForCausalLM", ArchitectureSpec::QkvBias::kFromConfig,
                                     true};
  return spec;
}

}  // namespace ls
