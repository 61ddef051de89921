#include "kernels/cpu/add.h"

#include "kernels/cpu/elementwise_grain.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

template <class S>
void add_range(float* x, const float* y, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + S::kWidth <= end; i += S::kWidth)
    S::store(x + i, S::add(S::load(x + i), S::load(y + i)));
  for (; i < end; ++i) x[i] += y[i];
}

}  // namespace

void add_inplace(float* x, const float* y, int64_t n, ThreadPool& pool, Isa isa) {
  simd::dispatch_isa(isa, [&]<class S>() {
    pool.parallel_for(n, kMinFloatsPerPart,
                      [&](int64_t begin, int64_t end) { add_range<S>(x, y, begin, end); });
  });
}

void add_inplace(float* x, const float* y, int64_t n, ThreadPool& pool) {
  add_inplace(x, y, n, pool, best_isa());
}

}  // namespace ls::kernels::cpu
