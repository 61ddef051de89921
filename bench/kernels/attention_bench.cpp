// Decode attention against context (kCausal vs kSelected with a 4096-token budget), page
// selection time, and 16K prefill attention with causal vs streaming heads. One layer:
// 2 kv heads x group 4 (decode, select) or group 2 (prefill), head_dim 128, 64-token pages.

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/page_select.h"
#include "kernels/kv_quant.h"

namespace ls::bench {
namespace {

using kernels::AttentionParams;
using kernels::HeadMode;

constexpr int32_t kHeadDim = 128, kPageTokens = 64, kLogicalTokens = 16, kKvHeads = 2;
constexpr int32_t kBudgetTokens = 4096;

// Args: context tokens, mode (0 causal, 1 selected), kv dtype.
void BM_DecodeAttention(benchmark::State& state) {
  const auto context = static_cast<int32_t>(state.range(0));
  const bool selected = state.range(1) != 0;
  const auto dt = static_cast<DType>(state.range(2));
  const int32_t group = 4, q_heads = kKvHeads * group;
  PagedSequence seq(context, kKvHeads, kHeadDim, kPageTokens, kLogicalTokens, dt);
  std::vector<float> q(static_cast<size_t>(q_heads * kHeadDim)), out(q.size());
  fill_random(q.data(), DType::kF32, static_cast<int64_t>(q.size()), 9);
  const std::vector<int32_t> q_indptr = {0, 1}, kv_lens = {context}, slot = {0, 1};
  const int32_t mode = static_cast<int32_t>(selected ? HeadMode::kSelected : HeadMode::kCausal);
  const std::vector<int32_t> modes = {mode, mode};
  // A spread-out selection of budget - 1 pages plus the last (what page_select returns).
  const int32_t pages = seq.num_pages(), budget = kBudgetTokens / kPageTokens;
  std::vector<int32_t> sel_rows = {0}, sel, num_sel;
  for (int32_t h = 0; h < kKvHeads; ++h) {
    std::vector<int32_t> l;
    if (pages <= budget) {
      for (int32_t i = 0; i < pages; ++i) l.push_back(i);
    } else {
      for (int32_t i = 0; i < budget - 1; ++i)
        l.push_back(static_cast<int32_t>(int64_t{i} * (pages - 1) / (budget - 1)));
      l.push_back(pages - 1);
    }
    l.resize(static_cast<size_t>(budget), -1);
    sel.insert(sel.end(), l.begin(), l.end());
    num_sel.push_back(std::min(pages, budget));
  }
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.num_tokens = 1;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.num_seqs = 1;
  p.q_indptr = q_indptr.data();
  p.kv_lens = kv_lens.data();
  p.head_mode = modes.data();
  p.head_slot = slot.data();
  p.retrieval = seq.pool();
  p.retrieval_blocks = seq.blocks.data();
  p.retrieval_blocks_stride = pages;
  p.selected_rows = sel_rows.data();
  p.selected = sel.data();
  p.num_selected = num_sel.data();
  p.max_selected = budget;
  for (auto _ : state) {
    kernels::cpu::paged_attention(p, bench_pool());
    benchmark::DoNotOptimize(out.data());
  }
  const int64_t visited = selected ? std::min(context, kBudgetTokens) : context;
  state.SetBytesProcessed(state.iterations() * 2 * int64_t{kKvHeads} * visited *
                          dtype_nbytes(dt, kHeadDim));
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{4096, 16384, 32768, 65536, 131072},
                   {0, 1},
                   {static_cast<int64_t>(DType::kBF16)}})
    ->ArgsProduct({{32768}, {0}, {static_cast<int64_t>(DType::kF32)}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Dense attention of one layer per KV page format, the bench30m shape by default (2 kv heads x
// group 4, head_dim 64, 64-token pages): a decode step, or a prefill chunk of the context's last
// q_len tokens (causal, over pages already written). Args: context tokens, format (0 bf16 pages,
// 1 fp8, 2 int8, 3 int4: kernels/kv_quant.h, rows quantized from the same random values),
// head_dim, q_len (1: decode). Bytes processed: the K and V bytes of the context's pages.
void BM_DecodeAttentionKvFormat(benchmark::State& state) {
  using kernels::KvQuant;
  const auto context = static_cast<int32_t>(state.range(0));
  const auto quant = static_cast<KvQuant>(state.range(1));
  const auto head_dim = static_cast<int32_t>(state.range(2));
  const auto q_len = static_cast<int32_t>(state.range(3));
  const int32_t group = 4, q_heads = kKvHeads * group;
  const int32_t pages = (context + kPageTokens - 1) / kPageTokens;
  const int64_t head_pages = int64_t{pages} * kKvHeads;
  std::vector<uint8_t> k, v;
  const int64_t page_bytes = fill_kv_pages(quant, head_pages, kPageTokens, head_dim, k, v);
  std::vector<int32_t> blocks(static_cast<size_t>(pages));
  for (int32_t i = 0; i < pages; ++i) blocks[static_cast<size_t>(i)] = i;
  std::vector<float> q(static_cast<size_t>(int64_t{q_len} * q_heads * head_dim)), out(q.size());
  fill_random(q.data(), DType::kF32, static_cast<int64_t>(q.size()), 9);
  const std::vector<int32_t> q_indptr = {0, q_len}, kv_lens = {context}, slot = {0, 1};
  const std::vector<int32_t> modes = {static_cast<int32_t>(HeadMode::kCausal),
                                      static_cast<int32_t>(HeadMode::kCausal)};
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.num_tokens = q_len;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.num_seqs = 1;
  p.q_indptr = q_indptr.data();
  p.kv_lens = kv_lens.data();
  p.head_mode = modes.data();
  p.head_slot = slot.data();
  p.retrieval = kernels::PagedKvPool{k.data(), v.data(),   DType::kBF16, pages,
                                     kKvHeads, kPageTokens, head_dim};
  if (quant != KvQuant::kNone) {
    p.retrieval.dtype = DType::kU8;
    p.retrieval.quant = quant;
  }
  p.retrieval_blocks = blocks.data();
  p.retrieval_blocks_stride = pages;
  for (auto _ : state) {
    kernels::cpu::paged_attention(p, bench_pool());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * head_pages * page_bytes);
}
BENCHMARK(BM_DecodeAttentionKvFormat)
    ->ArgsProduct({{4096, 16384}, {0, 1, 2, 3}, {64}, {1}})
    ->ArgsProduct({{16384}, {0, 1, 2, 3}, {128}, {1}})
    ->ArgsProduct({{4096}, {0, 1, 2, 3}, {64}, {512}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// page_select for one decode step (2 kv heads x group 4, 16-token logical pages, budget 4096).
void BM_PageSelect(benchmark::State& state) {
  const auto context = static_cast<int32_t>(state.range(0));
  const auto dt = static_cast<DType>(state.range(1));
  const int32_t group = 4, q_heads = kKvHeads * group, budget = kBudgetTokens / kPageTokens;
  PagedSequence seq(context, kKvHeads, kHeadDim, kPageTokens, kLogicalTokens, dt);
  std::vector<float> q(static_cast<size_t>(q_heads * kHeadDim));
  fill_random(q.data(), DType::kF32, static_cast<int64_t>(q.size()), 9);
  const std::vector<int32_t> q_indptr = {0, 1}, kv_lens = {context}, slot = {0, 1}, out_rows = {0};
  const std::vector<int32_t> modes = {static_cast<int32_t>(HeadMode::kSelected),
                                      static_cast<int32_t>(HeadMode::kSelected)};
  std::vector<int32_t> sel(static_cast<size_t>(kKvHeads * budget)), num_sel(kKvHeads);
  kernels::PageSelectParams p;
  p.q = q.data();
  p.num_seqs = 1;
  p.q_indptr = q_indptr.data();
  p.num_q_heads = q_heads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.kv_lens = kv_lens.data();
  p.head_mode = modes.data();
  p.head_slot = slot.data();
  p.page_tokens = kPageTokens;
  p.retrieval_blocks = seq.blocks.data();
  p.retrieval_blocks_stride = seq.num_pages();
  p.heads_per_block = kKvHeads;
  p.summaries = seq.summaries();
  p.budget_pages = budget;
  p.out_rows = out_rows.data();
  p.selected = sel.data();
  p.num_selected = num_sel.data();
  p.max_selected = budget;
  for (auto _ : state) {
    kernels::cpu::page_select(p, bench_pool());
    benchmark::DoNotOptimize(sel.data());
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(seq.kmin.size() + seq.kmax.size()));
}
BENCHMARK(BM_PageSelect)
    ->ArgsProduct({{4096, 16384, 32768, 65536, 131072}, {static_cast<int64_t>(DType::kBF16)}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One prompt in one call. Args: streaming heads (0, 1 or 2 of the 2 kv heads), local window
// tokens (streaming heads; sink 128), prompt tokens (16K by default; 64K for the 64K column of
// bench/kernels/README.md's table).
void BM_PrefillAttention(benchmark::State& state) {
  const int32_t group = 2, q_heads = kKvHeads * group;
  const auto context = static_cast<int32_t>(state.range(2) > 0 ? state.range(2) : 16384);
  const auto num_streaming = static_cast<int32_t>(state.range(0));
  const auto local = static_cast<int32_t>(state.range(1));
  const DType dt = DType::kBF16;
  const int32_t sink_pages = 2, ring = (local + context - 1 + kPageTokens - 1) / kPageTokens + 1;
  PagedSequence retrieval(context, kKvHeads, kHeadDim, kPageTokens, kLogicalTokens, dt);
  PagedSequence streaming((sink_pages + ring) * kPageTokens, kKvHeads, kHeadDim, kPageTokens,
                          kLogicalTokens, dt);
  std::vector<float> q(static_cast<size_t>(int64_t{context} * q_heads * kHeadDim)), out(q.size());
  fill_random(q.data(), DType::kF32, static_cast<int64_t>(q.size()), 9);
  const std::vector<int32_t> q_indptr = {0, context}, kv_lens = {context}, slot = {0, 1};
  std::vector<int32_t> modes;
  for (int32_t h = 0; h < kKvHeads; ++h) {
    modes.push_back(
        static_cast<int32_t>(h < num_streaming ? HeadMode::kStreaming : HeadMode::kCausal));
  }
  const std::vector<int32_t> rings = {ring}, locals = {local};
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.num_tokens = context;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.num_seqs = 1;
  p.q_indptr = q_indptr.data();
  p.kv_lens = kv_lens.data();
  p.head_mode = modes.data();
  p.head_slot = slot.data();
  p.retrieval = retrieval.pool();
  p.retrieval_blocks = retrieval.blocks.data();
  p.retrieval_blocks_stride = retrieval.num_pages();
  p.streaming = streaming.pool();
  p.streaming_blocks = streaming.blocks.data();
  p.streaming_blocks_stride = streaming.num_pages();
  p.num_sink_pages = sink_pages;
  p.ring_pages = rings.data();
  p.sink_tokens = 128;
  p.local_tokens = locals.data();
  double flops = 0;  // 4 * head_dim per visible (query, key) pair per query head
  for (int32_t h = 0; h < kKvHeads; ++h) {
    for (int64_t t = 0; t < context; ++t) {
      const int64_t keys =
          h < num_streaming
              ? std::min<int64_t>(
                    t + 1, local + std::min<int64_t>(128, std::max<int64_t>(0, t + 1 - local)))
              : t + 1;
      flops += 4.0 * kHeadDim * group * keys;
    }
  }
  for (auto _ : state) {
    kernels::cpu::paged_attention(p, bench_pool());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * flops * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PrefillAttention)
    ->Args({0, 8192, 16384})
    ->Args({1, 8192, 16384})
    ->Args({2, 8192, 16384})
    ->Args({2, 1024, 16384})
    ->Args({0, 8192, 65536})
    ->Args({1, 8192, 65536})
    ->UseRealTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ls::bench
