#pragma once
// out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w[:], in fp32 as transformers does.
// Used for the layer norms ([tokens, hidden]) and Qwen3's per-head q/k norms ([tokens*heads,
// head_dim]). out may alias x.

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             ThreadPool& pool);
void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             ThreadPool& pool, Isa isa);

// x += residual, then out = rmsnorm(x) * w, in one pass over each row (the pre-norm block's
// "add the sublayer output, normalise for the next one"); x is updated in place.
void add_rmsnorm(float* x, const float* residual, const float* w, float eps, int64_t rows,
                 int64_t dim, float* out, ThreadPool& pool);
void add_rmsnorm(float* x, const float* residual, const float* w, float eps, int64_t rows,
                 int64_t dim, float* out, ThreadPool& pool, Isa isa);

}  // namespace ls::kernels::cpu
