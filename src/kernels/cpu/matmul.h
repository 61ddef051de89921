#pragma once
// y[M, N] = x[M, K] · w[N, K]^T (+ bias[N]); x, y, bias f32; w f32, bf16 or f16 (converted to f32
// exactly on the fly, so bf16/f16 checkpoints keep their size in memory). fp32 accumulation.
// Small M (decode) goes through a bandwidth-bound kernel that reads each weight once, split
// across the pool; prefill-sized M through a register-blocked kernel with rows in lanes; very
// large M through OpenBLAS sgemm.

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::cpu {

void matmul(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool);

// matmul() picks the path by M, from measurements on this machine (bench/kernels,
// BM_MatmulCrossover, one core, bf16 and f32 weights, K x N = 2048 x 5632, 8192 x 2048,
// 2048 x 2048):
//  - M <= kSmallMMaxRows: matmul_small_m (decode; reads each weight once);
//  - M <= kLanesMaxRows: matmul_lanes (~90-100 GFLOPS per core from M ~ 24; OpenBLAS with
//    per-call f32 weight panels was slower at every such M: 26 GFLOPS at M = 16, 75-85 at
//    M = 512);
//  - larger M: matmul_blas (even with the lanes kernel at M = 2048).
inline constexpr int64_t kSmallMMaxRows = 16;
inline constexpr int64_t kLanesMaxRows = 1024;

// The decode path on its own (correct for any M, fastest for small M): output rows (weight
// rows) are split over the pool; each weight element is read from memory once and widened in
// registers.
void matmul_small_m(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                    const float* bias, float* y, ThreadPool& pool, Isa isa);

// The prefill-sized path without OpenBLAS (correct for any M, meant for M >= 16): x is
// transposed 64 rows at a time so rows sit in vector lanes, weight rows are widened to f32 in
// blocks of 16 per thread and broadcast, so every FMA is useful and no horizontal sums are
// needed; output columns are split over the pool.
void matmul_lanes(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
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
