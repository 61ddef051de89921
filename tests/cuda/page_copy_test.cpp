// Page transfers of the CUDA backend (kernels/page_copy.h: copy_pages; Backend::save_pages)
// against plain host copies: every method over random page sets, page sizes (powers of two and
// odd multiples of 16), strides, counts from 0 to max_pages, host and device counts, every
// direction between device memory and pinned host memory, destinations poisoned so a byte
// written outside the listed pages shows; a recorded gather replayed with new counts and lists;
// bad params rejected with the backend still working afterwards.

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

using kernels::PageCopyMethod;
using kernels::PageCopyParams;

// A byte array in device memory or in pinned host memory (allocate(kHost)).
class Arena {
 public:
  Arena(MemoryTier tier, int64_t bytes) : tier_(tier), bytes_(bytes) {
    auto b = gpu()->allocate(std::max<int64_t>(bytes, 16), tier);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (b.ok()) buf_ = std::move(*b);
  }
  void* data() const { return buf_.data(); }
  int64_t bytes() const { return bytes_; }
  void upload(const std::vector<uint8_t>& v) {
    if (tier_ == MemoryTier::kDevice) {
      gpu()->copy_bytes(buf_.data(), v.data(), static_cast<int64_t>(v.size()));
    } else {
      gpu()->synchronize();
      std::memcpy(buf_.data(), v.data(), v.size());
    }
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(static_cast<size_t>(bytes_));
    if (tier_ == MemoryTier::kDevice) {
      gpu()->copy_bytes(out.data(), buf_.data(), bytes_);
    } else {
      gpu()->synchronize();
      std::memcpy(out.data(), buf_.data(), out.size());
    }
    return out;
  }

 private:
  MemoryTier tier_;
  int64_t bytes_;
  Buffer buf_;
};

std::vector<uint8_t> random_bytes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

const char* method_name(PageCopyMethod m) {
  switch (m) {
    case PageCopyMethod::kGatherKernel:
      return "gather";
    case PageCopyMethod::kMemcpyBatch:
      return "memcpy_batch";
    case PageCopyMethod::kPerPageMemcpy:
      return "per_page";
  }
  return "?";
}

struct Case {
  MemoryTier src_tier = MemoryTier::kHost;
  MemoryTier dst_tier = MemoryTier::kDevice;
  PageCopyMethod method = PageCopyMethod::kGatherKernel;
  int32_t num_arrays = 1;
  int64_t page_bytes = 16384;
  int64_t src_stride_bytes = 16384;
  int64_t dst_stride_bytes = 16384;
  int32_t src_total = 64;  // pages in each src array
  int32_t dst_total = 48;
  int32_t count = 10;
  int32_t max_pages = 20;
  bool device_count = false;    // gather only: the count read from device memory
  bool lists_on_device = true;  // gather only; else pinned host lists
  int32_t max_sms = 16;

  std::string describe() const {
    return std::string(method_name(method)) + " " +
           (src_tier == MemoryTier::kHost ? "host" : "device") + "->" +
           (dst_tier == MemoryTier::kHost ? "host" : "device") +
           " arrays=" + std::to_string(num_arrays) + " page=" + std::to_string(page_bytes) +
           " strides=" + std::to_string(src_stride_bytes) + "," + std::to_string(dst_stride_bytes) +
           " count=" + std::to_string(count) + "/" + std::to_string(max_pages) +
           (device_count ? " device-count" : "") + " sms=" + std::to_string(max_sms);
  }
};

