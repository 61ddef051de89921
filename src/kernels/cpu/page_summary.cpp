#include "kernels/cpu/page_summary.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

// The coarse level (PageSummaries::group_pages): folds one logical page's stored summary (lo/hi,
// as read back from the summary dtype) into its group's coarse row of the sequence's row, as
// order keys that only grow (kmax: key(max), kmin: key(-min)).
void fold_coarse(const PageSummaries& sm, int32_t row, int32_t heads_per_block, int32_t slot,
                 int64_t group, int64_t d, const std::vector<float>& lo,
                 const std::vector<float>& hi) {
  if (row < 0 || row >= sm.num_rows || group >= sm.max_groups) return;
  const int64_t offset =
      ((static_cast<int64_t>(row) * heads_per_block + slot) * sm.max_groups + group) * d;
  uint32_t* cmin = static_cast<uint32_t*>(sm.coarse_kmin) + offset;
  uint32_t* cmax = static_cast<uint32_t*>(sm.coarse_kmax) + offset;
  for (int64_t e = 0; e < d; ++e) {
    cmin[e] = std::max(cmin[e], coarse_key(-lo[static_cast<size_t>(e)]));
    cmax[e] = std::max(cmax[e], coarse_key(hi[static_cast<size_t>(e)]));
  }
}

}  // namespace

void page_summary_update(const SummaryUpdateParams& p, ThreadPool& pool) {
  const PageSummaries& sm = p.summaries;
  if (p.num_tokens <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.num_seqs <= 0) return;
  if (sm.logical_page_tokens <= 0 || sm.logical_per_page <= 0 || p.page_tokens <= 0 ||
      sm.logical_page_tokens * sm.logical_per_page != p.page_tokens || !sm.kmin || !sm.kmax) {
    return;
  }
  const int64_t d = p.head_dim;
  const int64_t lpt = sm.logical_page_tokens;
  const int64_t src_row_bytes = dtype_nbytes(p.src_dtype, d);
  const int64_t sum_row_bytes = dtype_nbytes(sm.dtype, d);
  const auto* k_src = static_cast<const char*>(p.k);

  // One item per (sequence, kv head): each logical page's tokens are folded in order by one
  // thread, the page's first token initialising it.
  const bool two_level = sm.two_level();
  const int64_t num_items = static_cast<int64_t>(p.num_seqs) * p.num_kv_heads;
  pool.parallel_for(num_items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> key(static_cast<size_t>(d)), lo(static_cast<size_t>(d)),
        hi(static_cast<size_t>(d));
    for (int64_t item = i0; item < i1; ++item) {
      const int32_t s = static_cast<int32_t>(item / p.num_kv_heads);
      const int32_t g = static_cast<int32_t>(item % p.num_kv_heads);
      if (p.head_mode[g] == static_cast<int32_t>(HeadMode::kStreaming)) continue;
      const int32_t slot = p.head_slot[g];
      if (slot < 0 || slot >= p.heads_per_block) continue;
      const int32_t q_begin = p.q_indptr[s];
      const int32_t q_len = p.q_indptr[s + 1] - q_begin;
      const int64_t first_pos = static_cast<int64_t>(p.kv_lens[s]) - q_len;
      if (q_len <= 0 || first_pos < 0) continue;
      // Runs of tokens within one logical page: load the summary once, fold, store once.
      int32_t t = 0;
      while (t < q_len) {
        const int64_t pos = first_pos + t;
        const int64_t lp = pos / lpt;
        const int32_t run =
            static_cast<int32_t>(std::min<int64_t>(q_len - t, (lp + 1) * lpt - pos));
        const int64_t page = pos / p.page_tokens;
        const int32_t block =
            page < p.retrieval_blocks_stride
                ? p.retrieval_blocks[s * static_cast<int64_t>(p.retrieval_blocks_stride) + page]
                : -1;
        if (block >= 0) {
          const int64_t head_page = static_cast<int64_t>(block) * p.heads_per_block + slot;
          const int64_t offset =
              (head_page * sm.logical_per_page + lp % sm.logical_per_page) * sum_row_bytes;
          const bool fresh = pos % lpt == 0;
          if (!fresh) {
            convert_to_f32(sm.dtype, static_cast<const char*>(sm.kmin) + offset, lo.data(), d);
            convert_to_f32(sm.dtype, static_cast<const char*>(sm.kmax) + offset, hi.data(), d);
          }
          for (int32_t i = 0; i < run; ++i) {
            const int64_t row = (q_begin + t + i) * static_cast<int64_t>(p.num_kv_heads) + g;
            simd::dispatch_isa(best_isa(), [&]<class S>() {
              simd::widen_to_f32<S>(p.src_dtype, k_src + row * src_row_bytes, key.data(), d);
            });
            if (fresh && i == 0) {
              lo = key;
              hi = key;
              continue;
            }
            for (int64_t e = 0; e < d; ++e) {
              lo[static_cast<size_t>(e)] =
                  std::min(lo[static_cast<size_t>(e)], key[static_cast<size_t>(e)]);
              hi[static_cast<size_t>(e)] =
                  std::max(hi[static_cast<size_t>(e)], key[static_cast<size_t>(e)]);
            }
          }
          convert_from_f32(lo.data(), sm.dtype, static_cast<char*>(sm.kmin) + offset, d);
          convert_from_f32(hi.data(), sm.dtype, static_cast<char*>(sm.kmax) + offset, d);
          if (two_level) {  // the stored (rounded) values, so the coarse row bounds them exactly
            convert_to_f32(sm.dtype, static_cast<const char*>(sm.kmin) + offset, lo.data(), d);
            convert_to_f32(sm.dtype, static_cast<const char*>(sm.kmax) + offset, hi.data(), d);
            fold_coarse(sm, sm.rows[s], p.heads_per_block, slot,
                        pos / (static_cast<int64_t>(sm.group_pages) * p.page_tokens), d, lo, hi);
          }
        }
        t += run;
      }
    }
  });
}

