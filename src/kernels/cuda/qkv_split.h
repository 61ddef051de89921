#pragma once
// The step after the fused QKV projection: split its rows into q, k and v, apply the per-head
// RMSNorm of Qwen3 (when given) and RoPE to q and k, in one launch (instead of a copy, two norms
// and two ropes). Rounds to the dtype after the norm and after the rotation, as the separate
// rmsnorm and rope ops do, so results are bit-identical to that sequence.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ls::kernels::cuda {

struct QkvSplitParams {
  const void* qkv = nullptr;  // [tokens, (q_heads + 2 * kv_heads) * head_dim]: q, k, v heads
  void* q = nullptr;          // [tokens, q_heads, head_dim]
  void* k = nullptr;          // [tokens, kv_heads, head_dim]
  void* v = nullptr;          // [tokens, kv_heads, head_dim]
  const float* q_norm = nullptr;  // [head_dim] f32, or null (no per-head norm)
  const float* k_norm = nullptr;  // [head_dim] f32; null exactly when q_norm is
  float eps = 1e-6f;
  const float* cos = nullptr;  // [tokens, rotary_dim / 2] f32
  const float* sin = nullptr;  // [tokens, rotary_dim / 2] f32
  int64_t tokens = 0;
  int32_t q_heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;    // at most 512
  int32_t rotary_dim = 0;  // even, 2..head_dim
  DType dtype = DType::kBF16;
};

Status qkv_split_rope(const QkvSplitParams& p, cudaStream_t stream);

}  // namespace ls::kernels::cuda
