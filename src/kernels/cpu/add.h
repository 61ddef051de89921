#pragma once
// x[i] += y[i] for n elements (residual connections).

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

void add_inplace(float* x, const float* y, int64_t n, ThreadPool& pool);
// Same, with an explicit instruction set (tests compare every variant).
void add_inplace(float* x, const float* y, int64_t n, ThreadPool& pool, Isa isa);

}  // namespace ls::kernels::cpu
