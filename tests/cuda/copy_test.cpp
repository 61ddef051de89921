// Host <-> device copies of the CUDA backend keep the Backend contract whatever the driver calls
// the host memory (pageable, pinned, or "managed" under HMM): an upload from a std::vector lets
// the caller overwrite or free the vector at once, and a download returns only after every op
// queued before it has finished and the bytes are in the vector.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_test_util.h"

namespace ls::cuda_test {
namespace {

std::vector<uint32_t> pattern(size_t n, uint32_t salt) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(i) * 2654435761u + salt;
  return v;
}

TEST(CudaCopies, PageableUploadLetsTheCallerReuseItsSourceAtOnce) {
  LS_REQUIRE_CUDA();
  constexpr size_t kN = size_t{24} << 20;  // 96 MB: several staging chunks
  const std::vector<uint32_t> want = pattern(kN, 7);
  DeviceArray d(static_cast<int64_t>(kN * 4));
  {
    auto src = std::make_unique<std::vector<uint32_t>>(want);
    gpu()->copy_bytes(d.data(), src->data(), static_cast<int64_t>(kN * 4));
    std::fill(src->begin(), src->end(), 0u);  // overwritten, then freed, before any sync
  }
  EXPECT_EQ(d.download_as<uint32_t>(), want);
  EXPECT_TRUE(gpu()->take_error().ok());
}

TEST(CudaCopies, DownloadWaitsForWorkQueuedBeforeIt) {
  LS_REQUIRE_CUDA();
  constexpr size_t kN = size_t{32} << 20;  // 128 MB per device-to-device copy
  const std::vector<uint32_t> a = pattern(kN, 11);
  DeviceArray da = DeviceArray::of(a), db(static_cast<int64_t>(kN * 4));
  gpu()->fill_zero(db.data(), static_cast<int64_t>(kN * 4));
  for (int i = 0; i < 40; ++i) {  // a few ms of queued work ahead of the download
    gpu()->copy_bytes(db.data(), da.data(), static_cast<int64_t>(kN * 4));
  }
  std::vector<uint32_t> got(kN, 0u);
  gpu()->copy_bytes(got.data(), db.data(), static_cast<int64_t>(kN * 4));
  EXPECT_EQ(got, a);
  EXPECT_TRUE(gpu()->take_error().ok());
}

}  // namespace
}  // namespace ls::cuda_test
