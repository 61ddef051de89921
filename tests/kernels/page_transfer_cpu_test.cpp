// Page transfers on the CPU backend (kernels/page_copy.h through Backend::copy_pages and the
// default Backend::save_pages) against plain copies: every method is the same copy here, the
// device count is read from memory, capacities refuse out-of-range indices without touching the
// destination, and a save's ticket is finished when save_pages returns.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace ls {
namespace {

using kernels::PageCopyMethod;
using kernels::PageCopyParams;

constexpr int64_t kPage = 48;  // an odd multiple of 16: nothing assumes powers of two
constexpr int32_t kSrcPages = 20, kDstPages = 12;

struct Arrays {
  std::vector<uint8_t> src[2], dst[2];
  explicit Arrays(std::mt19937& rng) {
    for (int a = 0; a < 2; ++a) {
      src[a].resize(kSrcPages * kPage);
      dst[a].resize(kDstPages * kPage);
      for (auto& b : src[a]) b = static_cast<uint8_t>(rng());
      for (auto& b : dst[a]) b = static_cast<uint8_t>(rng());
    }
  }
  PageCopyParams params(const std::vector<int32_t>& s, const std::vector<int32_t>& d) {
    PageCopyParams p;
    p.num_arrays = 2;
    for (int a = 0; a < 2; ++a) {
      p.src[a] = src[a].data();
      p.dst[a] = dst[a].data();
    }
    p.page_bytes = p.src_stride_bytes = p.dst_stride_bytes = kPage;
    p.src_pages = s.data();
    p.dst_pages = d.data();
    p.num_pages = p.max_pages = static_cast<int32_t>(s.size());
    p.src_capacity_pages = kSrcPages;
    p.dst_capacity_pages = kDstPages;
    return p;
  }
  // dst after the plain copies.
  void expect(const std::vector<int32_t>& s, const std::vector<int32_t>& d, int32_t n,
              std::vector<uint8_t> want[2]) const {
    for (int a = 0; a < 2; ++a) {
      want[a] = dst[a];
      for (int32_t i = 0; i < n; ++i) {
        std::memcpy(want[a].data() + d[i] * kPage, src[a].data() + s[i] * kPage, kPage);
      }
    }
  }
};

TEST(CpuPageTransfers, EveryMethodCopiesTheListedPages) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(5);
  for (PageCopyMethod m : {PageCopyMethod::kGatherKernel, PageCopyMethod::kMemcpyBatch,
                           PageCopyMethod::kPerPageMemcpy}) {
    Arrays t(rng);
    std::vector<int32_t> d(kDstPages);
    std::iota(d.begin(), d.end(), 0);
    std::shuffle(d.begin(), d.end(), rng);
    std::vector<int32_t> s(d.size());
    for (auto& x : s) x = static_cast<int32_t>(rng() % kSrcPages);
    std::vector<uint8_t> want[2];
    t.expect(s, d, 7, want);
    PageCopyParams p = t.params(s, d);
    p.method = m;
    const int32_t seven = 7;
    p.num_pages_device = &seven;  // read in place of num_pages
    p.num_pages = 0;
    backend->copy_pages(p);
    backend->synchronize();
    EXPECT_TRUE(backend->take_error().ok());
    EXPECT_EQ(t.dst[0], want[0]);
    EXPECT_EQ(t.dst[1], want[1]);
  }
}

TEST(CpuPageTransfers, OutOfRangeIndicesAreRefusedUntouched) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(6);
  Arrays t(rng);
  const std::vector<uint8_t> before0 = t.dst[0];
  std::vector<int32_t> s = {1, 2, 3}, d = {0, kDstPages, 4};  // kDstPages: one past the end
  backend->copy_pages(t.params(s, d));
  EXPECT_FALSE(backend->take_error().ok());
  d[1] = 5;
  s[2] = kSrcPages + 3;
  backend->copy_pages(t.params(s, d));
  EXPECT_FALSE(backend->take_error().ok());
  EXPECT_EQ(t.dst[0], before0);
}

TEST(CpuPageTransfers, ASaveIsFinishedWhenSavePagesReturns) {
  auto backend = make_cpu_backend(2);
  std::mt19937 rng(7);
  Arrays t(rng);
  std::vector<int32_t> s = {4, 0, 19}, d = {11, 3, 7};
  std::vector<uint8_t> want[2];
  t.expect(s, d, 3, want);
  auto t1 = backend->save_pages(t.params(s, d));
  ASSERT_TRUE(t1.ok()) << t1.status().to_string();
  EXPECT_EQ(backend->saves_completed(), *t1);
  EXPECT_TRUE(backend->wait_saves(*t1).ok());
  EXPECT_EQ(t.dst[0], want[0]);
  EXPECT_EQ(t.dst[1], want[1]);
  d[0] = -1;
  EXPECT_FALSE(backend->save_pages(t.params(s, d)).ok());
  d[0] = 11;
  auto t2 = backend->save_pages(t.params(s, d));
  ASSERT_TRUE(t2.ok());
  EXPECT_GT(*t2, *t1);
}

}  // namespace
}  // namespace ls
