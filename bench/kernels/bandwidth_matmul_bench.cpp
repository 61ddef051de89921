// Memory read bandwidth of one process, the small-M (decode) matmul against it, the OpenBLAS
// prefill path in its two threading modes, and the crossover between the two paths.

#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>

#include "bench_util.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/simd.h"

namespace ls::bench {
namespace {

using kernels::cpu::BlasThreading;

// Sums a 512 MiB buffer with every pool thread (or one): the read bandwidth decode can hope for.
void BM_ReadBandwidth(benchmark::State& state) {
  // Arg: 0 one thread, 1 all threads (4 KiB pages, as bench_generation's floor measures),
  // 2 all threads over huge pages, 3 the same with software prefetch 8 KiB ahead.
  const bool all_threads = state.range(0) != 0;
  const bool huge = state.range(0) >= 2;
  const bool prefetch = state.range(0) == 3;
  const int64_t n = int64_t{512} << 20 >> 2;  // floats
  static std::vector<float> small_pages;
  static std::unique_ptr<HugeBuffer> huge_pages;
  if (small_pages.empty()) {
    small_pages.resize(static_cast<size_t>(n));
    fill_random(small_pages.data(), DType::kF32, n, 7);
    huge_pages = std::make_unique<HugeBuffer>(n * 4);
    fill_random(huge_pages->data(), DType::kF32, n, 7);
  }
  const float* buf = huge ? reinterpret_cast<const float*>(huge_pages->data()) : small_pages.data();
  ThreadPool one(1);
  ThreadPool& pool = all_threads ? bench_pool() : one;
  std::atomic<float> sink{0};
  for (auto _ : state) {
    pool.parallel_for(n / 4096, 1, [&](int64_t b0, int64_t b1) {
#if defined(LS_KERNELS_HAVE_AVX512)
      using S = kernels::cpu::simd::Avx512;
#else
      using S = kernels::cpu::simd::Scalar;
#endif
      auto a0 = S::zero(), a1 = S::zero(), a2 = S::zero(), a3 = S::zero();
      const int64_t end = b1 * 4096;
      for (int64_t i = b0 * 4096; i < end; i += 64) {
        if (prefetch && i + 2048 < end) {
          kernels::cpu::simd::prefetch_l2(&buf[(i + 2048)], 256);
        }
        a0 = S::add(a0, S::load(&buf[(i)]));
        a1 = S::add(a1, S::load(&buf[(i + 16)]));
        a2 = S::add(a2, S::load(&buf[(i + 32)]));
        a3 = S::add(a3, S::load(&buf[(i + 48)]));
      }
      sink.store(S::reduce_add(S::add(S::add(a0, a1), S::add(a2, a3))), std::memory_order_relaxed);
    });
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
  state.counters["threads"] = pool.num_threads();
}
BENCHMARK(BM_ReadBandwidth)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->UseRealTime()->Unit(benchmark::kMillisecond);

// y[M, N] = x · w^T through the small-M kernel, w of 64-128 MiB (well past the 32 MiB L3);
// bytes processed = weight bytes, so GB/s compares directly with BM_ReadBandwidth.
void BM_MatmulSmallM(benchmark::State& state) {
  const int64_t m = state.range(0);
  const auto dt = static_cast<DType>(state.range(1));
  const int64_t k = 4096, n = dt == DType::kF32 ? 8192 : 16384;
  std::vector<uint8_t> w(static_cast<size_t>(dtype_nbytes(dt, n * k)));
  fill_random(w.data(), dt, n * k, 1);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    kernels::cpu::matmul_small_m(x.data(), m, k, w.data(), dt, n, nullptr, y.data(), bench_pool(),
                                 kernels::cpu::best_isa());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  state.counters["GFLOPS"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * m * n * k * 1e-9,
                         benchmark::Counter::kIsRate);
}
// The GEMV shapes of one bench30m decode token (8 layers of hidden 512: q 512, k 128, v 128,
// o 512, gate_up 2816, down 512 x 1408; then the 8192-row LM head), N x K.
struct GemvShape {
  int64_t n, k;
};
std::vector<GemvShape> decode_chain_shapes() {
  std::vector<GemvShape> shapes;
  for (int layer = 0; layer < 8; ++layer) {
    for (GemvShape sh : {GemvShape{512, 512}, GemvShape{128, 512}, GemvShape{128, 512},
                         GemvShape{512, 512}, GemvShape{2816, 512}, GemvShape{512, 1408}}) {
      shapes.push_back(sh);
    }
  }
  shapes.push_back({8192, 512});
  return shapes;
}

// bf16 matrices of the given shapes laid out one after another (64-byte aligned) in one
// huge-page mapping, as the CPU backend holds weights; offsets[i] is matrix i's byte offset.
struct GemvArena {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  std::unique_ptr<HugeBuffer> buf;
  explicit GemvArena(const std::vector<GemvShape>& shapes) {
    for (const GemvShape& sh : shapes) {
      offsets.push_back(bytes);
      bytes += (dtype_nbytes(DType::kBF16, sh.n * sh.k) + 63) / 64 * 64;
    }
    buf = std::make_unique<HugeBuffer>(bytes);
    for (size_t i = 0; i < shapes.size(); ++i) {
      fill_random(buf->data() + offsets[i], DType::kBF16, shapes[i].n * shapes[i].k,
                  static_cast<uint64_t>(i) + 1);
    }
  }
  const void* matrix(size_t i) { return buf->data() + offsets[i]; }
};

// One decode token's GEMVs of bench30m, bf16, M = 1: many small matrices, 51 MiB in all, read
// once each (past the 32 MiB L3, so from memory every pass). GB/s compares with
// BM_ReadBandwidth: the decode-floor question for a small model, where per-call costs are not
// amortised over a big matrix.
void BM_MatmulDecodeChain(benchmark::State& state) {
  // Arg: copies of the chain cycled through; 1 is the model (51 MiB, some of it may still be
  // in the 32 MiB L3 on the next pass), 3 rules the L3 out.
  const int64_t copies = state.range(0);
  std::vector<GemvShape> shapes;
  for (int64_t c = 0; c < copies; ++c) {
    for (GemvShape sh : decode_chain_shapes()) shapes.push_back(sh);
  }
  GemvArena arena(shapes);
  std::vector<float> x(8192, 0.5f), y(8192);
  for (auto _ : state) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      kernels::cpu::matmul_small_m(x.data(), 1, shapes[i].k, arena.matrix(i), DType::kBF16,
                                   shapes[i].n, nullptr, y.data(), bench_pool(),
                                   kernels::cpu::best_isa());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * arena.bytes);
  state.counters["ms_per_token"] = benchmark::Counter(
      static_cast<double>(state.iterations() * copies) * 1e-3,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MatmulDecodeChain)->Arg(1)->Arg(3)->UseRealTime()->Unit(benchmark::kMillisecond);

// One GEMV shape of the chain (args N, K), M = 1, bf16, over enough copies (>= 96 MiB) that
// every call reads its matrix from memory: which shapes fall short of the bandwidth.
void BM_MatmulDecodeShape(benchmark::State& state) {
  const GemvShape sh{state.range(0), state.range(1)};
  const int64_t copies = std::max<int64_t>(
      2, (int64_t{96} << 20) / dtype_nbytes(DType::kBF16, sh.n * sh.k));
  GemvArena arena(std::vector<GemvShape>(static_cast<size_t>(copies), sh));
  std::vector<float> x(static_cast<size_t>(sh.k), 0.5f), y(static_cast<size_t>(sh.n));
  for (auto _ : state) {
    for (int64_t i = 0; i < copies; ++i) {
      kernels::cpu::matmul_small_m(x.data(), 1, sh.k, arena.matrix(static_cast<size_t>(i)),
                                   DType::kBF16, sh.n, nullptr, y.data(), bench_pool(),
                                   kernels::cpu::best_isa());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * arena.bytes);
  state.counters["us_per_call"] = benchmark::Counter(
      static_cast<double>(state.iterations() * copies) * 1e-6,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MatmulDecodeShape)
    ->Args({128, 512})
    ->Args({512, 512})
    ->Args({2816, 512})
    ->Args({512, 1408})
    ->Args({8192, 512})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// An empty parallel region over all pool threads: the fixed cost of one hand-off (a decode
// token issues one per GEMV and per split op).
void BM_PoolRegion(benchmark::State& state) {
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    bench_pool().parallel_for(bench_pool().num_threads(), 1, [&](int64_t b, int64_t) {
      sink.fetch_add(b, std::memory_order_relaxed);
    });
  }
  state.counters["threads"] = bench_pool().num_threads();
}
BENCHMARK(BM_PoolRegion)->UseRealTime()->Unit(benchmark::kMicrosecond);


BENCHMARK(BM_MatmulSmallM)
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {static_cast<int64_t>(DType::kBF16)}})
    ->ArgsProduct({{1, 8}, {static_cast<int64_t>(DType::kF32), static_cast<int64_t>(DType::kF16)}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The OpenBLAS path: M x 2048 x 5632 (a Llama-shaped MLP slab), bf16 or f32 weights.
// Args: M, dtype, threading (0 pool split, 1 OpenBLAS threads), panel rows (0 = default).
void BM_MatmulBlas(benchmark::State& state) {
  const int64_t m = state.range(0);
  const auto dt = static_cast<DType>(state.range(1));
  const auto threading =
      state.range(2) == 0 ? BlasThreading::kPoolSplit : BlasThreading::kBlasThreads;
  const int64_t panel = state.range(3);
  const int64_t k = 2048, n = 5632;
  std::vector<uint8_t> w(static_cast<size_t>(dtype_nbytes(dt, n * k)));
  fill_random(w.data(), dt, n * k, 1);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    kernels::cpu::matmul_blas(x.data(), m, k, w.data(), dt, n, nullptr, y.data(), bench_pool(),
                              threading, panel);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * m * n * k * 1e-9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatmulBlas)
    ->ArgsProduct({{16, 64, 512}, {static_cast<int64_t>(DType::kBF16)}, {0, 1}, {0}})
    ->ArgsProduct({{16, 64, 512}, {static_cast<int64_t>(DType::kBF16)}, {0}, {32, 128, 512, 2816}})
    ->ArgsProduct({{512}, {static_cast<int64_t>(DType::kF32)}, {0, 1}, {0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Crossover between the three paths at one shape.
// Args: M, path (0 small-M dot kernel, 1 BLAS, 2 lanes kernel), weight dtype, K, N.
void BM_MatmulCrossover(benchmark::State& state) {
  const int64_t m = state.range(0);
  const bool blas = state.range(1) == 1;
  const auto dt = static_cast<DType>(state.range(2));
  const int64_t k = state.range(3), n = state.range(4);
  std::vector<uint8_t> w(static_cast<size_t>(dtype_nbytes(dt, n * k)));
  fill_random(w.data(), dt, n * k, 1);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    if (state.range(1) == 2) {
      kernels::cpu::matmul_lanes(x.data(), m, k, w.data(), dt, n, nullptr, y.data(), bench_pool(),
                                 kernels::cpu::best_isa());
    } else if (blas) {
      kernels::cpu::matmul_blas(x.data(), m, k, w.data(), dt, n, nullptr, y.data(), bench_pool());
    } else {
      kernels::cpu::matmul_small_m(x.data(), m, k, w.data(), dt, n, nullptr, y.data(), bench_pool(),
                                   kernels::cpu::best_isa());
    }
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_MatmulCrossover)
    ->ArgsProduct({{4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512},
                   {0, 1, 2},
                   {static_cast<int64_t>(DType::kBF16), static_cast<int64_t>(DType::kF32)},
                   {2048},
                   {5632}})
    ->ArgsProduct({{64, 512, 1024}, {1, 2}, {static_cast<int64_t>(DType::kBF16)}, {8192}, {2048}})
    ->ArgsProduct({{2048},
                   {1, 2},
                   {static_cast<int64_t>(DType::kBF16), static_cast<int64_t>(DType::kF32)},
                   {2048},
                   {2048}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// A prefill layer's rhythm: GEMM, then a short pool region (a norm), repeated. Shows whether
// OpenBLAS's own threads and the pool's spinning workers get in each other's way.
void BM_BlasThenPoolRegions(benchmark::State& state) {
  const auto threading =
      state.range(0) == 0 ? BlasThreading::kPoolSplit : BlasThreading::kBlasThreads;
  const int64_t m = 256, k = 1024, n = 1024;
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(m * k), 0.5f),
      y(static_cast<size_t>(m * n));
  std::vector<float> gamma(static_cast<size_t>(n), 1.0f);
  fill_random(w.data(), DType::kF32, n * k, 1);
  for (auto _ : state) {
    for (int rep = 0; rep < 8; ++rep) {
      kernels::cpu::matmul_blas(x.data(), m, k, w.data(), DType::kF32, n, nullptr, y.data(),
                                bench_pool(), threading);
      kernels::cpu::rmsnorm(y.data(), gamma.data(), 1e-6f, m, n, x.data(), bench_pool());
    }
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 8 * 2.0 * m * n * k * 1e-9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BlasThenPoolRegions)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ls::bench
