#pragma once
// Which kv heads become streaming heads. DuoAttention's full_attention_heads.tsv has one row per
// layer and one column per kv head, each value the head's learned gate (how much it needs full
// attention). We choose streaming heads by one global quantile: the round(ratio * N) heads with
// the lowest gates, ties broken by (layer, head) order so the choice is deterministic.

#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/status.h"

namespace ls {

struct HeadGates {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  std::vector<double> gates;  // [num_layers * num_kv_heads], clipped to [0, 1]
};

// Parses a full_attention_heads.tsv; its shape must match the model's.
Result<HeadGates> load_head_gates(const std::filesystem::path& path, int32_t num_layers,
                                  int32_t num_kv_heads);
Result<HeadGates> parse_head_gates(std::string_view text, std::string_view source,
                                   int32_t num_layers, int32_t num_kv_heads);

// streaming[l * H + h] = true for the round(ratio * L * H) lowest gates.
std::vector<bool> choose_streaming_heads(const HeadGates& gates, double streaming_ratio);

// Without a pattern: every layer makes its last round(ratio * H) kv heads streaming heads (an
// even split across layers; calibrate a pattern with `longserve calibrate` for real models).
std::vector<bool> default_streaming_heads(int32_t num_layers, int32_t num_kv_heads,
                                          double streaming_ratio);

// Writes gates in DuoAttention's format (tab-separated, one row per layer).
Status write_head_gates(const std::filesystem::path& path, const HeadGates& gates);

}  // namespace ls
