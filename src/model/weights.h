#pragma once
// The parameters of a decoder model, resident on one backend. Shapes follow Hugging Face: a
// linear weight is [out_features, in_features]. q, k and v are fused into one matrix (one GEMM
// reads all three; qkv_split_rope hands attention its inputs), gate and up into one [2 * inter,
// hidden] matrix so the MLP runs one GEMM and silu_mul reads both halves.

#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/architecture.h"

namespace ls {

struct LayerWeights {
  TensorView input_norm;  // [hidden] f32
  LinearWeight qkv;       // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]: q, k, v rows
  TensorView q_norm;      // [head_dim] f32, Qwen3 only (else empty)
  TensorView k_norm;      // [head_dim] f32, Qwen3 only
  LinearWeight o;         // [hidden, num_heads * head_dim]
  TensorView post_norm;   // [hidden] f32
  LinearWeight gate_up;   // [2 * intermediate, hidden]: gate rows, then up rows
  LinearWeight down;      // [hidden, intermediate]
};

struct ModelWeights {
  TensorView embed;  // [vocab, hidden] weight dtype
  std::vector<LayerWeights> layers;
  TensorView final_norm;  // [hidden] f32
  LinearWeight lm_head;   // [vocab, hidden]; views `embed` when the embeddings are tied
  std::vector<Buffer> storage;  // owns every tensor above
  // Holds the mapped GGUF file (and reordered block copies) that quantized LinearWeights point
  // into.
  std::vector<std::shared_ptr<const void>> keep_alive;
  int64_t bytes = 0;            // device bytes of all parameters
  // Bytes read from memory per decoded token (every parameter once, plus one embedding row).
  int64_t bytes_per_token = 0;
};

// How linear weights meet FP8 (docs/fp8-weights.md). kAuto: an FP8 checkpoint's e4m3 weights
// stay e4m3 (per-row scales, model/fp8_weights.h) where backend.reads_fp8() accepts them, the
// rest is dequantized to the backend's weight dtype (the CPU: f32). kDequantize (--quantization
// none): every FP8 weight is dequantized. kQuantize (--quantization fp8): float linear weights
// are quantized at load too, per output row; the lm_head and the embedding table stay as stored.
enum class Fp8Load : uint8_t { kAuto, kDequantize, kQuantize };

// Reads, checks and uploads every tensor. Linear weights and the embedding table are stored as
// backend.weight_dtype_for(checkpoint dtype) (the CPU keeps f32/bf16/f16 as they are); norm
// weights and biases become f32. Errors name the tensor and its file.
// quantize_to (a ggml type io/gguf_quantize writes): linear weights (and a tied lm_head) whose rows
// are whole blocks of it are quantized at load when the backend reads that type; the rest stay
// as they are.
Result<ModelWeights> load_weights(const Checkpoint& checkpoint, const ModelConfig& config,
                                  const ArchitectureSpec& arch, Backend& backend,
                                  std::optional<GgmlType> quantize_to = std::nullopt,
                                  Fp8Load fp8 = Fp8Load::kAuto);

// The tensor names this architecture reads for `config` (required first, optional second).
void expected_tensor_names(const ModelConfig& config, const ArchitectureSpec& arch,
                           std::vector<std::string>& required, std::vector<std::string>& optional);

}  // namespace ls
