// Decode attention at the Llama-3-8B shape (32 q heads, 8 kv heads, d 128, bf16 pages of 64)
// for B sequences that share a P-token prefix (the same blocks in every table, as prefix caching
// leaves them) and each have their own suffix_tokens tokens after it:
//  - "ordinary": the backend's paged attention (split-K decode kernel), each sequence reading
//    the prefix pages itself (they may hit in L2 when sequences read the same page together);
//  - "shared": shared-prefix attention, the prefix read once per 64 stacked query rows (two
//    items of 16 sequences x 4 query heads per kv head at B = 32), suffixes per sequence, merge.
// One JSON line per (B, P): both times per call (median of eager calls), the speed-up, the host
// time to build the plan, and the largest difference between the two outputs (a check that they
// agree; bf16 rounding of the output bounds it near 1e-2).

#include "bench_shared_prefix.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cuda/shared_prefix_attention.h"
#include "kernels/shared_prefix.h"

namespace ls::bench {
namespace {

constexpr int32_t kQHeads = 32, kKvHeads = 8, kD = 128, kPage = 64;

template <class T>
Buffer upload_vec(CudaBackend& b, const std::vector<T>& v) {
  const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(T));
  Buffer buf = must_alloc(b, bytes);
  if (bytes > 0) b.copy_bytes(buf.data(), v.data(), bytes);
  return buf;
}

std::vector<float> download_bf16(CudaBackend& b, const Buffer& buf, int64_t n) {
  std::vector<uint8_t> raw(static_cast<size_t>(n * 2));
  b.copy_bytes(raw.data(), buf.data(), n * 2);
  std::vector<float> f(static_cast<size_t>(n));
  convert_to_f32(DType::kBF16, raw.data(), f.data(), n);
  return f;
}

}  // namespace

