#include "kernels/cpu/silu_mul.h"

#include <cmath>

#include "kernels/cpu/elementwise_grain.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

// silu(g) * u with silu(g) = g / (1 + exp(-g)), torch's formula.
template <class S>
void silu_mul_row(const float* gate, const float* up, int64_t n, float* out) {
  constexpr int64_t kW = S::kWidth;
  const auto one = S::set1(1.0f);
  const auto zero = S::zero();
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    const auto g = S::load(gate + i);
    const auto silu = S::div(g, S::add(one, S::exp(S::sub(zero, g))));
    S::store(out + i, S::mul(silu, S::load(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace

void silu_mul(const float* gate_up, int64_t tokens, int64_t inter, float* out, ThreadPool& pool,
              Isa isa) {
  if (tokens <= 0 || inter <= 0) return;
  simd::dispatch_isa(isa, [&]<class S>() {
    if (tokens == 1) {  // decode: split the row itself
      pool.parallel_for(inter, kMinFloatsPerPart, [&](int64_t begin, int64_t end) {
        silu_mul_row<S>(gate_up + begin, gate_up + inter + begin, end - begin, out + begin);
      });
      return;
    }
    pool.parallel_for(tokens, rows_grain(inter), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* row = gate_up + t * 2 * inter;
        silu_mul_row<S>(row, row + inter, inter, out + t * inter);
      }
    });
  });
}

void silu_mul(const float* gate_up, int64_t tokens, int64_t inter, float* out, ThreadPool& pool) {
  silu_mul(gate_up, tokens, inter, out, pool, best_isa());
}

}  // namespace ls::kernels::cpu
