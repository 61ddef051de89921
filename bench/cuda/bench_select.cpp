// Page selection, one level against two levels (section "select" of bench_cuda_kernels), on the
// lserve decode shape of Llama-3-8B: 32 q heads, 8 kv heads of which 4 select (GQA group 4),
// head_dim 128, pages of 64 tokens with 16-token logical pages, a 4096-token budget, bf16.
// For each batch B and context C the summaries are built by the real summary update
// (page_summary_update over random keys in 16K-token chunks, so the coarse rows are exactly what
// the engine keeps) in one of two key distributions:
//  - random: every key uniform in [-1, 1]. Every page bounds alike, so the coarse level prunes
//    little: the worst case for two levels (it pays the coarse pass and the rounds on top);
//  - planted: keys uniform in [-0.25, 0.25] except four 1024-token hot spans per sequence at
//    random offsets, uniform in [-2, 2]: the locality trained models show, where the coarse
//    level skips most groups.
// Each selection is timed as a graph of 20 calls (select_graph_us, what a captured decode step
// pays per layer) and eagerly (select_us). refined_fraction is the share of pages whose fine
// summaries the two-level selection read; same_pages checks that it chose exactly the one-level
// pages. fine=host puts the fine summaries in pinned host memory (read through unified
// addressing, as with --kv-offload on); its one-level row shows what reading them all costs.

#include "bench_select.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kernels/paged_kv.h"

namespace ls::bench {
namespace {

constexpr int32_t kQ = 32, kKv = 8, kD = 128, kPageTokens = 64, kLogical = 16, kLpp = 4;
constexpr int32_t kRetrieval = 4;  // odd kv heads select, even heads stream
constexpr int32_t kBudgetPages = 4096 / kPageTokens;
constexpr int32_t kChunk = 16384;

Buffer must(Result<Buffer> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "bench select: %s\n", r.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*r);
}

Buffer upload(CudaBackend& b, const std::vector<int32_t>& v) {
  Buffer buf = must(b.allocate(static_cast<int64_t>(v.size() * 4)));
  b.copy_bytes(buf.data(), v.data(), static_cast<int64_t>(v.size() * 4));
  return buf;
}

template <class Fn>
double graph_us(CudaBackend& b, int calls, Fn&& fn) {
  fn();
  b.synchronize();
  double us = -1;
  if (b.begin_capture().ok()) {
    for (int i = 0; i < calls; ++i) fn();
    auto graph = b.end_capture();
    if (graph.ok()) us = median_ms(b, 2, 7, [&] { (void)b.replay(*graph); }) * 1e3 / calls;
    b.drop_graphs();
  }
  return us;
}

}  // namespace

