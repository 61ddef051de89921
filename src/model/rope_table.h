#pragma once
// Per-token RoPE cos/sin, computed on the host once per step and shared by every layer.
// Matches transformers' float32 path: angle = float(position) * inv_freq in f32, cos/sin of that
// angle, times the rope's attention scaling (yarn). Dynamic NTK scaling recomputes inv_freq from
// each sequence's length, as transformers does per forward.

#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"

namespace ls {

class RopeTable {
 public:
  RopeTable(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings);

  int64_t rotary_dim() const { return static_cast<int64_t>(inv_freq_.size()) * 2; }
  // cos, sin: [positions.size(), rotary_dim / 2]. seq_lens[i]: the length of token i's sequence
  // after this step (only dynamic scaling reads it).
  void fill(std::span<const int32_t> positions, std::span<const int32_t> seq_lens, float* cos,
            float* sin) const;

 private:
  RopeConfig rope_;
  int64_t head_dim_;
  int64_t max_position_embeddings_;
  std::vector<float> inv_freq_;  // [rotary_dim / 2] for sequences within max_position_embeddings
  float attention_scaling_;
};

}  // namespace ls
