#include "kv/kv_pool.h"

namespace ls {

namespace {

Result<Buffer> allocate_zeroed(Backend& backend, int64_t bytes,
                              MemoryTier tier = MemoryTier::kDevice) {
  if (bytes == 0) return Buffer{};
  return backend.allocate_zeroed(bytes, tier);
}

}  // namespace

Result<KvPool> KvPool::create(const KvGeometry& g, Backend& backend,
                              int32_t num_retrieval_blocks, int32_t num_streaming_blocks,
                              const KvTierConfig& tier,
                              const SummaryPlacement& placement) {
  LS_RETURN_IF_ERROR(g.validate());
  KvPool pool;
  const int64_t page_bytes = g.page_bytes();
  const int64_t r_pages = static_cast<int64_t>(num_retrieval_blocks) * g.roles.num_retrieval();
  const int64_t s_pages = static_cast<int64_t>(num_streaming_blocks) * g.roles.num_streaming();
  const MemoryTier home = tier.enabled ? MemoryTier::kHost : MemoryTier::kDevice;
  LS_ASSIGN_OR_RETURN(pool.retrieval_k_, allocate_zeroed(backend, r_pages * page_bytes, home));
  LS_ASSIGN_OR_RETURN(pool.retrieval_v_, allocate_zeroed(backend, r_pages * page_bytes, home));
  LS_ASSIGN_OR_RETURN(pool.streaming_k_, allocate_zeroed(backend, s_pages * page_bytes));
  LS_ASSIGN_OR_RETURN(pool.streaming_v_, allocate_zeroed(backend, s_pages * page_bytes));
  const bool two_level = g.keep_summaries && g.summary_group_pages > 0 &&
                         placement.num_rows > 0 && placement.max_pages_per_seq > 0;
  int32_t max_groups = 0;
  if (g.keep_summaries) {
    const int64_t summary_bytes =
        r_pages * dtype_nbytes(g.dtype, static_cast<int64_t>(g.logical_per_page()) * g.head_dim);
    const MemoryTier fine =
        two_level && placement.fine_on_host ? MemoryTier::kHost : MemoryTier::kDevice;
    LS_ASSIGN_OR_RETURN(pool.kmin_, allocate_zeroed(backend, summary_bytes, fine));
    LS_ASSIGN_OR_RETURN(pool.kmax_, allocate_zeroed(backend, summary_bytes, fine));
    if (two_level) {
      max_groups = (placement.max_pages_per_seq + g.summary_group_pages - 1) /
                   g.summary_group_pages;
      const int64_t coarse_bytes =
          static_cast<int64_t>(placement.num_rows) * g.roles.num_retrieval() * max_groups *
          dtype_nbytes(g.dtype, g.head_dim);
      LS_ASSIGN_OR_RETURN(pool.coarse_kmin_, allocate_zeroed(backend, coarse_bytes));
      LS_ASSIGN_OR_RETURN(pool.coarse_kmax_, allocate_zeroed(backend, coarse_bytes));
    }
  }
  const int64_t retrieval_bytes = pool.retrieval_k_.bytes() + pool.retrieval_v_.bytes();
  pool.bytes_ = pool.coarse_summary_bytes() + pool.streaming_k_.bytes() + pool.streaming_v_.bytes();
  if (pool.fine_summaries_on_host()) {
    pool.host_bytes_ += pool.fine_summary_bytes();
  } else {
    pool.bytes_ += pool.fine_summary_bytes();
  }
  if (tier.enabled) {
    LS_ASSIGN_OR_RETURN(pool.tier_, KvCacheTier::create(g, backend, r_pages, tier));
    pool.host_bytes_ += retrieval_bytes;
    pool.bytes_ += pool.tier_.bytes();
  } else {
    pool.bytes_ += retrieval_bytes;
  }

  auto view = [&](const Buffer& k, const Buffer& v, int32_t blocks, int32_t heads) {
    kernels::PagedKvPool p;
    p.k = k.data();
    p.v = v.data();
    p.dtype = g.page_dtype();
    p.quant = g.quant();
    p.num_blocks = blocks;
    p.heads_per_block = heads;
    p.page_tokens = g.page_tokens;
    p.head_dim = g.head_dim;
    return p;
  };
  pool.retrieval_view_ = view(pool.retrieval_k_, pool.retrieval_v_, num_retrieval_blocks,
                              g.roles.num_retrieval());
  if (tier.enabled) pool.retrieval_view_ = pool.tier_.tiered_view(pool.retrieval_view_);
  pool.streaming_view_ = view(pool.streaming_k_, pool.streaming_v_, num_streaming_blocks,
                              g.roles.num_streaming());
  pool.summaries_view_.kmin = pool.kmin_.data();
  pool.summaries_view_.kmax = pool.kmax_.data();
  pool.summaries_view_.dtype = g.dtype;
  pool.summaries_view_.logical_page_tokens = g.logical_page_tokens;
  pool.summaries_view_.logical_per_page = g.logical_per_page();
  if (two_level) {  // rows: set per step by the runner (the step's sequence rows)
    pool.summaries_view_.coarse_kmin = pool.coarse_kmin_.data();
    pool.summaries_view_.coarse_kmax = pool.coarse_kmax_.data();
    pool.summaries_view_.group_pages = g.summary_group_pages;
    pool.summaries_view_.max_groups = max_groups;
    pool.summaries_view_.num_rows = placement.num_rows;
  }
  return pool;
}

void KvPool::reset_coarse_row(Backend& backend, int32_t row) const {
  const kernels::PageSummaries& sm = summaries_view_;
  if (sm.group_pages <= 0 || row < 0 || row >= sm.num_rows) return;
  const int64_t row_bytes = coarse_kmin_.bytes() / sm.num_rows;
  backend.fill_zero(static_cast<char*>(coarse_kmin_.data()) + row * row_bytes, row_bytes);
  backend.fill_zero(static_cast<char*>(coarse_kmax_.data()) + row * row_bytes, row_bytes);
}

}  // namespace ls