// Runs one case and compares every destination byte with plain host copies on a poisoned image.
void run_case(std::mt19937& rng, const Case& c) {
  SCOPED_TRACE(c.describe());
  std::vector<Arena> src, dst;
  std::vector<std::vector<uint8_t>> src_img, want;
  for (int a = 0; a < c.num_arrays; ++a) {
    src.emplace_back(c.src_tier, c.src_total * c.src_stride_bytes);
    dst.emplace_back(c.dst_tier, c.dst_total * c.dst_stride_bytes);
    src_img.push_back(random_bytes(rng, src.back().bytes()));
    want.push_back(random_bytes(rng, dst.back().bytes()));  // the poison
    src.back().upload(src_img.back());
    dst.back().upload(want.back());
  }
  // Distinct destinations (copies of one call are unordered), sources may repeat.
  std::vector<int32_t> dst_pages(static_cast<size_t>(c.dst_total));
  std::iota(dst_pages.begin(), dst_pages.end(), 0);
  std::shuffle(dst_pages.begin(), dst_pages.end(), rng);
  dst_pages.resize(static_cast<size_t>(std::max(c.max_pages, 1)), 0);
  std::vector<int32_t> src_pages(dst_pages.size());
  for (auto& s : src_pages) s = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.src_total));
  for (int32_t i = 0; i < c.count; ++i) {
    for (int a = 0; a < c.num_arrays; ++a) {
      std::memcpy(want[a].data() + dst_pages[i] * c.dst_stride_bytes,
                  src_img[a].data() + src_pages[i] * c.src_stride_bytes,
                  static_cast<size_t>(c.page_bytes));
    }
  }
  PageCopyParams p;
  p.num_arrays = c.num_arrays;
  for (int a = 0; a < c.num_arrays; ++a) {
    p.src[a] = src[a].data();
    p.dst[a] = dst[a].data();
  }
  p.page_bytes = c.page_bytes;
  p.src_stride_bytes = c.src_stride_bytes;
  p.dst_stride_bytes = c.dst_stride_bytes;
  p.src_capacity_pages = c.src_total;
  p.dst_capacity_pages = c.dst_total;
  p.max_pages = c.max_pages;
  p.method = c.method;
  p.max_sms = c.max_sms;
  const int64_t list_bytes = static_cast<int64_t>(src_pages.size() * sizeof(int32_t));
  const MemoryTier list_tier = c.method == PageCopyMethod::kGatherKernel && c.lists_on_device
                                   ? MemoryTier::kDevice
                                   : MemoryTier::kHost;
  Arena src_list(list_tier, list_bytes), dst_list(list_tier, list_bytes),
      count(MemoryTier::kDevice, 4);
  if (c.method == PageCopyMethod::kGatherKernel) {
    auto bytes_of = [](const std::vector<int32_t>& v) {
      std::vector<uint8_t> b(v.size() * sizeof(int32_t));
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    src_list.upload(bytes_of(src_pages));
    dst_list.upload(bytes_of(dst_pages));
    p.src_pages = static_cast<const int32_t*>(src_list.data());
    p.dst_pages = static_cast<const int32_t*>(dst_list.data());
  } else {
    p.src_pages = src_pages.data();
    p.dst_pages = dst_pages.data();
  }
  if (c.device_count) {
    std::vector<uint8_t> n(4);
    std::memcpy(n.data(), &c.count, 4);
    count.upload(n);
    p.num_pages_device = static_cast<const int32_t*>(count.data());
  } else {
    p.num_pages = c.count;
  }
  gpu()->copy_pages(p);
  gpu()->synchronize();
  ASSERT_TRUE(gpu()->take_error().ok());
  for (int a = 0; a < c.num_arrays; ++a) {
    const std::vector<uint8_t> got = dst[a].download();
    ASSERT_EQ(got.size(), want[a].size());
    const auto mismatch = std::mismatch(got.begin(), got.end(), want[a].begin());
    EXPECT_TRUE(mismatch.first == got.end())
        << "array " << a << ": first wrong byte at " << (mismatch.first - got.begin());
  }
}

constexpr PageCopyMethod kMethods[] = {PageCopyMethod::kGatherKernel, PageCopyMethod::kMemcpyBatch,
                                       PageCopyMethod::kPerPageMemcpy};

