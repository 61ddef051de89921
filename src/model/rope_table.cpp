#include "model/rope_table.h"

#include <cmath>

namespace ls {

RopeTable::RopeTable(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings)
    : rope_(rope),
      head_dim_(head_dim),
      max_position_embeddings_(max_position_embeddings),
      inv_freq_(rope_inv_freq(rope, head_dim, max_position_embeddings, max_position_embeddings)),
      attention_scaling_(static_cast<float>(rope_attention_scaling(rope))) {}

void RopeTable::fill(std::span<const int32_t> positions, std::span<const int32_t> seq_lens,
                     float* cos, float* sin) const {
  const size_t half = inv_freq_.size();
  std::vector<float> dynamic_freq;
  int32_t dynamic_len = -1;
  for (size_t t = 0; t < positions.size(); ++t) {
    const float* freq = inv_freq_.data();
    if (rope_.type == RopeType::kDynamic && seq_lens[t] > max_position_embeddings_) {
      if (seq_lens[t] != dynamic_len) {
        dynamic_len = seq_lens[t];
        dynamic_freq = rope_inv_freq(rope_, head_dim_, max_position_embeddings_, dynamic_len);
      }
      freq = dynamic_freq.data();
    }
    const auto pos = static_cast<float>(positions[t]);
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * freq[i];  // f32 product, as torch computes it
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling_;
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling_;
    }
  }
}

}  // namespace ls
