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

}  // namespace

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