TEST(CudaPageCopy, EveryMethodAndDirectionMatchesPlainCopies) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(21);
  const MemoryTier tiers[] = {MemoryTier::kHost, MemoryTier::kDevice};
  // Powers of two, odd multiples of 16, a page smaller than one warp's chunk and one just over.
  const int64_t page_sizes[] = {16, 48, 4096, 4112, 16384, 24592, 32768, 65536};
  for (PageCopyMethod m : kMethods) {
    for (MemoryTier st : tiers) {
      for (MemoryTier dt : tiers) {
        // Host -> host is the gather kernel's and the plain loop's; cudaMemcpyBatchAsync is
        // only used with the device on one side.
        if (m == PageCopyMethod::kMemcpyBatch && st == MemoryTier::kHost &&
            dt == MemoryTier::kHost) {
          continue;
        }
        for (int64_t pb : page_sizes) {
          Case c;
          c.method = m;
          c.src_tier = st;
          c.dst_tier = dt;
          c.page_bytes = pb;
          c.num_arrays = 1 + static_cast<int32_t>(rng() % 2);
          // Strides: packed, or padded by a multiple of 16 (a page of a wider array).
          c.src_stride_bytes = pb + 16 * static_cast<int64_t>(rng() % 3);
          c.dst_stride_bytes = pb + 16 * static_cast<int64_t>(rng() % 3);
          c.src_total = 16 + static_cast<int32_t>(rng() % 48);
          c.dst_total = 8 + static_cast<int32_t>(rng() % 40);
          c.max_pages = c.dst_total;
          c.count = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.max_pages + 1));
          c.lists_on_device = rng() % 2 == 0;
          run_case(rng, c);
        }
      }
    }
  }
}

TEST(CudaPageCopy, CountsFromZeroToMaxPages) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(22);
  for (PageCopyMethod m : kMethods) {
    for (const int32_t count : {0, 1, 2, 31, 47, 48}) {
      Case c;
      c.method = m;
      c.dst_total = 48;
      c.max_pages = 48;
      c.count = count;
      c.num_arrays = 2;
      run_case(rng, c);
    }
  }
}

TEST(CudaPageCopy, GatherKernelReadsItsCountFromDeviceMemory) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(23);
  for (const int32_t count : {0, 1, 17, 64}) {
    for (const bool lists_on_device : {true, false}) {
      Case c;
      c.dst_total = 64;
      c.max_pages = 64;
      c.count = count;
      c.device_count = true;
      c.lists_on_device = lists_on_device;
      c.page_bytes = c.src_stride_bytes = c.dst_stride_bytes = 32768;
      run_case(rng, c);
    }
  }
}

TEST(CudaPageCopy, GatherKernelOnAnyNumberOfSms) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(24);
  for (const int32_t sms : {1, 2, 8, 16, 32, 0, -1, 100000}) {
    Case c;
    c.max_sms = sms;
    c.src_total = 256;
    c.dst_total = 200;
    c.max_pages = 200;
    c.count = 200;
    c.num_arrays = 2;
    run_case(rng, c);
  }
}

// One recorded launch, replayed with new counts, new index lists and new source data written
// into the same device buffers between replays.
TEST(CudaPageCopy, RecordedGatherReplaysWithNewCountsAndLists) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(25);
  constexpr int64_t kPage = 16384;
  constexpr int32_t kSrcPages = 96, kDstPages = 64, kMax = 64;
  Arena src(MemoryTier::kHost, kSrcPages * kPage), dst(MemoryTier::kDevice, kDstPages * kPage);
  Arena src_list(MemoryTier::kDevice, kMax * 4), dst_list(MemoryTier::kDevice, kMax * 4),
      count(MemoryTier::kDevice, 4);
  PageCopyParams p;
  p.src[0] = src.data();
  p.dst[0] = dst.data();
  p.page_bytes = p.src_stride_bytes = p.dst_stride_bytes = kPage;
  p.src_pages = static_cast<const int32_t*>(src_list.data());
  p.dst_pages = static_cast<const int32_t*>(dst_list.data());
  p.num_pages_device = static_cast<const int32_t*>(count.data());
  p.max_pages = kMax;
  p.src_capacity_pages = kSrcPages;
  p.dst_capacity_pages = kDstPages;
  auto upload_ints = [](Arena& a, const std::vector<int32_t>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    a.upload(b);
  };
  upload_ints(count, {0});
  upload_ints(src_list, std::vector<int32_t>(kMax, 0));
  upload_ints(dst_list, std::vector<int32_t>(kMax, 0));
  gpu()->copy_pages(p);  // eager once, as the engine runs a step before recording it
  gpu()->synchronize();
  ASSERT_TRUE(gpu()->take_error().ok());
  ASSERT_TRUE(gpu()->begin_capture().ok());
  gpu()->copy_pages(p);
  auto graph = gpu()->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (const int32_t n : {5, 64, 0, 33, 1}) {
    SCOPED_TRACE("count " + std::to_string(n));
    const std::vector<uint8_t> src_img = random_bytes(rng, src.bytes());
    std::vector<uint8_t> want = random_bytes(rng, dst.bytes());
    src.upload(src_img);
    dst.upload(want);
    std::vector<int32_t> d(kDstPages), s(kMax);
    std::iota(d.begin(), d.end(), 0);
    std::shuffle(d.begin(), d.end(), rng);
    d.resize(kMax);
    for (auto& x : s) x = static_cast<int32_t>(rng() % kSrcPages);
    for (int32_t i = 0; i < n; ++i) {
      std::memcpy(want.data() + d[i] * kPage, src_img.data() + s[i] * kPage, kPage);
    }
    upload_ints(src_list, s);
    upload_ints(dst_list, d);
    upload_ints(count, {n});
    ASSERT_TRUE(gpu()->replay(*graph).ok());
    EXPECT_TRUE(dst.download() == want);
    gpu()->synchronize();
    EXPECT_TRUE(gpu()->take_error().ok());
  }
  gpu()->drop_graphs();
}

