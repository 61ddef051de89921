#pragma once
// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w[:], in fp32 as transformers does.
// Used for the layer norms ([tokens, hidden]) and Qwen3's per-head q/k norms ([tokens*heads,
// head_dim]). out may alias x.

#include <cstdint>

#include "core/thread_pool.h"

namespace ls::kernels::cpu {

void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             ThreadPool& pool);

}  // namespace ls::kernels::cpu
