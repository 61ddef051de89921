// The quantized-weight linear (kernels/cpu/quant_matmul.h) on the layer shapes of bench30m
// (hidden 512, intermediate 1408, vocab 8192) and SmolLM2-135M (576, 1536, 49152): decode (M = 1)
// and a prefill chunk (M = 512), over the pool. Bytes processed = weight bytes, so GB/s compares
// with BM_ReadBandwidth; the "ns_per_block" counter is the time per 32-weight block per thread,
// the figure that says whether a shape is compute- or bandwidth-bound.

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "kernels/cpu/quant_matmul.h"

namespace ls::bench {
namespace {

using kernels::QuantMatrix;
using kernels::QuantPart;
using kernels::QuantType;

// Random blocks with small f16 scales at every f16 field of the block type.
std::vector<uint8_t> random_quant_blocks(QuantType type, int64_t nblocks) {
  const int64_t bytes = kernels::quant_block_bytes(type);
  std::vector<uint8_t> out(static_cast<size_t>(nblocks * bytes));
  std::mt19937 rng(5);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::vector<int> f16_fields;
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
      f16_fields = {0};
      break;
    case QuantType::kQ6_K:
      f16_fields = {208};
      break;
    default:
      f16_fields = {0, 2};
  }
  const uint16_t h = f32_to_f16(0.01f);
  for (int64_t i = 0; i < nblocks; ++i) {
    for (int off : f16_fields) std::memcpy(out.data() + i * bytes + off, &h, 2);
  }
  return out;
}

// Args: type, rows, cols, m.
void BM_QuantLinear(benchmark::State& state) {
  const auto type = static_cast<QuantType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), m = state.range(3);
  const int64_t nblocks = rows * cols / kernels::quant_block_elems(type);
  const auto w = random_quant_blocks(type, nblocks);
  QuantMatrix qm;
  qm.parts.push_back(QuantPart{type, w.data(), rows});
  qm.rows = rows;
  qm.cols = cols;
  std::vector<float> x(static_cast<size_t>(m * cols)), y(static_cast<size_t>(m * rows));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : x) v = normal(rng);
  ThreadPool& pool = bench_pool();
  for (auto _ : state) {
    kernels::cpu::quant_linear(qm, x.data(), m, nullptr, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
  const double blocks32 = static_cast<double>(rows) * static_cast<double>(cols / 32) *
                          static_cast<double>(m) / pool.num_threads();
  state.counters["ns_per_block"] =
      benchmark::Counter(blocks32 * static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void quant_shapes(benchmark::internal::Benchmark* b) {
  const std::vector<std::vector<int64_t>> shapes = {// bench30m: fused qkv, gate_up, down, lm head
                                                    {768, 512},
                                                    {2816, 512},
                                                    {512, 1408},
                                                    {8192, 512},
                                                    // SmolLM2-135M: gate_up, lm head
                                                    {3072, 576},
                                                    {49152, 576}};
  for (int t : {0, 2, 3}) {  // Q8_0, Q4_1, Q4_K
    for (const auto& s : shapes) {
      const bool k_type = t == 3;
      if (k_type && s[1] % 256 != 0) continue;
      for (int64_t m : {1, 512}) {
        if (m == 512 && s[0] > 8192) continue;
        b->Args({t, s[0], s[1], m});
      }
    }
  }
}
BENCHMARK(BM_QuantLinear)->Apply(quant_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ls::bench