void bench_select(CudaBackend& b, cudaStream_t stream, JsonLines& out,
                  const std::vector<int64_t>& batches, const std::vector<int64_t>& contexts,
                  const std::string& data, const std::string& fine, int32_t group_pages) {
  std::vector<int32_t> mode(kKv), slot(kKv);
  for (int32_t g = 0, r = 0, st = 0; g < kKv; ++g) {
    const bool streaming = g % 2 == 0;
    mode[g] = static_cast<int32_t>(streaming ? kernels::HeadMode::kStreaming
                                             : kernels::HeadMode::kSelected);
    slot[g] = streaming ? st++ : r++;
  }
  Buffer d_mode = upload(b, mode), d_slot = upload(b, slot);
  std::mt19937 rng(17);
  for (const std::string kind : {"random", "planted"}) {
    if (data.find(kind) == std::string::npos) continue;
    for (const std::string where : {"device", "host"}) {
      if (fine.find(where) == std::string::npos) continue;
      const MemoryTier tier = where == "host" ? MemoryTier::kHost : MemoryTier::kDevice;
      for (const int64_t C : contexts) {
        for (const int64_t B : batches) {
          const auto pages = static_cast<int32_t>((C + kPageTokens - 1) / kPageTokens);
          const int32_t max_groups = (pages + group_pages - 1) / group_pages;
          const int64_t blocks = B * pages;
          const int64_t rows = blocks * kRetrieval * kLpp;  // fine rows
          auto kmin_r = b.allocate_zeroed(rows * kD * 2, tier);
          auto kmax_r = b.allocate_zeroed(rows * kD * 2, tier);
          if (!kmin_r.ok() || !kmax_r.ok()) {
            out.write(fmt::format(
                R"({{"bench": "select", "data": "{}", "fine": "{}", "batch": {}, "context": {}, "skipped": "{}"}})",
                kind, where, B, C,
                json_safe(!kmin_r.ok() ? kmin_r.status().to_string()
                                       : kmax_r.status().to_string())));
            continue;
          }
          Buffer kmin = std::move(*kmin_r), kmax = std::move(*kmax_r);
          const int64_t coarse_elems = B * kRetrieval * max_groups * kD;
          Buffer cmin = must(b.allocate_zeroed(coarse_elems * 4)),
                 cmax = must(b.allocate_zeroed(coarse_elems * 4));
          std::vector<int32_t> table(static_cast<size_t>(blocks));
          std::iota(table.begin(), table.end(), 0);
          std::shuffle(table.begin(), table.end(), rng);
          Buffer d_table = upload(b, table);
          std::vector<int32_t> seq_rows(static_cast<size_t>(B));
          std::iota(seq_rows.begin(), seq_rows.end(), 0);
          Buffer d_rows = upload(b, seq_rows);

          kernels::PageSummaries sm;
          sm.kmin = kmin.data();
          sm.kmax = kmax.data();
          sm.dtype = DType::kBF16;
          sm.logical_page_tokens = kLogical;
          sm.logical_per_page = kLpp;
          kernels::PageSummaries sm2 = sm;
          sm2.coarse_kmin = cmin.data();
          sm2.coarse_kmax = cmax.data();
          sm2.group_pages = group_pages;
          sm2.max_groups = max_groups;
          sm2.num_rows = static_cast<int32_t>(B);

          // Summaries of every sequence, built chunk by chunk by the summary update.
          Buffer keys = must(b.allocate(int64_t{kChunk} * kKv * kD * 2));
          for (int64_t s = 0; s < B; ++s) {
            std::uniform_int_distribution<int64_t> at(0, std::max<int64_t>(0, C - 1024));
            std::vector<int64_t> hot;
            for (int i = 0; i < 4; ++i) hot.push_back(at(rng));
            for (int64_t pos = 0; pos < C; pos += kChunk) {
              const int64_t n = std::min<int64_t>(kChunk, C - pos);
              const float amp = kind == std::string("planted") ? 0.25f : 1.0f;
              die_on(fill_uniform_bf16(keys.data(), n * kKv * kD, rng(), -amp, amp, stream),
                     "fill");
              if (kind == std::string("planted")) {
                for (const int64_t h : hot) {
                  const int64_t lo = std::max(h, pos), hi = std::min(h + 1024, pos + n);
                  if (lo >= hi) continue;
                  die_on(
                      fill_uniform_bf16(static_cast<char*>(keys.data()) + (lo - pos) * kKv * kD * 2,
                                        (hi - lo) * kKv * kD, rng(), -2.0f, 2.0f, stream),
                      "fill");
                }
              }
              Buffer indptr = upload(b, {0, static_cast<int32_t>(n)});
              Buffer lens = upload(b, {static_cast<int32_t>(pos + n)});
              kernels::SummaryUpdateParams up;
              up.k = keys.data();
              up.src_dtype = DType::kBF16;
              up.num_tokens = static_cast<int32_t>(n);
              up.num_kv_heads = kKv;
              up.head_dim = kD;
              up.num_seqs = 1;
              up.q_indptr = indptr.as<int32_t>();
              up.kv_lens = lens.as<int32_t>();
              up.head_mode = d_mode.as<int32_t>();
              up.head_slot = d_slot.as<int32_t>();
              up.page_tokens = kPageTokens;
              up.heads_per_block = kRetrieval;
              up.retrieval_blocks = d_table.as<int32_t>() + s * pages;
              up.retrieval_blocks_stride = pages;
              up.summaries = sm2;
              up.summaries.rows = d_rows.as<int32_t>() + s;
              b.page_summary_update(up);
              b.synchronize();
            }
          }

          Buffer q = must(b.allocate(B * kQ * kD * 2));
          die_on(fill_uniform_bf16(q.data(), B * kQ * kD, rng(), -2.0f, 2.0f, stream), "fill");
          std::vector<int32_t> indptr(static_cast<size_t>(B + 1)),
              lens(static_cast<size_t>(B), static_cast<int32_t>(C));
          std::iota(indptr.begin(), indptr.end(), 0);
          Buffer d_indptr = upload(b, indptr), d_lens = upload(b, lens);
          Buffer sel1 = must(b.allocate(B * kKv * kBudgetPages * 4));
          Buffer sel2 = must(b.allocate(B * kKv * kBudgetPages * 4));
          Buffer num1 = must(b.allocate(B * kKv * 4)), num2 = must(b.allocate(B * kKv * 4));
          Buffer refined = must(b.allocate(B * kKv * 4));
          kernels::PageSelectParams sp;
          sp.q = q.data();
          sp.q_dtype = DType::kBF16;
          sp.num_seqs = static_cast<int32_t>(B);
          sp.q_indptr = d_indptr.as<int32_t>();
          sp.num_q_heads = kQ;
          sp.num_kv_heads = kKv;
          sp.head_dim = kD;
          sp.kv_lens = d_lens.as<int32_t>();
          sp.head_mode = d_mode.as<int32_t>();
          sp.head_slot = d_slot.as<int32_t>();
          sp.page_tokens = kPageTokens;
          sp.retrieval_blocks = d_table.as<int32_t>();
          sp.retrieval_blocks_stride = pages;
          sp.heads_per_block = kRetrieval;
          sp.budget_pages = kBudgetPages;
          sp.out_rows = d_rows.as<int32_t>();
          sp.max_selected = kBudgetPages;

          for (const int levels : {1, 2}) {
            kernels::PageSelectParams p = sp;
            p.summaries = levels == 2 ? sm2 : sm;
            if (levels == 2) p.summaries.rows = d_rows.as<int32_t>();
            p.selected = (levels == 2 ? sel2 : sel1).as<int32_t>();
            p.num_selected = (levels == 2 ? num2 : num1).as<int32_t>();
            p.refined_pages = levels == 2 ? refined.as<int32_t>() : nullptr;
            const double eager_ms = median_ms(b, 2, 10, [&] { b.page_select(p); });
            const double us = graph_us(b, 20, [&] { b.page_select(p); });
            const Status err = b.take_error();
            std::string extra;
            if (levels == 2) {
              std::vector<int32_t> r(static_cast<size_t>(B * kKv)), s1(sel1.bytes() / 4),
                  s2(sel2.bytes() / 4), n1(num1.bytes() / 4), n2(num2.bytes() / 4);
              b.copy_bytes(r.data(), refined.data(), refined.bytes());
              b.copy_bytes(s1.data(), sel1.data(), sel1.bytes());
              b.copy_bytes(s2.data(), sel2.data(), sel2.bytes());
              b.copy_bytes(n1.data(), num1.data(), num1.bytes());
              b.copy_bytes(n2.data(), num2.data(), num2.bytes());
              b.synchronize();
              int64_t read = 0;
              for (int64_t s = 0; s < B; ++s) {
                for (int32_t g = 0; g < kKv; ++g) {
                  if (g % 2 == 1) read += r[static_cast<size_t>(s * kKv + g)];
                }
              }
              const double fraction =
                  static_cast<double>(read) / static_cast<double>(B * kRetrieval * pages);
              extra = fmt::format(R"(, "refined_fraction": {:.4f}, "same_pages": {})", fraction,
                                  s1 == s2 && n1 == n2 ? "true" : "false");
            }
            out.write(fmt::format(
                R"({{"bench": "select", "data": "{}", "fine": "{}", "batch": {}, "context": {}, "levels": {}, "group_pages": {}, "select_us": {:.2f}, "select_graph_us": {:.2f}, "fine_bytes": {}, "coarse_bytes": {}{}, "ok": {}}})",
                kind, where, B, C, levels, levels == 2 ? group_pages : 0, eager_ms * 1e3, us,
                kmin.bytes() + kmax.bytes(), levels == 2 ? cmin.bytes() + cmax.bytes() : 0, extra,
                err.ok() && us > 0 ? "true" : "false"));
          }
        }
      }
    }
  }
}

}  // namespace ls::bench
