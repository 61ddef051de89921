// Mistral 7B v0.1-v0.3: the Llama layout (v0.1's sliding window is read from config.json).
#include "model/architecture.h"

namespace ls {

const ArchitectureSpec& mistral_architecture() {
  static const ArchitectureSpec spec{"MistralForCausalLM",
                                     ArchitectureSpec::QkvBias::kFromConfig, false};
  return spec;
}

}  // namespace ls
