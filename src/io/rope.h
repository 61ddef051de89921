#pragma once
// RoPE settings (parsed from config.json by model_config.cpp) and the frequency math, as pure
// functions so the model layer and the tests share one definition.
//
// The math mirrors transformers' modeling_rope_utils.py (v5.17) step by step, in the same
// precision: what torch computes on float32 tensors is computed here in float (one rounding per
// tensor op, never fused), what Python computes on scalars is computed in double. Against
// transformers the results agree bit for bit except where torch's vectorised powf (1-ulp Sleef)
// rounds differently from the correctly rounded libm powf: at most 2 of 64 frequencies per config
// on the fixture grid, each by one float32 ulp (< 2e-7 relative). tests/io/rope_test.cpp checks
// 1e-6 relative against fixtures dumped from transformers.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ls {

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3 };

// "default", "linear", "dynamic", "yarn", "llama3".
std::string_view rope_type_name(RopeType type);

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // linear, dynamic, yarn, llama3. For yarn without an explicit factor the parser stores
  // max_position_embeddings / original_max_position_embeddings, as transformers does.
  double factor = 1.0;
  // yarn, llama3: the pre-extension context length (the parser fills max_position_embeddings when
  // the config gives none); 0 means "use max_position_embeddings".
  int64_t original_max_position_embeddings = 0;
  double low_freq_factor = 1.0;                                    // llama3
  double high_freq_factor = 4.0;                                   // llama3
  double beta_fast = 32;                                           // yarn
  double beta_slow = 1;                                            // yarn
  std::optional<double> attention_factor, mscale, mscale_all_dim;  // yarn
  bool truncate = true;                                            // yarn
  // The leading fraction of each head that is rotated: rotary_dim = int(head_dim * factor).
  double partial_rotary_factor = 1.0;
};

// int(head_dim * partial_rotary_factor), Python's truncation.
int64_t rope_rotary_dim(const RopeConfig& rope, int64_t head_dim);

// inv_freq [rotary_dim / 2] f32, element i rotating the pair (i, i + rotary_dim / 2) (NeoX
// rotate_half). rotary_dim must be even and positive, else the result is empty.
// `seq_len` matters only for kDynamic: at or below max_position_embeddings the frequencies are
// the initial ones; above it they are those transformers' dynamic update computes for a batch whose
// largest position is seq_len - 1 (in float32, as that update does). Transformers keeps the
// frequencies of the longest sequence seen until a sequence shorter than the original maximum
// comes; that caching policy belongs to the caller.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim,
                                 int64_t max_position_embeddings, int64_t seq_len);

// The factor transformers multiplies cos and sin by (so attention logits scale by its square):
// for yarn the explicit attention_factor, else get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are set and non-zero, else 0.1 * ln(factor) + 1
// (1 when factor <= 1); 1.0 for every other type.
double rope_attention_scaling(const RopeConfig& rope);

}  // namespace ls
