#include "kernels/cpu/page_copy.h"

#include <cstdint>
#include <cstring>

namespace ls::kernels::cpu {

Status page_copy(const PageCopyParams& p, ThreadPool& pool) {
  if (p.num_arrays < 1 || p.num_arrays > kMaxPageArrays) {
    return invalid_argument("page_copy: num_arrays {} outside [1, {}]", p.num_arrays,
                            kMaxPageArrays);
  }
  if (p.page_bytes <= 0 || p.src_stride_bytes < p.page_bytes || p.dst_stride_bytes < p.page_bytes) {
    return invalid_argument("page_copy: page_bytes {} must be > 0 and <= both strides ({}, {})",
                            p.page_bytes, p.src_stride_bytes, p.dst_stride_bytes);
  }
  const int32_t count = p.num_pages_device != nullptr ? *p.num_pages_device : p.num_pages;
  if (count < 0 || count > p.max_pages) {
    return invalid_argument("page_copy: {} pages outside [0, max_pages = {}]", count, p.max_pages);
  }
  if (count == 0) return {};
  if (p.src_pages == nullptr || p.dst_pages == nullptr) {
    return invalid_argument("page_copy: index lists missing");
  }
  for (int a = 0; a < p.num_arrays; ++a) {
    if (p.src[a] == nullptr || p.dst[a] == nullptr) {
      return invalid_argument("page_copy: array {} has no source or destination", a);
    }
  }
  for (int32_t i = 0; i < count; ++i) {
    if (p.src_pages[i] < 0 || p.dst_pages[i] < 0) {
      return invalid_argument("page_copy: page {} has a negative index ({} -> {})", i,
                              p.src_pages[i], p.dst_pages[i]);
    }
    if ((p.src_capacity_pages > 0 && p.src_pages[i] >= p.src_capacity_pages) ||
        (p.dst_capacity_pages > 0 && p.dst_pages[i] >= p.dst_capacity_pages)) {
      return invalid_argument("page_copy: page {} is out of range ({} -> {}; capacities {}, {})", i,
                              p.src_pages[i], p.dst_pages[i], p.src_capacity_pages,
                              p.dst_capacity_pages);
    }
  }
  pool.parallel_for(count, 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int a = 0; a < p.num_arrays; ++a) {
        const auto* src = static_cast<const char*>(p.src[a]) + p.src_pages[i] * p.src_stride_bytes;
        auto* dst = static_cast<char*>(p.dst[a]) + p.dst_pages[i] * p.dst_stride_bytes;
        std::memcpy(dst, src, static_cast<size_t>(p.page_bytes));
      }
    }
  });
  return {};
}

}  // namespace ls::kernels::cpu
