// Backend::copy_pages' CPU kernel against plain per-page copies: random page sets (each
// destination page at most once), page sizes, strides above the page size, one or two arrays,
// the count from the host or from "device" memory, destinations poisoned first so that a page
// written where it should not be, or not written, shows up; bad params are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/page_copy.h"

namespace ls::kernels {
namespace {

TEST(PageCopy, EqualsPlainCopiesOfRandomPageSets) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t page_bytes = 16 * (1 + static_cast<int64_t>(rng() % 64));
    const int64_t src_stride = page_bytes + 16 * static_cast<int64_t>(rng() % 3);
    const int64_t dst_stride = page_bytes + 16 * static_cast<int64_t>(rng() % 3);
    const int32_t src_pages = 1 + static_cast<int32_t>(rng() % 50);
    const int32_t dst_pages = 1 + static_cast<int32_t>(rng() % 50);
    const int32_t arrays = 1 + static_cast<int32_t>(rng() % 2);
    const int32_t count = static_cast<int32_t>(rng() % static_cast<uint32_t>(dst_pages + 1));
    std::vector<int32_t> dst_order(static_cast<size_t>(dst_pages));
    std::iota(dst_order.begin(), dst_order.end(), 0);
    std::shuffle(dst_order.begin(), dst_order.end(), rng);
    std::vector<int32_t> src_idx(static_cast<size_t>(count)), dst_idx(static_cast<size_t>(count));
    for (int32_t i = 0; i < count; ++i) {
      src_idx[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % static_cast<uint32_t>(src_pages));
      dst_idx[static_cast<size_t>(i)] = dst_order[static_cast<size_t>(i)];
    }
    std::vector<std::vector<uint8_t>> src(2), dst(2), want(2);
    PageCopyParams p;
    for (int a = 0; a < arrays; ++a) {
      src[a].resize(static_cast<size_t>(src_pages * src_stride));
      for (auto& b : src[a]) b = static_cast<uint8_t>(rng());
      dst[a].assign(static_cast<size_t>(dst_pages * dst_stride), 0xA5);  // poison
      want[a] = dst[a];
      for (int32_t i = 0; i < count; ++i) {
        std::memcpy(want[a].data() + dst_idx[static_cast<size_t>(i)] * dst_stride,
                    src[a].data() + src_idx[static_cast<size_t>(i)] * src_stride,
                    static_cast<size_t>(page_bytes));
      }
      p.src[a] = src[a].data();
      p.dst[a] = dst[a].data();
    }
    p.num_arrays = arrays;
    p.page_bytes = page_bytes;
    p.src_stride_bytes = src_stride;
    p.dst_stride_bytes = dst_stride;
    p.src_pages = src_idx.data();
    p.dst_pages = dst_idx.data();
    p.max_pages = dst_pages;
    const int32_t device_count = count;
    if (trial % 2 == 0) {
      p.num_pages_device = &device_count;
      p.num_pages = 12345;  // ignored when the device count is given
    } else {
      p.num_pages = count;
    }
    ASSERT_TRUE(cpu::page_copy(p, pool).ok()) << "trial " << trial;
    for (int a = 0; a < arrays; ++a) {
      ASSERT_EQ(dst[a], want[a]) << "trial " << trial << " array " << a;
    }
  }
}

TEST(PageCopy, RefusesBadParams) {
  ThreadPool pool(1);
  std::vector<uint8_t> src(64), dst(64);
  const int32_t idx = 0, neg = -1;
  PageCopyParams p;
  p.src[0] = src.data();
  p.dst[0] = dst.data();
  p.page_bytes = 32;
  p.src_stride_bytes = 32;
  p.dst_stride_bytes = 32;
  p.src_pages = &idx;
  p.dst_pages = &idx;
  p.num_pages = 1;
  p.max_pages = 1;
  EXPECT_TRUE(cpu::page_copy(p, pool).ok());
  PageCopyParams q = p;
  q.num_pages = 2;  // above max_pages
  EXPECT_FALSE(cpu::page_copy(q, pool).ok());
  q = p;
  q.dst_pages = &neg;
  EXPECT_FALSE(cpu::page_copy(q, pool).ok());
  q = p;
  q.src_stride_bytes = 16;  // below the page
  EXPECT_FALSE(cpu::page_copy(q, pool).ok());
  q = p;
  q.num_arrays = 3;
  EXPECT_FALSE(cpu::page_copy(q, pool).ok());
}

}  // namespace
}  // namespace ls::kernels
