#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "kernels/cpu/dot_tile.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

// ---- large M: OpenBLAS ----

// OpenBLAS's thread count is process-wide; set it only when it changes.
void set_blas_threads(int threads) {
  static std::mutex mu;
  static int current = -1;
  std::lock_guard<std::mutex> lock(mu);
  if (current != threads) {
    openblas_set_num_threads(threads);
    current = threads;
  }
}

// Per-thread f32 weight panel: [panel_rows, K] f32, reused across calls.
float* panel_scratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(static_cast<size_t>(floats));
  return scratch.data();
}

// y[:, n0:n1] = x · w[n0:n1, :]^T through sgemm, w already f32.
void sgemm_cols(const float* x, int64_t m, int64_t k, const float* w_rows, int64_t n0, int64_t n1,
                int64_t n, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
              static_cast<int>(n1 - n0), static_cast<int>(k), 1.0f, x, static_cast<int>(k), w_rows,
              static_cast<int>(k), 0.0f, y + n0, static_cast<int>(n));
}

void add_bias_cols(const float* bias, int64_t m, int64_t n0, int64_t n1, int64_t n, float* y) {
  if (!bias) return;
  for (int64_t r = 0; r < m; ++r) {
    float* yr = y + r * n;
    for (int64_t c = n0; c < n1; ++c) yr[c] += bias[c];
  }
}

void widen(DType dtype, const void* src, float* dst, int64_t n) {
  simd::dispatch_isa(best_isa(), [&]<class S>() { simd::widen_to_f32<S>(dtype, src, dst, n); });
}

int64_t default_panel_rows(int64_t k) {
  // ~4 MiB of f32 per panel: large enough that sgemm's per-call packing of x is amortised
  // (measured: 32-row panels cost 20% at M = 512), small enough to stay cache-friendly.
  return std::clamp<int64_t>((int64_t{4} << 20) / 4 / std::max<int64_t>(1, k), 64, 1024) &
         ~int64_t{15};
}

// Rows of x per lanes pass: its transpose ([k, 64] f32) stays in L2 while every weight block
// streams past it.
constexpr int64_t kLanesChunkRows = 64;
// Weight rows widened to f32 per block ([16, k] f32 per thread).
constexpr int64_t kLanesWeightRows = 16;

// y[r, c] (+ bias) for r < mc, c in [c0, c1): xt is [k, mp] (x^T, zero padded to mp rows).
template <class S, DType kW>
void lanes_columns(const float* xt, int64_t mp, int64_t mc, const void* w, int64_t k, int64_t c0,
                   int64_t c1, int64_t n, const float* bias, float* y) {
  thread_local std::vector<float> wf, out;  // [kLanesWeightRows, k], [kLanesWeightRows, mp]
  if (static_cast<int64_t>(out.size()) < kLanesWeightRows * mp)
    out.resize(static_cast<size_t>(kLanesWeightRows * mp));
  if constexpr (kW != DType::kF32) {
    if (static_cast<int64_t>(wf.size()) < kLanesWeightRows * k)
      wf.resize(static_cast<size_t>(kLanesWeightRows * k));
  }
  for (int64_t nb = c0; nb < c1; nb += kLanesWeightRows) {
    const int64_t nn = std::min(kLanesWeightRows, c1 - nb);
    const float* rows;
    if constexpr (kW == DType::kF32) {
      rows = static_cast<const float*>(w) + nb * k;
    } else {
      simd::widen_to_f32<S>(kW, static_cast<const char*>(w) + dtype_nbytes(kW, nb * k), wf.data(),
                            nn * k);
      rows = wf.data();
    }
    lanes_tile<S>(xt, mp, mp / S::kWidth, rows, k, nn, k, out.data(), mp);
    for (int64_t r = 0; r < mc; ++r) {
      float* yr = y + r * n + nb;
      for (int64_t j = 0; j < nn; ++j)
        yr[j] = out[static_cast<size_t>(j * mp + r)] + (bias ? bias[nb + j] : 0.0f);
    }
  }
}

}  // namespace

