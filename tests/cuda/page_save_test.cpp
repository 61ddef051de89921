// Background page saves of the CUDA backend (Backend::save_pages): both methods (staged scatter
// and the gather kernel writing pinned host memory) against plain host copies, over saves larger
// than a staging half (several rounds through both halves), tickets completing in order, a save
// seeing the result of the work queued before it, and bad params refused.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/page_copy.h"

namespace ls::cuda_test {
namespace {

using kernels::PageCopyParams;

constexpr int64_t kPage = 16384;
constexpr int32_t kDevicePages = 96, kHostPages = 256;

std::vector<uint8_t> random_bytes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Two device arrays (K and V pages of the device pool) and their two host homes.
struct Pools {
  Buffer dev[2], host[2];
  std::vector<uint8_t> dev_img[2], host_img[2];

  explicit Pools(std::mt19937& rng) {
    for (int a = 0; a < 2; ++a) {
      auto d = gpu()->allocate(kDevicePages * kPage, MemoryTier::kDevice);
      auto h = gpu()->allocate(kHostPages * kPage, MemoryTier::kHost);
      EXPECT_TRUE(d.ok() && h.ok());
      dev[a] = std::move(*d);
      host[a] = std::move(*h);
      dev_img[a] = random_bytes(rng, kDevicePages * kPage);
      host_img[a] = random_bytes(rng, kHostPages * kPage);  // the poison
      gpu()->copy_bytes(dev[a].data(), dev_img[a].data(), kDevicePages * kPage);
      gpu()->synchronize();
      std::memcpy(host[a].data(), host_img[a].data(), host_img[a].size());
    }
  }
  PageCopyParams params(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) const {
    PageCopyParams p;
    p.num_arrays = 2;
    for (int a = 0; a < 2; ++a) {
      p.src[a] = dev[a].data();
      p.dst[a] = host[a].data();
    }
    p.page_bytes = p.src_stride_bytes = p.dst_stride_bytes = kPage;
    p.src_pages = src.data();
    p.dst_pages = dst.data();
    p.num_pages = p.max_pages = static_cast<int32_t>(src.size());
    p.src_capacity_pages = kDevicePages;
    p.dst_capacity_pages = kHostPages;
    return p;
  }
  // The host image after copying device pages src[i] -> host pages dst[i].
  void apply(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
    for (size_t i = 0; i < src.size(); ++i) {
      for (int a = 0; a < 2; ++a) {
        std::memcpy(host_img[a].data() + dst[i] * kPage, dev_img[a].data() + src[i] * kPage, kPage);
      }
    }
  }
  ::testing::AssertionResult host_matches() const {
    for (int a = 0; a < 2; ++a) {
      if (std::memcmp(host[a].data(), host_img[a].data(), host_img[a].size()) != 0) {
        return ::testing::AssertionFailure() << "host array " << a << " differs";
      }
    }
    return ::testing::AssertionSuccess();
  }
};

// `n` distinct host pages and `n` device pages (distinct too: a save never lists one twice).
void random_lists(std::mt19937& rng, int32_t n, std::vector<int32_t>& src,
                  std::vector<int32_t>& dst) {
  src.resize(kDevicePages);
  std::iota(src.begin(), src.end(), 0);
  std::shuffle(src.begin(), src.end(), rng);
  src.resize(static_cast<size_t>(n));
  dst.resize(kHostPages);
  std::iota(dst.begin(), dst.end(), 0);
  std::shuffle(dst.begin(), dst.end(), rng);
  dst.resize(static_cast<size_t>(n));
}

class CudaPageSave : public ::testing::TestWithParam<PageSaveMethod> {
 protected:
  void SetUp() override {
    if (!gpu()) GTEST_SKIP() << "no CUDA device available";
    PageSaveOptions o;
    o.method = GetParam();
    o.staging_bytes = int64_t{1} << 20;  // halves of 16 page pairs: most saves take rounds
    o.host_threads = 2;
    ASSERT_TRUE(gpu()->set_save_options(o).ok());
  }
  void TearDown() override {
    if (gpu()) {
      ASSERT_TRUE(gpu()->set_save_options(PageSaveOptions{}).ok());
    }
  }
};

TEST_P(CudaPageSave, SavesLandInTheirHostPages) {
  std::mt19937 rng(31);
  Pools pools(rng);
  for (const int32_t n : {1, 16, 17, 50, 96}) {
    SCOPED_TRACE("pages " + std::to_string(n));
    std::vector<int32_t> src, dst;
    random_lists(rng, n, src, dst);
    pools.apply(src, dst);
    auto ticket = gpu()->save_pages(pools.params(src, dst));
    ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
    src.assign(src.size(), -1);  // the lists are read during the call only
    dst.assign(dst.size(), -1);
    ASSERT_TRUE(gpu()->wait_saves(*ticket).ok());
    EXPECT_GE(gpu()->saves_completed(), *ticket);
    EXPECT_TRUE(pools.host_matches());
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

TEST_P(CudaPageSave, ManySavesCompleteInTicketOrder) {
  std::mt19937 rng(32);
  Pools pools(rng);
  std::vector<int64_t> tickets;
  for (int k = 0; k < 24; ++k) {
    std::vector<int32_t> src, dst;
    random_lists(rng, 1 + static_cast<int32_t>(rng() % 40), src, dst);
    auto t = gpu()->save_pages(pools.params(src, dst));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    if (!tickets.empty()) {
      EXPECT_GT(*t, tickets.back());
    }
    tickets.push_back(*t);
    pools.apply(src, dst);  // later saves of one host page overwrite earlier ones
    EXPECT_LE(gpu()->saves_completed(), *t);
  }
  ASSERT_TRUE(gpu()->wait_saves(tickets.back()).ok());
  EXPECT_EQ(gpu()->saves_completed(), tickets.back());
  EXPECT_TRUE(pools.host_matches());
}

// The save starts after the ops queued before it: here a rewrite of every device page.
TEST_P(CudaPageSave, ASaveSeesTheWorkQueuedBeforeIt) {
  std::mt19937 rng(33);
  Pools pools(rng);
  Buffer fresh[2];
  for (int a = 0; a < 2; ++a) {
    pools.dev_img[a] = random_bytes(rng, kDevicePages * kPage);
    auto b = gpu()->allocate(kDevicePages * kPage);
    ASSERT_TRUE(b.ok());
    fresh[a] = std::move(*b);
    gpu()->copy_bytes(fresh[a].data(), pools.dev_img[a].data(), kDevicePages * kPage);
  }
  gpu()->synchronize();
  for (int rep = 0; rep < 20; ++rep) {  // queued device work ahead of the rewrite
    for (int a = 0; a < 2; ++a) {
      gpu()->copy_bytes(pools.dev[a].data(), fresh[1 - a].data(), kDevicePages * kPage);
    }
  }
  for (int a = 0; a < 2; ++a) {
    gpu()->copy_bytes(pools.dev[a].data(), fresh[a].data(), kDevicePages * kPage);
  }
  std::vector<int32_t> src, dst;
  random_lists(rng, 64, src, dst);
  auto t = gpu()->save_pages(pools.params(src, dst));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(gpu()->wait_saves(*t).ok());
  pools.apply(src, dst);
  EXPECT_TRUE(pools.host_matches());
}

TEST_P(CudaPageSave, BadSavesAreRefused) {
  std::mt19937 rng(34);
  Pools pools(rng);
  std::vector<int32_t> src, dst;
  random_lists(rng, 8, src, dst);
  std::vector<int32_t> bad = dst;
  bad[4] = kHostPages;
  EXPECT_FALSE(gpu()->save_pages(pools.params(src, bad)).ok());
  PageCopyParams p = pools.params(src, dst);
  p.page_bytes = 24;
  EXPECT_FALSE(gpu()->save_pages(p).ok());
  p = pools.params(src, dst);
  p.num_pages_device = src.data();
  EXPECT_FALSE(gpu()->save_pages(p).ok());
  ASSERT_TRUE(gpu()->begin_capture().ok());
  EXPECT_FALSE(gpu()->save_pages(pools.params(src, dst)).ok());
  auto g = gpu()->end_capture();
  if (g.ok()) gpu()->drop_graphs();
  (void)gpu()->take_error();
  EXPECT_TRUE(pools.host_matches()) << "a refused save wrote the host pool";
  // An empty save completes; a good one still works.
  std::vector<int32_t> none;
  auto t0 = gpu()->save_pages(pools.params(none, none));
  ASSERT_TRUE(t0.ok());
  EXPECT_TRUE(gpu()->wait_saves(*t0).ok());
  auto t = gpu()->save_pages(pools.params(src, dst));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(gpu()->wait_saves(*t).ok());
  pools.apply(src, dst);
  EXPECT_TRUE(pools.host_matches());
}

INSTANTIATE_TEST_SUITE_P(Methods, CudaPageSave,
                         ::testing::Values(PageSaveMethod::kStagedScatter,
                                           PageSaveMethod::kGatherKernel),
                         [](const ::testing::TestParamInfo<PageSaveMethod>& info) {
                           return std::string(info.param == PageSaveMethod::kStagedScatter
                                                  ? "StagedScatter"
                                                  : "GatherKernel");
                         });

}  // namespace
}  // namespace ls::cuda_test
