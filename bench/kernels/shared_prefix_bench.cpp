// Decode attention for a batch of B sequences sharing a P-token prefix (the same blocks in every
// block table, as prefix caching leaves them), each with 256 tokens of its own after it: the
// ordinary per-sequence kernel (mode 0, every sequence reads the prefix) against shared-prefix
// attention (mode 1, kernels/cpu/shared_prefix_attention: the group's queries stacked, the prefix
// read once per 64 rows, then merged with each suffix). The attention_bench decode shape: 2 kv
// heads x group 4, head_dim 128, bf16 pages of 64 tokens. Plan building is timed with the call
// (the engine builds one plan per step and reuses it across layers, so this overstates it).

#include <benchmark/benchmark.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "bench_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/shared_prefix_attention.h"
#include "kernels/shared_prefix.h"

namespace ls::bench {
namespace {

using kernels::HeadMode;

constexpr int32_t kHeadDim = 128, kPage = 64, kKvHeads = 2, kGroup = 4, kSuffix = 256;

// Args: batch, prefix tokens, mode (0 ordinary, 1 shared prefix).
void BM_SharedPrefixDecode(benchmark::State& state) {
  const auto batch = static_cast<int32_t>(state.range(0));
  const auto prefix = static_cast<int32_t>(state.range(1));
  const bool shared = state.range(2) != 0;
  const int32_t q_heads = kKvHeads * kGroup;
  const int32_t shared_pages = prefix / kPage;
  const int32_t kv_len = shared_pages * kPage + kSuffix;
  const int32_t pages = (kv_len + kPage - 1) / kPage, own = pages - shared_pages;
  const int64_t blocks = shared_pages + int64_t{batch} * own;
  const int64_t block_elems = int64_t{kKvHeads} * kPage * kHeadDim;
  std::vector<uint16_t> k(static_cast<size_t>(blocks * block_elems)), v(k.size());
  fill_random(k.data(), DType::kBF16, static_cast<int64_t>(k.size()), 1);
  fill_random(v.data(), DType::kBF16, static_cast<int64_t>(v.size()), 2);
  std::vector<int32_t> table(static_cast<size_t>(batch) * pages);
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t lp = 0; lp < pages; ++lp) {
      table[static_cast<size_t>(s) * pages + lp] =
          lp < shared_pages ? lp : shared_pages + s * own + (lp - shared_pages);
    }
  }
  std::vector<float> q(static_cast<size_t>(batch) * q_heads * kHeadDim), out(q.size());
  fill_random(q.data(), DType::kF32, static_cast<int64_t>(q.size()), 3);
  std::vector<int32_t> indptr(static_cast<size_t>(batch) + 1);
  std::iota(indptr.begin(), indptr.end(), 0);
  const std::vector<int32_t> lens(static_cast<size_t>(batch), kv_len);
  const std::vector<int32_t> modes(kKvHeads, static_cast<int32_t>(HeadMode::kCausal));
  const std::vector<int32_t> slots = {0, 1};
  kernels::AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.num_tokens = batch;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.num_seqs = batch;
  p.q_indptr = indptr.data();
  p.kv_lens = lens.data();
  p.head_mode = modes.data();
  p.head_slot = slots.data();
  p.retrieval.k = k.data();
  p.retrieval.v = v.data();
  p.retrieval.dtype = DType::kBF16;
  p.retrieval.num_blocks = static_cast<int32_t>(blocks);
  p.retrieval.heads_per_block = kKvHeads;
  p.retrieval.page_tokens = kPage;
  p.retrieval.head_dim = kHeadDim;
  p.retrieval_blocks = table.data();
  p.retrieval_blocks_stride = pages;
  kernels::SharedPrefixGroups groups;
  groups.seqs.resize(static_cast<size_t>(batch));
  std::iota(groups.seqs.begin(), groups.seqs.end(), 0);
  groups.group_indptr = {0, batch};
  groups.prefix_tokens = {shared_pages * kPage};
  kernels::SharedPrefixPlanConfig pc;
  pc.split_tokens = 4096;
  for (auto _ : state) {
    if (!shared) {
      kernels::cpu::paged_attention(p, bench_pool());
    } else {
      auto plan = kernels::plan_shared_prefix(batch, lens.data(), q_heads, kKvHeads, modes.data(),
                                              nullptr, table.data(), pages, kPage, groups, pc);
      if (!plan.ok()) {
        state.SkipWithError(plan.status().to_string().c_str());
        break;
      }
      kernels::SharedPrefixParams sp;
      sp.attn = p;
      sp.items = plan->items.data();
      sp.num_items = static_cast<int32_t>(plan->items.size());
      sp.item_seqs = plan->item_seqs.data();
      sp.num_parts = plan->num_parts.data();
      sp.max_parts = plan->max_parts;
      sp.max_item_rows = plan->max_item_rows;
      if (!kernels::cpu::shared_prefix_attention(sp, bench_pool()).ok()) {
        state.SkipWithError("shared_prefix_attention failed");
        break;
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_SharedPrefixDecode)
    ->ArgsProduct({{32}, {4096, 32768}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ls::bench