void matmul_lanes(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                  const float* bias, float* y, ThreadPool& pool, Isa isa) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    matmul_small_m(x, m, k, w, w_dtype, n, bias, y, pool, isa);
    return;
  }
  simd::dispatch_isa(isa, [&]<class S>() {
    simd::dispatch_float_dtype(w_dtype, [&]<DType kW>() {
      thread_local std::vector<float> xt_storage;  // [k, mp]: the caller's, shared with workers
      std::vector<float>& xt = xt_storage;
      for (int64_t m0 = 0; m0 < m; m0 += kLanesChunkRows) {
        const int64_t mc = std::min(kLanesChunkRows, m - m0);
        const int64_t mp = (mc + S::kWidth - 1) / S::kWidth * S::kWidth;
        xt.assign(static_cast<size_t>(k * mp), 0.0f);
        for (int64_t r = 0; r < mc; ++r) {
          const float* xr = x + (m0 + r) * k;
          for (int64_t e = 0; e < k; ++e) xt[static_cast<size_t>(e * mp + r)] = xr[e];
        }
        const float* xt_data = xt.data();
        const int64_t num_blocks = (n + kLanesWeightRows - 1) / kLanesWeightRows;
        pool.parallel_for(num_blocks, 1, [&](int64_t b0, int64_t b1) {
          lanes_columns<S, kW>(xt_data, mp, mc, w, k, b0 * kLanesWeightRows,
                               std::min(n, b1 * kLanesWeightRows), n, bias, y + m0 * n);
        });
      }
    });
  });
}

void matmul_small_m(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                    const float* bias, float* y, ThreadPool& pool, Isa isa) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) y[r * n + c] = bias ? bias[c] : 0.0f;
    }
    return;
  }
  // Parts of at least ~64 KiB of weights: enough to amortise waking a thread.
  const int64_t row_bytes = dtype_nbytes(w_dtype, k);
  const int64_t grain_blocks =
      std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, 4 * row_bytes));
  const int64_t num_blocks = (n + 3) / 4;
  simd::dispatch_isa(isa, [&]<class S>() {
    simd::dispatch_float_dtype(w_dtype, [&]<DType kW>() {
      pool.parallel_for(num_blocks, grain_blocks, [&](int64_t b0, int64_t b1) {
        const int64_t c0 = b0 * 4, c1 = std::min(n, b1 * 4);
        gemv_rows<S, kW>(x, m, k, w, c0, c1, y, n);
        add_bias_cols(bias, m, c0, c1, n, y);
      });
    });
  });
}

void matmul_blas(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                 const float* bias, float* y, ThreadPool& pool, BlasThreading threading,
                 int64_t panel_rows) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    matmul_small_m(x, m, k, w, w_dtype, n, bias, y, pool, best_isa());
    return;
  }
  if (panel_rows <= 0) panel_rows = default_panel_rows(k);
  const int64_t row_bytes = dtype_nbytes(w_dtype, k);
  const auto* wb = static_cast<const char*>(w);
  const bool is_f32 = w_dtype == DType::kF32;

  if (threading == BlasThreading::kPoolSplit) {
    set_blas_threads(1);
    // Column slices in multiples of 16 so every sgemm sees whole register tiles.
    const int64_t num_units = (n + 15) / 16;
    pool.parallel_for(num_units, 1, [&](int64_t u0, int64_t u1) {
      const int64_t c0 = u0 * 16, c1 = std::min(n, u1 * 16);
      if (is_f32) {
        sgemm_cols(x, m, k, static_cast<const float*>(w) + c0 * k, c0, c1, n, y);
      } else {
        float* panel = panel_scratch(panel_rows * k);
        for (int64_t p0 = c0; p0 < c1; p0 += panel_rows) {
          const int64_t p1 = std::min(c1, p0 + panel_rows);
          widen(w_dtype, wb + p0 * row_bytes, panel, (p1 - p0) * k);
          sgemm_cols(x, m, k, panel, p0, p1, n, y);
        }
      }
      add_bias_cols(bias, m, c0, c1, n, y);
    });
    return;
  }

  set_blas_threads(pool.num_threads());
  if (is_f32) {
    sgemm_cols(x, m, k, static_cast<const float*>(w), 0, n, n, y);
  } else {
    float* panel = panel_scratch(panel_rows * k);
    for (int64_t p0 = 0; p0 < n; p0 += panel_rows) {
      const int64_t p1 = std::min(n, p0 + panel_rows);
      pool.parallel_for((p1 - p0) * k, 1 << 16, [&](int64_t e0, int64_t e1) {
        widen(w_dtype, wb + dtype_nbytes(w_dtype, p0 * k + e0), panel + e0, e1 - e0);
      });
      sgemm_cols(x, m, k, panel, p0, p1, n, y);
    }
  }
  add_bias_cols(bias, m, 0, n, n, y);
}

void matmul(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool) {
  if (m <= kSmallMMaxRows) {
    matmul_small_m(x, m, k, w, w_dtype, n, bias, y, pool, best_isa());
  } else if (m <= kLanesMaxRows) {
    matmul_lanes(x, m, k, w, w_dtype, n, bias, y, pool, best_isa());
  } else {
    matmul_blas(x, m, k, w, w_dtype, n, bias, y, pool);
  }
}

}  // namespace ls::kernels::cpu
