#pragma once
// x[i] += y[i] for n elements (residual connections).

#include <cstdint>

#include "core/thread_pool.h"

namespace ls::kernels::cpu {

void add_inplace(float* x, const float* y, int64_t n, ThreadPool& pool);

}  // namespace ls::kernels::cpu