// A valid copy of 8 pages host -> device, for the error tests: each checks that a bad variant
// is refused without touching the destination, and that this one still works afterwards.
struct SmallCopy {
  std::mt19937 rng{26};
  static constexpr int64_t kPage = 4096;
  Arena src{MemoryTier::kHost, 16 * kPage};
  Arena dst{MemoryTier::kDevice, 16 * kPage};
  std::vector<uint8_t> src_img, dst_img;
  std::vector<int32_t> src_pages{3, 1, 4, 15, 9, 2, 6, 5};
  std::vector<int32_t> dst_pages{0, 2, 4, 6, 8, 10, 12, 14};
  Arena src_list{MemoryTier::kDevice, 32}, dst_list{MemoryTier::kDevice, 32};

  SmallCopy() {
    src_img = random_bytes(rng, src.bytes());
    src.upload(src_img);
    reset_dst();
    std::vector<uint8_t> b(32);
    std::memcpy(b.data(), src_pages.data(), 32);
    src_list.upload(b);
    std::memcpy(b.data(), dst_pages.data(), 32);
    dst_list.upload(b);
  }
  void reset_dst() {
    dst_img = random_bytes(rng, dst.bytes());
    dst.upload(dst_img);
  }
  PageCopyParams params(PageCopyMethod m) const {
    PageCopyParams p;
    p.src[0] = src.data();
    p.dst[0] = dst.data();
    p.page_bytes = p.src_stride_bytes = p.dst_stride_bytes = kPage;
    p.method = m;
    const bool device_lists = m == PageCopyMethod::kGatherKernel;
    p.src_pages = device_lists ? static_cast<const int32_t*>(src_list.data()) : src_pages.data();
    p.dst_pages = device_lists ? static_cast<const int32_t*>(dst_list.data()) : dst_pages.data();
    p.num_pages = 8;
    p.max_pages = 8;
    p.src_capacity_pages = 16;
    p.dst_capacity_pages = 16;
    return p;
  }
  std::vector<uint8_t> expected(int32_t n) const {
    std::vector<uint8_t> want = dst_img;
    for (int32_t i = 0; i < n; ++i) {
      std::memcpy(want.data() + dst_pages[i] * kPage, src_img.data() + src_pages[i] * kPage, kPage);
    }
    return want;
  }
};

