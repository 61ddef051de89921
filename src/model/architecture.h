#pragma once
// What distinguishes one decoder family from another. All four supported families share the
// Hugging Face Llama tensor names and block structure (pre-norm, GQA attention with RoPE, SwiGLU
// MLP); a family file states only its differences. Adding a family adds a file in families/ and
// one line in architecture_registry.cpp.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ls {

struct ArchitectureSpec {
  std::string_view name;  // config.json "architectures"[0], e.g. "Qwen2ForCausalLM"
  // q/k/v projections carry biases: always (Qwen2: hard-coded, no config key), never, or as
  // config.json's attention_bias says (Llama/Mistral/Qwen3; o_proj then has one too).
  enum class QkvBias { kAlways, kFromConfig } qkv_bias = QkvBias::kFromConfig;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (Qwen3)
};

// nullptr for an unknown architecture.
const ArchitectureSpec* find_architecture(std::string_view name);
std::vector<std::string> supported_architectures();

// One per family file.
const ArchitectureSpec& llama_architecture();
const ArchitectureSpec& mistral_architecture();
const ArchitectureSpec& qwen2_architecture();
const ArchitectureSpec& qwen3_architecture();

}  // namespace ls
