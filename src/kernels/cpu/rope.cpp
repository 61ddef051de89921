#include "kernels/cpu/rope.h"

#include "kernels/cpu/elementwise_grain.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

// x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin with separate roundings, as transformers'
// q * cos + rotate_half(q) * sin computes them.
template <class S>
void rotate_row(float* x, const float* cos, const float* sin, int64_t half) {
  constexpr int64_t kW = S::kWidth;
  int64_t i = 0;
  for (; i + kW <= half; i += kW) {
    const auto x1 = S::load(x + i), x2 = S::load(x + half + i);
    const auto c = S::load(cos + i), s = S::load(sin + i);
    S::store(x + i, S::sub(S::mul(x1, c), S::mul(x2, s)));
    S::store(x + half + i, S::add(S::mul(x2, c), S::mul(x1, s)));
  }
  for (; i < half; ++i) {
    const float x1 = x[i], x2 = x[half + i];
    x[i] = x1 * cos[i] - x2 * sin[i];
    x[half + i] = x2 * cos[i] + x1 * sin[i];
  }
}

}  // namespace

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const float* cos, const float* sin, ThreadPool& pool, Isa isa) {
  if (tokens <= 0 || heads <= 0 || rotary_dim < 2 || rotary_dim > head_dim) return;
  const int64_t half = rotary_dim / 2;
  simd::dispatch_isa(isa, [&]<class S>() {
    pool.parallel_for(tokens, rows_grain(heads * head_dim), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          rotate_row<S>(x + (t * heads + h) * head_dim, cos + t * half, sin + t * half, half);
        }
      }
    });
  });
}

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const float* cos, const float* sin, ThreadPool& pool) {
  rope(x, tokens, heads, head_dim, rotary_dim, cos, sin, pool, best_isa());
}

}  // namespace ls::kernels::cpu