TEST(CudaPageCopy, BadParamsAreRefusedAndTheBackendKeepsWorking) {
  LS_REQUIRE_CUDA();
  SmallCopy t;
  std::vector<int32_t> bad_src = t.src_pages;
  bad_src[5] = 16;  // == capacity
  std::vector<int32_t> negative = t.dst_pages;
  negative[2] = -1;
  std::vector<uint8_t> pageable(static_cast<size_t>(t.src.bytes()));
  for (PageCopyMethod m : kMethods) {
    SCOPED_TRACE(method_name(m));
    std::vector<std::pair<std::string, PageCopyParams>> bad;
    PageCopyParams p = t.params(m);
    p.num_arrays = 0;
    bad.emplace_back("num_arrays 0", p);
    p = t.params(m);
    p.num_arrays = kernels::kMaxPageArrays + 1;
    bad.emplace_back("num_arrays too many", p);
    p = t.params(m);
    p.page_bytes = 0;
    bad.emplace_back("page_bytes 0", p);
    p = t.params(m);
    p.src_stride_bytes = p.page_bytes - 16;
    bad.emplace_back("stride < page", p);
    p = t.params(m);
    p.num_pages = 9;
    bad.emplace_back("count > max_pages", p);
    p = t.params(m);
    p.num_pages = -1;
    bad.emplace_back("negative count", p);
    p = t.params(m);
    p.src[0] = nullptr;
    bad.emplace_back("no source", p);
    if (m == PageCopyMethod::kGatherKernel) {
      p = t.params(m);
      p.page_bytes = 4088;  // not a multiple of 16
      bad.emplace_back("page_bytes % 16", p);
      p = t.params(m);
      p.src[0] = pageable.data();
      bad.emplace_back("pageable source", p);
      p = t.params(m);
      p.src_pages = t.src_pages.data();  // a std::vector: the kernel cannot read it
      bad.emplace_back("pageable index list", p);
      p = t.params(m);
      p.src[0] = static_cast<const char*>(t.src.data()) + 8;
      bad.emplace_back("misaligned source", p);
    } else {
      p = t.params(m);
      p.src_pages = bad_src.data();
      bad.emplace_back("index == capacity", p);
      p = t.params(m);
      p.dst_pages = negative.data();
      bad.emplace_back("negative index", p);
      p = t.params(m);
      p.src_pages = static_cast<const int32_t*>(t.src_list.data());  // device memory
      bad.emplace_back("device index list", p);
      p = t.params(m);
      p.num_pages_device = static_cast<const int32_t*>(t.src_list.data());
      bad.emplace_back("device count", p);
    }
    for (const auto& [what, params] : bad) {
      SCOPED_TRACE(what);
      gpu()->copy_pages(params);
      gpu()->synchronize();
      EXPECT_FALSE(gpu()->take_error().ok());
      EXPECT_TRUE(t.dst.download() == t.dst_img) << "a refused copy wrote its destination";
    }
    gpu()->copy_pages(t.params(m));
    gpu()->synchronize();
    EXPECT_TRUE(gpu()->take_error().ok());
    EXPECT_TRUE(t.dst.download() == t.expected(8));
    t.reset_dst();
  }
}

// Indices and counts the gather kernel reads from device memory are checked there: bad pages are
// skipped (the others copied), the next synchronize reports it, and later copies work.
TEST(CudaPageCopy, GatherKernelSkipsBadDeviceIndicesAndReportsThem) {
  LS_REQUIRE_CUDA();
  SmallCopy t;
  std::vector<int32_t> s = t.src_pages;
  s[3] = 1 << 30;  // far outside the array: would fault without the check
  std::vector<uint8_t> b(32);
  std::memcpy(b.data(), s.data(), 32);
  t.src_list.upload(b);
  gpu()->copy_pages(t.params(PageCopyMethod::kGatherKernel));
  gpu()->synchronize();
  EXPECT_FALSE(gpu()->take_error().ok());
  std::vector<uint8_t> want = t.expected(8);
  std::memcpy(want.data() + t.dst_pages[3] * SmallCopy::kPage,
              t.dst_img.data() + t.dst_pages[3] * SmallCopy::kPage, SmallCopy::kPage);
  EXPECT_TRUE(t.dst.download() == want) << "the other pages must be copied, the bad one not";

  // A device count above max_pages copies nothing.
  t.reset_dst();
  std::memcpy(b.data(), t.src_pages.data(), 32);
  t.src_list.upload(b);
  Arena count(MemoryTier::kDevice, 4);
  const int32_t nine = 9;
  std::vector<uint8_t> n(4);
  std::memcpy(n.data(), &nine, 4);
  count.upload(n);
  PageCopyParams p = t.params(PageCopyMethod::kGatherKernel);
  p.num_pages_device = static_cast<const int32_t*>(count.data());
  gpu()->copy_pages(p);
  gpu()->synchronize();
  EXPECT_FALSE(gpu()->take_error().ok());
  EXPECT_TRUE(t.dst.download() == t.dst_img);

  gpu()->copy_pages(t.params(PageCopyMethod::kGatherKernel));
  gpu()->synchronize();
  EXPECT_TRUE(gpu()->take_error().ok());
  EXPECT_TRUE(t.dst.download() == t.expected(8));
}

