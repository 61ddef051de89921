#include "kernels/cpu/rmsnorm.h"

#include <cmath>

#include "kernels/cpu/elementwise_grain.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

// Sum of squares in fp32 with four independent accumulators (the order differs from torch's,
// within fp32 rounding).
template <class S>
float sum_squares(const float* x, int64_t dim) {
  using V = typename S::V;
  constexpr int64_t kW = S::kWidth;
  V a0 = S::zero(), a1 = S::zero(), a2 = S::zero(), a3 = S::zero();
  int64_t i = 0;
  for (; i + 4 * kW <= dim; i += 4 * kW) {
    const V x0 = S::load(x + i), x1 = S::load(x + i + kW);
    const V x2 = S::load(x + i + 2 * kW), x3 = S::load(x + i + 3 * kW);
    a0 = S::fma(x0, x0, a0);
    a1 = S::fma(x1, x1, a1);
    a2 = S::fma(x2, x2, a2);
    a3 = S::fma(x3, x3, a3);
  }
  for (; i + kW <= dim; i += kW) {
    const V x0 = S::load(x + i);
    a0 = S::fma(x0, x0, a0);
  }
  float ss = S::reduce_add(S::add(S::add(a0, a1), S::add(a2, a3)));
  for (; i < dim; ++i) ss += x[i] * x[i];
  return ss;
}

// out = w * (x * inv_rms), the operation order of transformers' LlamaRMSNorm.
template <class S>
void scale_row(const float* x, const float* w, float inv_rms, int64_t dim, float* out) {
  constexpr int64_t kW = S::kWidth;
  const typename S::V vinv = S::set1(inv_rms);
  int64_t i = 0;
  for (; i + kW <= dim; i += kW) {
    S::store(out + i, S::mul(S::load(w + i), S::mul(S::load(x + i), vinv)));
  }
  for (; i < dim; ++i) out[i] = w[i] * (x[i] * inv_rms);
}

float inv_rms(float sum_squares, int64_t dim, float eps) {
  return 1.0f / std::sqrt(sum_squares / static_cast<float>(dim) + eps);
}

}  // namespace

void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             ThreadPool& pool, Isa isa) {
  if (rows <= 0 || dim <= 0) return;
  simd::dispatch_isa(isa, [&]<class S>() {
    pool.parallel_for(rows, rows_grain(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * dim;
        scale_row<S>(xr, w, inv_rms(sum_squares<S>(xr, dim), dim, eps), dim, out + r * dim);
      }
    });
  });
}

void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             ThreadPool& pool) {
  rmsnorm(x, w, eps, rows, dim, out, pool, best_isa());
}

void add_rmsnorm(float* x, const float* residual, const float* w, float eps, int64_t rows,
                 int64_t dim, float* out, ThreadPool& pool, Isa isa) {
  if (rows <= 0 || dim <= 0) return;
  simd::dispatch_isa(isa, [&]<class S>() {
    constexpr int64_t kW = S::kWidth;
    pool.parallel_for(rows, rows_grain(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* xr = x + r * dim;
        const float* yr = residual + r * dim;
        int64_t i = 0;
        for (; i + kW <= dim; i += kW) S::store(xr + i, S::add(S::load(xr + i), S::load(yr + i)));
        for (; i < dim; ++i) xr[i] += yr[i];
        scale_row<S>(xr, w, inv_rms(sum_squares<S>(xr, dim), dim, eps), dim, out + r * dim);
      }
    });
  });
}

void add_rmsnorm(float* x, const float* residual, const float* w, float eps, int64_t rows,
                 int64_t dim, float* out, ThreadPool& pool) {
  add_rmsnorm(x, residual, w, eps, rows, dim, out, pool, best_isa());
}

}  // namespace ls::kernels::cpu
