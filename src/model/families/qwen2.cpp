// Qwen2 / Qwen2.5: q/k/v projections always have biases (transformers hard-codes them; there is
// no config key), o_proj has none.
#include "model/architecture.h"

namespace ls {

const ArchitectureSpec& qwen2_architecture() {
  static const ArchitectureSpec spec{"Qwen2ForCausalLM", ArchitectureSpec::QkvBias::kAlways,
                                     false};
  return spec;
}

}  // namespace ls