void coarse_fold_pages(const CoarseFoldParams& p, ThreadPool& pool) {
  const PageSummaries& sm = p.summaries;
  if (p.num_pages <= 0 || sm.group_pages <= 0 || !sm.coarse_kmin || !sm.coarse_kmax || !sm.kmin ||
      !sm.kmax || p.row < 0 || p.row >= sm.num_rows || p.heads_per_block <= 0 || p.head_dim <= 0 ||
      sm.logical_per_page <= 0 || !p.blocks) {
    return;
  }
  const int64_t d = p.head_dim;
  const int64_t sum_row_bytes = dtype_nbytes(sm.dtype, d);
  // One item per head-page slot: its groups of this row are written by it alone.
  pool.parallel_for(p.heads_per_block, 1, [&](int64_t s0, int64_t s1) {
    std::vector<float> lo(static_cast<size_t>(d)), hi(static_cast<size_t>(d));
    for (int64_t slot = s0; slot < s1; ++slot) {
      for (int32_t page = 0; page < p.num_pages; ++page) {
        const int32_t block = p.blocks[page];
        if (block < 0) continue;
        const int64_t head_page = int64_t{block} * p.heads_per_block + slot;
        for (int32_t lp = 0; lp < sm.logical_per_page; ++lp) {
          const int64_t offset = (head_page * sm.logical_per_page + lp) * sum_row_bytes;
          convert_to_f32(sm.dtype, static_cast<const char*>(sm.kmin) + offset, lo.data(), d);
          convert_to_f32(sm.dtype, static_cast<const char*>(sm.kmax) + offset, hi.data(), d);
          fold_coarse(sm, p.row, p.heads_per_block, static_cast<int32_t>(slot),
                      page / sm.group_pages, d, lo, hi);
        }
      }
    }
  });
}

}  // namespace ls::kernels::cpu
