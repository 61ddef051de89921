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

class KvPool {
 public:
  static Result<KvPool> create(const KvGeometry& geometry, Backend& backend,
                               int32_t num_retrieval_blocks, int32_t num_streaming_blocks,
                               const KvTierConfig& tier = {});

  kernels::PagedKvPool retrieval() const { return retrieval_view_; }
  kernels::PagedKvPool streaming() const { return streaming_view_; }
  kernels::PageSummaries summaries() const { return summaries_view_; }
  int64_t bytes() const { return bytes_; }  // device bytes (the page cache included)
  int64_t host_bytes() const { return host_bytes_; }  // the homes, when tiered
  bool tiered() const { return tier_.config().enabled; }
  const KvCacheTier& tier() const { return tier_; }

 private:
  Buffer retrieval_k_;  // [num_retrieval_blocks * num_retrieval, page_tokens, head_dim]; kHost
                        //   when tiered (the homes)
  Buffer retrieval_v_;  // same
  Buffer kmin_;         // [num_retrieval_blocks * num_retrieval, logical_per_page, head_dim]
  Buffer kmax_;         // same
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
