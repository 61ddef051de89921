// The page-copy gather kernel (FlashH2D): a persistent grid of at most max_sms blocks whose warps
// take 4 KB chunks of the listed pages in turn. Each lane issues all 8 of its 16-byte loads before
// the first store, so a warp keeps 4 KB in flight: reads of pinned host memory cross PCIe with
// microseconds of latency, and only many independent loads per SM reach the link's bandwidth
// with a few SMs.

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/page_copy.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarps = kPageCopyThreads / 32;
constexpr int kUnroll = 8;                     // 16-byte words in flight per lane
constexpr int64_t kChunkWords = 32 * kUnroll;  // 4 KB per warp and chunk

struct GatherArgs {
  const uint4* src0;
  const uint4* src1;
  uint4* dst0;
  uint4* dst1;
  int64_t page_words;        // 16-byte words per page
  int64_t src_stride_words;  // between consecutive pages of src
  int64_t dst_stride_words;
  const int32_t* src_pages;     // [max_pages]
  const int32_t* dst_pages;     // [max_pages]
  const int32_t* count_device;  // [1] or null
  int32_t count_host;
  int32_t max_pages;
  int32_t num_arrays;  // 1 or 2
  int32_t chunks_per_page;
  int32_t src_capacity;  // <= 0: unchecked
  int32_t dst_capacity;
  int32_t* error_flag;  // set to 1 on a bad count or index; may be null
};

__device__ __forceinline__ void flag_error(int32_t* flag) {
  if (flag != nullptr) *reinterpret_cast<volatile int32_t*>(flag) = 1;
}

__global__ void __launch_bounds__(kPageCopyThreads) page_copy_kernel(const GatherArgs a) {
  const int32_t count = a.count_device != nullptr ? *a.count_device : a.count_host;
  if (count < 0 || count > a.max_pages) {
    if (blockIdx.x == 0 && threadIdx.x == 0) flag_error(a.error_flag);
    return;
  }
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t units = static_cast<int64_t>(count) * a.num_arrays * a.chunks_per_page;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t u = first; u < units; u += step) {
    const int64_t item = u / a.chunks_per_page;  // (page, array)
    const int64_t chunk = u - item * a.chunks_per_page;
    const int64_t page = a.num_arrays == 1 ? item : item >> 1;
    const bool second = a.num_arrays != 1 && (item & 1) != 0;
    const int32_t sp = a.src_pages[page];
    const int32_t dp = a.dst_pages[page];
    if (sp < 0 || dp < 0 || (a.src_capacity > 0 && sp >= a.src_capacity) ||
        (a.dst_capacity > 0 && dp >= a.dst_capacity)) {
      if (lane == 0 && chunk == 0) flag_error(a.error_flag);
      continue;
    }
    const int64_t offset = chunk * kChunkWords;
    const uint4* src = (second ? a.src1 : a.src0) + sp * a.src_stride_words + offset;
    uint4* dst = (second ? a.dst1 : a.dst0) + dp * a.dst_stride_words + offset;
    const int64_t left = a.page_words - offset;  // > 0
    uint4 r[kUnroll];
    if (left >= kChunkWords) {
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) r[k] = __ldcs(src + k * 32 + lane);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) dst[k * 32 + lane] = r[k];
    } else {
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (k * 32 + lane < left) r[k] = __ldcs(src + k * 32 + lane);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (k * 32 + lane < left) dst[k * 32 + lane] = r[k];
      }
    }
  }
}

Status check_params(const PageCopyParams& p) {
  if (p.num_arrays < 1 || p.num_arrays > kMaxPageArrays) {
    return invalid_argument("page_copy: num_arrays {} outside [1, {}]", p.num_arrays,
                            kMaxPageArrays);
  }
  if (p.page_bytes <= 0 || p.page_bytes % 16 != 0 || p.src_stride_bytes % 16 != 0 ||
      p.dst_stride_bytes % 16 != 0 || p.src_stride_bytes < p.page_bytes ||
      p.dst_stride_bytes < p.page_bytes) {
    return invalid_argument(
        "page_copy: the gather kernel needs page_bytes ({}) > 0 and strides ({}, {}) >= it, all "
        "multiples of 16",
        p.page_bytes, p.src_stride_bytes, p.dst_stride_bytes);
  }
  if (p.max_pages < 0) return invalid_argument("page_copy: max_pages {} < 0", p.max_pages);
  if (p.num_pages_device == nullptr && (p.num_pages < 0 || p.num_pages > p.max_pages)) {
    return invalid_argument("page_copy: {} pages outside [0, max_pages = {}]", p.num_pages,
                            p.max_pages);
  }
  return {};
}

}  // namespace

int page_copy_gather_blocks(const PageCopyParams& p, int num_sms) {
  const int64_t pages = p.num_pages_device != nullptr ? p.max_pages : p.num_pages;
  if (pages <= 0 || p.page_bytes <= 0) return 0;
  const int64_t chunks = (p.page_bytes / 16 + kChunkWords - 1) / kChunkWords;
  const int64_t units = pages * std::max(p.num_arrays, 1) * chunks;
  const int sms = p.max_sms > 0 ? std::min(p.max_sms, num_sms) : num_sms;
  return static_cast<int>(std::min<int64_t>(std::max(sms, 1), (units + kWarps - 1) / kWarps));
}

Status page_copy_gather(const PageCopyParams& p, int num_sms, int32_t* error_flag,
                        cudaStream_t stream) {
  LS_RETURN_IF_ERROR(check_params(p));
  const int blocks = page_copy_gather_blocks(p, num_sms);
  if (blocks == 0) return {};
  if (p.src_pages == nullptr || p.dst_pages == nullptr) {
    return invalid_argument("page_copy: index lists missing");
  }
  for (int a = 0; a < p.num_arrays; ++a) {
    if (p.src[a] == nullptr || p.dst[a] == nullptr) {
      return invalid_argument("page_copy: array {} has no source or destination", a);
    }
    if (!aligned16(p.src[a]) || !aligned16(p.dst[a])) {
      return invalid_argument("page_copy: array {} is not 16-byte aligned", a);
    }
  }
  const int64_t page_words = p.page_bytes / 16;
  GatherArgs a{};
  a.src0 = static_cast<const uint4*>(p.src[0]);
  a.dst0 = static_cast<uint4*>(p.dst[0]);
  a.src1 = p.num_arrays > 1 ? static_cast<const uint4*>(p.src[1]) : a.src0;
  a.dst1 = p.num_arrays > 1 ? static_cast<uint4*>(p.dst[1]) : a.dst0;
  a.page_words = page_words;
  a.src_stride_words = p.src_stride_bytes / 16;
  a.dst_stride_words = p.dst_stride_bytes / 16;
  a.src_pages = p.src_pages;
  a.dst_pages = p.dst_pages;
  a.count_device = p.num_pages_device;
  a.count_host = p.num_pages;
  a.max_pages = p.max_pages;
  a.num_arrays = p.num_arrays;
  a.chunks_per_page = static_cast<int32_t>((page_words + kChunkWords - 1) / kChunkWords);
  a.src_capacity = p.src_capacity_pages;
  a.dst_capacity = p.dst_capacity_pages;
  a.error_flag = error_flag;
  page_copy_kernel<<<static_cast<unsigned>(blocks), kPageCopyThreads, 0, stream>>>(a);
  return launch_status("page_copy");
}

}  // namespace ls::kernels::cuda
