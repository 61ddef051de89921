#pragma once
// Rotary embedding, NeoX / Hugging Face pairing: dimension i pairs with i + rotary_dim/2.
// x: [tokens, heads, head_dim] f32, rotated in place on its first rotary_dim dimensions.
// cos, sin: [tokens, rotary_dim/2] f32, already scaled by the rope's attention factor.

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const float* cos, const float* sin, ThreadPool& pool);
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const float* cos, const float* sin, ThreadPool& pool, Isa isa);

}  // namespace ls::kernels::cpu