void bench_shared_prefix(CudaBackend& b, cudaStream_t stream, JsonLines& out,
                         const std::vector<int64_t>& batches, const std::vector<int64_t>& prefixes,
                         int64_t suffix_tokens, int64_t split_tokens) {
  const int64_t page_bytes = int64_t{kPage} * kD * 2;
  const int64_t block_bytes = kKvHeads * page_bytes;
  for (const int64_t B : batches) {
    for (const int64_t P : prefixes) {
      const int32_t shared_pages = static_cast<int32_t>(P / kPage);  // whole pages shared
      const int64_t kv_len = P + suffix_tokens;
      const int32_t pages = static_cast<int32_t>((kv_len + kPage - 1) / kPage);
      const int32_t own_pages = pages - shared_pages;
      const int64_t blocks = shared_pages + B * own_pages;
      Buffer k = must_alloc(b, blocks * block_bytes), v = must_alloc(b, blocks * block_bytes);
      die_on(fill_uniform_bf16(k.data(), blocks * block_bytes / 2, 51, -1, 1, stream), "fill");
      die_on(fill_uniform_bf16(v.data(), blocks * block_bytes / 2, 52, -1, 1, stream), "fill");
      // Tables: the shared blocks, then each sequence's own (the page the prefix ends in, when it
      // ends inside one, is the sequence's own copy, as copy-on-write leaves it; the bench's
      // random data differs there, so the prefix handed to the plan is the whole pages only).
      std::vector<int32_t> table(static_cast<size_t>(B * pages));
      for (int64_t s = 0; s < B; ++s) {
        for (int32_t lp = 0; lp < pages; ++lp) {
          table[static_cast<size_t>(s * pages + lp)] =
              lp < shared_pages
                  ? lp
                  : static_cast<int32_t>(shared_pages + s * own_pages + (lp - shared_pages));
        }
      }
      const int64_t q_elems = B * kQHeads * kD;
      Buffer q = must_alloc(b, q_elems * 2), o_ord = must_alloc(b, q_elems * 2),
             o_sp = must_alloc(b, q_elems * 2);
      die_on(fill_uniform_bf16(q.data(), q_elems, 53, -2, 2, stream), "fill");
      std::vector<int32_t> indptr(static_cast<size_t>(B + 1));
      std::iota(indptr.begin(), indptr.end(), 0);
      const std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(kv_len));
      std::vector<int32_t> modes(kKvHeads, static_cast<int32_t>(kernels::HeadMode::kCausal));
      std::vector<int32_t> slots(kKvHeads);
      std::iota(slots.begin(), slots.end(), 0);
      Buffer d_table = upload_vec(b, table), d_indptr = upload_vec(b, indptr),
             d_lens = upload_vec(b, lens), d_modes = upload_vec(b, modes),
             d_slots = upload_vec(b, slots);

      kernels::AttentionParams p;
      p.q = q.data();
      p.out = o_ord.data();
      p.q_dtype = DType::kBF16;
      p.num_tokens = static_cast<int32_t>(B);
      p.num_q_heads = kQHeads;
      p.num_kv_heads = kKvHeads;
      p.head_dim = kD;
      p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
      p.num_seqs = static_cast<int32_t>(B);
      p.q_indptr = static_cast<const int32_t*>(d_indptr.data());
      p.kv_lens = static_cast<const int32_t*>(d_lens.data());
      p.head_mode = static_cast<const int32_t*>(d_modes.data());
      p.head_slot = static_cast<const int32_t*>(d_slots.data());
      p.retrieval.k = k.data();
      p.retrieval.v = v.data();
      p.retrieval.dtype = DType::kBF16;
      p.retrieval.num_blocks = static_cast<int32_t>(blocks);
      p.retrieval.heads_per_block = kKvHeads;
      p.retrieval.page_tokens = kPage;
      p.retrieval.head_dim = kD;
      p.retrieval_blocks = static_cast<const int32_t*>(d_table.data());
      p.retrieval_blocks_stride = pages;

      const double ordinary_ms = median_ms(b, 2, 10, [&] { b.attention(p); });

      kernels::SharedPrefixGroups groups;
      groups.seqs.resize(static_cast<size_t>(B));
      std::iota(groups.seqs.begin(), groups.seqs.end(), 0);
      groups.group_indptr = {0, static_cast<int32_t>(B)};
      groups.prefix_tokens = {shared_pages * kPage};
      kernels::SharedPrefixPlanConfig pc;
      pc.split_tokens = static_cast<int32_t>(split_tokens);
      const auto t0 = std::chrono::steady_clock::now();
      auto plan = kernels::plan_shared_prefix(static_cast<int32_t>(B), lens.data(), kQHeads,
                                              kKvHeads, modes.data(), nullptr, table.data(), pages,
                                              kPage, groups, pc);
      const double plan_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (!plan.ok()) {
        std::fprintf(stderr, "bench: %s\n", plan.status().to_string().c_str());
        std::exit(2);
      }
      Buffer d_items = upload_vec(b, plan->items), d_item_seqs = upload_vec(b, plan->item_seqs),
             d_parts = upload_vec(b, plan->num_parts);
      kernels::SharedPrefixParams sp;
      sp.attn = p;
      sp.attn.out = o_sp.data();
      sp.items = static_cast<const kernels::SharedPrefixItem*>(d_items.data());
      sp.num_items = static_cast<int32_t>(plan->items.size());
      sp.item_seqs = static_cast<const int32_t*>(d_item_seqs.data());
      sp.num_parts = static_cast<const int32_t*>(d_parts.data());
      sp.max_parts = plan->max_parts;
      sp.max_item_rows = plan->max_item_rows;
      const int64_t ws_bytes = kernels::cuda::shared_prefix_workspace_bytes(sp);
      Buffer ws = must_alloc(b, ws_bytes);
      Status st = Status::ok_status();
      const double shared_ms = median_ms(b, 2, 10, [&] {
        const Status s = kernels::cuda::shared_prefix_attention(sp, ws.data(), ws_bytes, stream);
        if (!s.ok()) st = s;
      });
      if (!st.ok()) {
        std::fprintf(stderr, "bench: shared-prefix attention: %s\n", st.to_string().c_str());
        std::exit(2);
      }
      const std::vector<float> a = download_bf16(b, o_ord, q_elems);
      const std::vector<float> c = download_bf16(b, o_sp, q_elems);
      double max_diff = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(static_cast<double>(a[i]) - c[i]);
        max_diff = std::isfinite(d) ? std::max(max_diff, d) : INFINITY;
      }
      out.write(fmt::format(
          R"({{"bench": "shared_prefix_decode", "batch": {}, "prefix": {}, "suffix": {}, "split_tokens": {}, "items": {}, "ordinary_us": {:.1f}, "shared_us": {:.1f}, "speedup": {:.2f}, "plan_us": {:.1f}, "max_abs_diff": {:.4g}}})",
          B, shared_pages * kPage, kv_len - int64_t{shared_pages} * kPage, split_tokens,
          plan->items.size(), ordinary_ms * 1e3, shared_ms * 1e3, ordinary_ms / shared_ms, plan_us,
          max_diff));
    }
  }
}

}  // namespace ls::bench