TEST(CudaHostMemory, PinnedAllocationsAreCounted) {
  LS_REQUIRE_CUDA();
  const HostMemoryStats before = gpu()->host_memory_stats();
  constexpr int64_t kBytes = int64_t{64} << 20;
  {
    auto b = gpu()->allocate(kBytes, MemoryTier::kHost);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    const HostMemoryStats during = gpu()->host_memory_stats();
    EXPECT_EQ(during.pinned_bytes + during.pageable_bytes,
              before.pinned_bytes + before.pageable_bytes + kBytes);
    EXPECT_EQ(during.pageable_bytes, before.pageable_bytes) << "64 MiB could not be pinned";
  }
  const HostMemoryStats after = gpu()->host_memory_stats();
  EXPECT_EQ(after.pinned_bytes, before.pinned_bytes);
  EXPECT_EQ(after.pageable_bytes, before.pageable_bytes);
}

// The pinning fallbacks, forced: registered memory is pinned and the gather kernel reads it
// through its device address; pageable memory is counted as such, copies from it still work
// (staged), and the gather kernel refuses it without harm.
class ScopedHostPinning {
 public:
  explicit ScopedHostPinning(CudaBackend::HostPinning p) { gpu()->set_host_pinning(p); }
  ~ScopedHostPinning() { gpu()->set_host_pinning(CudaBackend::HostPinning::kAlloc); }
  ScopedHostPinning(const ScopedHostPinning&) = delete;
  ScopedHostPinning& operator=(const ScopedHostPinning&) = delete;
};

TEST(CudaHostMemory, RegisteredFallbackIsPinnedAndServesTheGatherKernel) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(27);
  const HostMemoryStats before = gpu()->host_memory_stats();
  {
    ScopedHostPinning scoped(CudaBackend::HostPinning::kRegister);
    Case c;  // host -> device, so the kernel reads the registered source
    c.src_total = 64;
    c.count = 20;
    run_case(rng, c);
    Arena held(MemoryTier::kHost, int64_t{8} << 20);
    const HostMemoryStats during = gpu()->host_memory_stats();
    EXPECT_EQ(during.pinned_bytes, before.pinned_bytes + (int64_t{8} << 20));
    EXPECT_EQ(during.pageable_bytes, before.pageable_bytes);
  }
  EXPECT_EQ(gpu()->host_memory_stats().pinned_bytes, before.pinned_bytes);
}

TEST(CudaHostMemory, PageableFallbackIsCountedAndRefusedByTheGatherKernel) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(28);
  const HostMemoryStats before = gpu()->host_memory_stats();
  SmallCopy t;  // pinned, made before the fallback is forced
  {
    ScopedHostPinning scoped(CudaBackend::HostPinning::kNone);
    constexpr int64_t kBytes = 16 * SmallCopy::kPage;
    Arena pageable(MemoryTier::kHost, kBytes);
    const HostMemoryStats during = gpu()->host_memory_stats();
    EXPECT_EQ(during.pageable_bytes, before.pageable_bytes + kBytes);
    // Staged copies in and out still work.
    const std::vector<uint8_t> img = random_bytes(rng, kBytes);
    std::memcpy(pageable.data(), img.data(), img.size());
    Arena dev(MemoryTier::kDevice, kBytes);
    gpu()->copy_bytes(dev.data(), pageable.data(), kBytes);
    EXPECT_TRUE(dev.download() == img);
    // The gather kernel refuses to read it, and nothing is written.
    PageCopyParams p = t.params(PageCopyMethod::kGatherKernel);
    p.src[0] = pageable.data();
    gpu()->copy_pages(p);
    gpu()->synchronize();
    EXPECT_FALSE(gpu()->take_error().ok());
    EXPECT_TRUE(t.dst.download() == t.dst_img);
  }
  EXPECT_EQ(gpu()->host_memory_stats().pageable_bytes, before.pageable_bytes);
  gpu()->copy_pages(t.params(PageCopyMethod::kGatherKernel));
  gpu()->synchronize();
  EXPECT_TRUE(gpu()->take_error().ok());
  EXPECT_TRUE(t.dst.download() == t.expected(8));
}

}  // namespace
}  // namespace ls::cuda_test
