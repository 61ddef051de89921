#pragma once
// y[M, N] = x[M, K] · w[N, K]^T (+ bias[N]); x, y, bias f32; w f32, bf16 or f16 (converted to f32
// exactly on the fly, so bf16/f16 checkpoints keep their size in memory). fp32 accumulation.
// Large M goes through OpenBLAS sgemm; small M (decode) through a bandwidth-bound kernel that
// reads each weight once, split across the pool.

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

void matmul(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool);

// matmul() sends M <= this to matmul_small_m and larger M to matmul_blas. Measured on this
// machine (bench/kernels, BM_MatmulCrossover, 2048 x 5632): with bf16/f16 weights the BLAS path
// pays a per-call f32 conversion of the weights and OpenBLAS is slow at small M (~26 GFLOPS
// per core at M = 16), so the register-blocked kernel wins up to M ~ 100-200; with f32 weights
// the crossover is near M = 32.
inline int64_t matmul_small_m_max_rows(DType w_dtype) {
  return w_dtype == DType::kF32 ? 32 : 96;
}

// The decode path on its own (correct for any M, fastest for small M): output rows (weight
// rows) are split over the pool; each weight element is read from memory once and widened in
// registers.
void matmul_small_m(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                    const float* bias, float* y, ThreadPool& pool, Isa isa);

// How the OpenBLAS path uses the cores (both exist so the benchmark can compare them).
enum class BlasThreading {
  // OpenBLAS single-threaded; each pool thread runs sgemm on its own slice of output columns
  // (converting its bf16/f16 weight panels itself). No second set of threads competes with
  // the pool's spinning workers. The default.
  kPoolSplit,
  // OpenBLAS with the pool's thread count, called from the caller; the pool only converts
  // weight panels.
  kBlasThreads,
};

// The prefill path on its own: sgemm over f32 weight panels (bf16/f16 panels are converted
// into a per-thread f32 scratch of `panel_rows` x K first).
void matmul_blas(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                 const float* bias, float* y, ThreadPool& pool,
                 BlasThreading threading = BlasThreading::kPoolSplit, int64_t panel_rows = 0);

}  // namespace ls::kernels::cpu
