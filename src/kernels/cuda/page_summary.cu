// Page-summary update on its own: one warp per (token, kv head) item, each running the shared
// per-item update of page_summary.cuh (which says what it promises). An append with an index
// request runs the same items in its own launch (kv_append.cu).

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/page_summary.cuh"
#include "kernels/cuda/paged_ops.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

template <typename Ts, typename Tm>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    page_summary_kernel(const SummaryUpdateParams p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t num_items = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       item < num_items; item += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    page_summary_item<Ts, Tm>(p, item, lane);
  }
}

// One thread per (head-page slot, page, element): folds the page's logical-page summaries into
// the slot's group of the row with atomicMax on the order keys (any order gives the same max).
template <typename Tm>
__global__ void coarse_fold_kernel(const CoarseFoldParams p) {
  const PageSummaries& sm = p.summaries;
  const int64_t d = p.head_dim;
  const int64_t total = static_cast<int64_t>(p.heads_per_block) * p.num_pages * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % d;
    const int32_t page = static_cast<int32_t>((i / d) % p.num_pages);
    const int32_t slot = static_cast<int32_t>(i / (d * p.num_pages));
    const int32_t block = p.blocks[page];
    if (block < 0) continue;
    const int64_t head_page = static_cast<int64_t>(block) * p.heads_per_block + slot;
    unsigned int kmin = 0, kmax = 0;
    for (int32_t lp = 0; lp < sm.logical_per_page; ++lp) {
      const int64_t at = (head_page * sm.logical_per_page + lp) * d + e;
      kmin = max(kmin, coarse_key_device(-to_f32(static_cast<const Tm*>(sm.kmin)[at])));
      kmax = max(kmax, coarse_key_device(to_f32(static_cast<const Tm*>(sm.kmax)[at])));
    }
    const int64_t group = page / sm.group_pages;
    const int64_t c = ((static_cast<int64_t>(p.row) * p.heads_per_block + slot) * sm.max_groups + group) * d + e;
    atomicMax(static_cast<unsigned int*>(sm.coarse_kmin) + c, kmin);
    atomicMax(static_cast<unsigned int*>(sm.coarse_kmax) + c, kmax);
  }
}

}  // namespace

Status coarse_fold_pages(const CoarseFoldParams& p, cudaStream_t stream) {
  const PageSummaries& sm = p.summaries;
  if (p.num_pages <= 0 || sm.group_pages <= 0 || !sm.coarse_kmin || !sm.coarse_kmax || !sm.kmin ||
      !sm.kmax || p.row < 0 || p.row >= sm.num_rows || p.heads_per_block <= 0 ||
      p.head_dim <= 0 || sm.logical_per_page <= 0 || !p.blocks) {
    return {};
  }
  if ((p.num_pages - 1) / sm.group_pages >= sm.max_groups) {
    return invalid_argument("coarse_fold_pages: {} pages exceed {} groups", p.num_pages,
                            sm.max_groups);
  }
  return dispatch_float(sm.dtype, "coarse_fold_pages", [&]<typename Tm>() {
    const int64_t threads = static_cast<int64_t>(p.heads_per_block) * p.num_pages * p.head_dim;
    coarse_fold_kernel<Tm><<<grid_for(threads, kWarpsPerBlock * 32), kWarpsPerBlock * 32, 0,
                             stream>>>(p);
    return launch_status("coarse_fold_pages");
  });
}

Status page_summary_update(const SummaryUpdateParams& p, cudaStream_t stream) {
  LS_ASSIGN_OR_RETURN(const bool wanted, summary_update_wanted(p, "page_summary_update"));
  if (!wanted) return {};
  return dispatch_float(p.src_dtype, "page_summary_update", [&]<typename Ts>() {
    return dispatch_float(p.summaries.dtype, "page_summary_update", [&]<typename Tm>() {
      const int64_t warps = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
      page_summary_kernel<Ts, Tm>
          <<<grid_for(warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(p);
      return launch_status("page_summary_update");
    });
  });
}

}  // namespace ls::kernels::cuda
