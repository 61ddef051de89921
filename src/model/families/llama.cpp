// Llama 2 / 3 / 3.1 / 3.2: the reference layout; biases only when attention_bias is set.
#include "model/architecture.h"

namespace ls {

const ArchitectureSpec& llama_architecture() {
  static const ArchitectureSpec spec{"LlamaForCausalLM", ArchitectureSpec::QkvBias::kFromConfig,
                                     false};
  return spec;
}

}  // namespace ls
