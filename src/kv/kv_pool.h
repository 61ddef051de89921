#pragma once
// KvPool: the memory of the two-way KV cache on one backend — K and V head-pages of both pools
// and the retrieval heads' key summaries — and the plain-data views kernels take. The data-plane
// twin of KvManager, which decides what lives where.
//
// With the hierarchical tier on (docs/hierarchical-kv.md), the retrieval heads' pages have their
// homes in host memory (MemoryTier::kHost, pinned on a GPU) and the device keeps a page cache
// (KvCacheTier); retrieval() is then the tiered view kernels read slots through. Streaming pages
// and summaries stay on the device either way.

#include <cstdint>

#include "backend/backend.h"
#include "core/status.h"
#include "kernels/paged_kv.h"
#include "kv/kv_cache_tier.h"
#include "kv/kv_geometry.h"
#include "kv/kv_tier_config.h"

namespace ls {

// Where the retrieval heads' page summaries live (docs/two-level-summaries.md). With
// geometry.summary_group_pages > 0 the coarse level is kept per request row, for `num_rows` rows
// of up to `max_pages_per_seq` pages, on the device; the fine level goes to host memory
// (MemoryTier::kHost, pinned on a GPU) when fine_on_host, else to the device.
struct SummaryPlacement {
  int32_t num_rows = 0;
  int32_t max_pages_per_seq = 0;
  bool fine_on_host = false;
};

class KvPool {
 public:
  static Result<KvPool> create(const KvGeometry& geometry, Backend& backend,
                               int32_t num_retrieval_blocks, int32_t num_streaming_blocks,
                               const KvTierConfig& tier = {},
                               const SummaryPlacement& summaries = {});

  kernels::PagedKvPool retrieval() const { return retrieval_view_; }
  kernels::PagedKvPool streaming() const { return streaming_view_; }
  kernels::PageSummaries summaries() const { return summaries_view_; }
  int64_t bytes() const { return bytes_; }  // device bytes (the page cache included)
  int64_t host_bytes() const { return host_bytes_; }  // the homes when tiered, fine summaries
                                                      //   on the host
  // The summaries' bytes by level and memory (for the start-up log and the docs' table).
  int64_t fine_summary_bytes() const { return kmin_.bytes() + kmax_.bytes(); }
  bool fine_summaries_on_host() const { return kmin_.tier() == MemoryTier::kHost; }
  int64_t coarse_summary_bytes() const { return coarse_kmin_.bytes() + coarse_kmax_.bytes(); }
  // Empties request row `row`'s coarse summaries (a sequence starts in the row); no-op with one
  // level. Enqueued on the backend's stream like the step's kernels.
  void reset_coarse_row(Backend& backend, int32_t row) const;
  bool tiered() const { return tier_.config().enabled; }
  const KvCacheTier& tier() const { return tier_; }

 private:
  Buffer retrieval_k_;  // [num_retrieval_blocks * num_retrieval, page_tokens, head_dim]; kHost
                        //   when tiered (the homes)
  Buffer retrieval_v_;  // same
  Buffer kmin_;         // [num_retrieval_blocks * num_retrieval, logical_per_page, head_dim]
  Buffer kmax_;         // same; kHost when the fine level is placed on the host
  Buffer coarse_kmin_;  // [num_rows, num_retrieval, max_groups, head_dim] (two levels)
  Buffer coarse_kmax_;  // same
  Buffer streaming_k_;  // [num_streaming_blocks * num_streaming, page_tokens, head_dim]
  Buffer streaming_v_;  // same
  kernels::PagedKvPool retrieval_view_;
  kernels::PagedKvPool streaming_view_;
  kernels::PageSummaries summaries_view_;
  KvCacheTier tier_;
  int64_t bytes_ = 0;
  int64_t host_bytes_ = 0;
};

}  // namespace ls
