#pragma once
// Plain-data description of a batch of page copies between two page arrays: the transfer
// primitive of the hierarchical KV memory (retrieve: host pool -> device page cache; save: device
// pages -> host pool). Both backends run it; nothing here decides which pages move.
//
// A page is `page_bytes` contiguous bytes. Up to kMaxPageArrays arrays move together with the same
// index lists (a KV head-page is one page of the K array and the same page of the V array):
//   for a < num_arrays, i < count:
//     dst[a] + dst_pages[i] * dst_stride_bytes  <-  src[a] + src_pages[i] * src_stride_bytes
// (page_bytes bytes each). Either side may be device memory or pinned host memory: on CUDA the
// gather kernel reads and writes pinned host memory through unified virtual addressing.

#include <cstdint>

namespace ls::kernels {

inline constexpr int kMaxPageArrays = 2;

enum class PageCopyMethod : int32_t {
  kGatherKernel = 0,   // one kernel on at most max_sms SMs copies every page (the default); the
                       //   count and index lists may live on the device, so one recorded launch
                       //   serves any count <= max_pages
  kMemcpyBatch = 1,    // CUDA: one cudaMemcpyBatchAsync of every page; index lists and count on
                       //   the host
  kPerPageMemcpy = 2,  // CUDA: one cudaMemcpyAsync per page and array; index lists and count on
                       //   the host (the baseline the others are measured against)
};

struct PageCopyParams {
  const void* src[kMaxPageArrays] = {};  // [num_src_pages, src_stride_bytes] bytes each
  void* dst[kMaxPageArrays] = {};        // [num_dst_pages, dst_stride_bytes] bytes each
  int32_t num_arrays = 1;
  int64_t page_bytes = 0;        // bytes moved per page and array; a multiple of 16
  int64_t src_stride_bytes = 0;  // distance between consecutive pages of src (>= page_bytes)
  int64_t dst_stride_bytes = 0;  // distance between consecutive pages of dst (>= page_bytes)
  const int32_t* src_pages = nullptr;  // [max_pages] page index into src
  const int32_t* dst_pages = nullptr;  // [max_pages] page index into dst
  // Number of pages to copy. kGatherKernel: `num_pages_device` ([1], device memory on CUDA) when
  // set, else `num_pages`; the memcpy methods read `num_pages` and need host index lists.
  const int32_t* num_pages_device = nullptr;
  int32_t num_pages = 0;
  int32_t max_pages = 0;  // upper bound of the count (sizes the launch)
  PageCopyMethod method = PageCopyMethod::kGatherKernel;
  int32_t max_sms = 16;  // kGatherKernel: SMs (thread blocks) it may occupy; <= 0: all
  // Pages each array holds, when > 0: an index outside [0, capacity) is refused (host lists) or
  // its page skipped and the error reported at the next synchronize (lists in device memory).
  // <= 0: only negative indices are refused.
  int32_t src_capacity_pages = 0;
  int32_t dst_capacity_pages = 0;
};

}  // namespace ls::kernels
