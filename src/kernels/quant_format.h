#pragma once
// The ggml block types whose blocks the CPU matmul reads directly, and a linear weight kept in
// them: plain data shared by the backend interface (LinearWeight) and the CPU kernels.

#include <cstdint>
#include <vector>

namespace ls::kernels {

enum class QuantType { kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ5_K, kQ6_K };

// Elements (32 or 256) and bytes per block.
constexpr int64_t quant_block_elems(QuantType type) {
  return type == QuantType::kQ8_0 || type == QuantType::kQ4_0 || type == QuantType::kQ4_1 ? 32
                                                                                           : 256;
}
constexpr int64_t quant_block_bytes(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:
      return 34;
    case QuantType::kQ4_0:
      return 18;
    case QuantType::kQ4_1:
      return 20;
    case QuantType::kQ4_K:
      return 144;
    case QuantType::kQ5_K:
      return 176;
    case QuantType::kQ6_K:
      return 210;
  }
  return 0;
}

// Consecutive output rows of one block type: [rows, cols / block elems] blocks, row-major, any
// alignment. A fused matrix (q, k, v rows) may mix types (llama.cpp's Q4_K_M stores v in Q6_K).
struct QuantPart {
  QuantType type = QuantType::kQ8_0;
  const void* blocks = nullptr;
  int64_t rows = 0;
};

// A [rows, cols] weight as parts, top to bottom; rows = the parts' sum.
struct QuantMatrix {
  std::vector<QuantPart> parts;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t bytes() const {
    int64_t b = 0;
    for (const QuantPart& p : parts) {
      b += p.rows * (cols / quant_block_elems(p.type)) * quant_block_bytes(p.type);
    }
    return b;
  }
};

}  // namespace ls::kernels
