#pragma once
// KvPool: the memory of the two-way KV cache on one backend — K and V head-pages of both pools
// and the retrieval heads' key summaries — and the plain-data views kernels take. The data-plane
// twin of KvManager, which decides what lives where.

#include <cstdint>

#include "backend/backend.h"
#include "core/status.h"
#include "kernels/paged_kv.h"
#include "kv/kv_geometry.h"

namespace ls {

class KvPool {
 public:
  static Result<KvPool> create(const KvGeometry& geometry, Backend& backend,
                               int32_t num_retrieval_blocks, int32_t num_streaming_blocks);

  kernels::PagedKvPool retrieval() const { return retrieval_view_; }
  kernels::PagedKvPool streaming() const { return streaming_view_; }
  kernels::PageSummaries summaries() const { return summaries_view_; }
  int64_t bytes() const { return bytes_; }

 private:
  Buffer retrieval_k_;  // [num_retrieval_blocks * num_retrieval, page_tokens, head_dim]
  Buffer retrieval_v_;  // same
  Buffer kmin_;         // [num_retrieval_blocks * num_retrieval, logical_per_page, head_dim]
  Buffer kmax_;         // same
  Buffer streaming_k_;  // [num_streaming_blocks * num_streaming, page_tokens, head_dim]
  Buffer streaming_v_;  // same
  kernels::PagedKvPool retrieval_view_;
  kernels::PagedKvPool streaming_view_;
  kernels::PageSummaries summaries_view_;
  int64_t bytes_ = 0;
};

}  // namespace ls
