#pragma once
// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]; gate_up: [tokens, 2*inter] f32
// (gate columns first, then up), out: [tokens, inter] f32.

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

void silu_mul(const float* gate_up, int64_t tokens, int64_t inter, float* out, ThreadPool& pool);
void silu_mul(const float* gate_up, int64_t tokens, int64_t inter, float* out, ThreadPool& pool,
              Isa isa);

}  // namespace ls::kernels::cpu
