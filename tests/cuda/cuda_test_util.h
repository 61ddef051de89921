#pragma once
// Helpers shared by the GPU tests: one CudaBackend per test binary (every test skips cleanly when
// no CUDA device is present), host arrays stored in a float dtype together with the exact f32
// values they hold, device mirrors of host arrays, NaN poisoning, and error measures
// (relative L2 error and the worst element error against the reference's largest magnitude;
// NaN never passes).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ls::cuda_test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The shared backend, or null when this machine has no usable CUDA device.
inline CudaBackend* gpu() {
  static std::unique_ptr<CudaBackend> backend = []() -> std::unique_ptr<CudaBackend> {
    if (cuda_device_count() == 0) return nullptr;
    auto b = CudaBackend::create(0);
    if (!b.ok()) {
      ADD_FAILURE() << "a CUDA device exists but the backend failed: " << b.status().to_string();
      return nullptr;
    }
    return std::move(*b);
  }();
  return backend.get();
}

// The shared backend's attention options for a scope, the defaults again after it.
class ScopedAttentionOptions {
 public:
  explicit ScopedAttentionOptions(const kernels::cuda::AttentionOptions& o) {
    gpu()->set_attention_options(o);
  }
  ~ScopedAttentionOptions() { gpu()->set_attention_options({}); }
  ScopedAttentionOptions(const ScopedAttentionOptions&) = delete;
  ScopedAttentionOptions& operator=(const ScopedAttentionOptions&) = delete;
};

inline ThreadPool& cpu_pool() {
  static ThreadPool pool(2);
  return pool;
}

#define LS_REQUIRE_CUDA()                                                    \
  do {                                                                       \
    if (!::ls::cuda_test::gpu()) GTEST_SKIP() << "no CUDA device available"; \
  } while (0)

// Values stored in `dtype`, with their exact f32 meaning.
struct HostArray {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
  std::vector<float> values;

  HostArray() = default;
  HostArray(int64_t n, DType dt) { resize(n, dt); }
  void resize(int64_t n, DType dt) {
    dtype = dt;
    values.assign(static_cast<size_t>(n), 0.0f);
    bytes.assign(static_cast<size_t>(dtype_nbytes(dt, n)), 0);
  }
  int64_t size() const { return static_cast<int64_t>(values.size()); }
  // Stores v at i, rounded to the dtype; values[i] becomes the rounded value.
  void set(int64_t i, float v) {
    const int64_t sz = dtype_size(dtype);
    convert_from_f32(&v, dtype, bytes.data() + i * sz, 1);
    convert_to_f32(dtype, bytes.data() + i * sz, &values[static_cast<size_t>(i)], 1);
  }
  // Every element set to v (rounded to the dtype).
  void fill(float v) {
    const std::vector<float> src(values.size(), v);
    convert_from_f32(src.data(), dtype, bytes.data(), size());
    convert_to_f32(dtype, bytes.data(), values.data(), size());
  }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
};

inline HostArray random_array(std::mt19937& rng, int64_t n, DType dtype, float lo = -1.0f,
                              float hi = 1.0f) {
  HostArray a(n, dtype);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) a.set(i, dist(rng));
  return a;
}

// A device buffer holding a copy of some host bytes.
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(int64_t bytes) {
    auto b = gpu()->allocate(std::max<int64_t>(bytes, 16));
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (b.ok()) buf_ = std::move(*b);
    bytes_ = bytes;
  }
  static DeviceArray of(const void* host, int64_t bytes) {
    DeviceArray d(bytes);
    if (bytes > 0) gpu()->copy_bytes(d.data(), host, bytes);
    return d;
  }
  template <class T>
  static DeviceArray of(const std::vector<T>& v) {
    return of(v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
  }
  static DeviceArray of(const HostArray& a) {
    return of(a.data(), static_cast<int64_t>(a.bytes.size()));
  }
  void* data() const { return buf_.data(); }
  template <class T>
  T* as() const {
    return static_cast<T*>(buf_.data());
  }
  int64_t bytes() const { return bytes_; }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(static_cast<size_t>(bytes_));
    if (bytes_ > 0) gpu()->copy_bytes(out.data(), buf_.data(), bytes_);
    return out;
  }
  template <class T>
  std::vector<T> download_as() const {
    std::vector<T> out(static_cast<size_t>(bytes_) / sizeof(T));
    if (bytes_ > 0) gpu()->copy_bytes(out.data(), buf_.data(), bytes_);
    return out;
  }
  // Widened to f32 (the buffer holds `n` elements of `dtype`).
  std::vector<float> download_floats(DType dtype, int64_t n) const {
    const std::vector<uint8_t> raw = download();
    std::vector<float> out(static_cast<size_t>(n));
    convert_to_f32(dtype, raw.data(), out.data(), n);
    return out;
  }
  // Fills the buffer with NaN (as `n` elements of `dtype`), so unwritten outputs show.
  void poison(DType dtype, int64_t n) {
    std::vector<float> nan(static_cast<size_t>(n), kNaN);
    std::vector<uint8_t> raw(static_cast<size_t>(dtype_nbytes(dtype, n)));
    convert_from_f32(nan.data(), dtype, raw.data(), n);
    gpu()->copy_bytes(buf_.data(), raw.data(), static_cast<int64_t>(raw.size()));
  }

 private:
  Buffer buf_;
  int64_t bytes_ = 0;
};

struct ErrorStats {
  double rel_l2 = 0;   // ||got - ref|| / ||ref||
  double max_err = 0;  // max |got - ref|
  double max_ref = 0;  // max |ref|
  int64_t nan = 0;     // non-finite values in got
  int64_t worst = -1;  // index of max_err
};

template <class Ref>
ErrorStats error_stats(const std::vector<float>& got, const std::vector<Ref>& ref) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    const double r = static_cast<double>(ref[i]);
    if (!std::isfinite(got[i])) {
      ++s.nan;
      continue;
    }
    const double e = std::fabs(static_cast<double>(got[i]) - r);
    num += e * e;
    den += r * r;
    if (e > s.max_err) {
      s.max_err = e;
      s.worst = static_cast<int64_t>(i);
    }
    s.max_ref = std::max(s.max_ref, std::fabs(r));
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

// got within `rel_l2` relative L2 error of ref, every element within max_rel * max|ref|, sizes
// equal, no NaN.
template <class Ref>
::testing::AssertionResult close_to(const std::vector<float>& got, const std::vector<Ref>& ref,
                                    double rel_l2, double max_rel) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  }
  const ErrorStats s = error_stats(got, ref);
  if (s.nan > 0) return ::testing::AssertionFailure() << s.nan << " non-finite outputs";
  if (s.rel_l2 > rel_l2 || s.max_err > max_rel * std::max(s.max_ref, 1e-30)) {
    return ::testing::AssertionFailure()
           << "rel L2 " << s.rel_l2 << " (tol " << rel_l2 << "), max err " << s.max_err << " at "
           << s.worst << " got " << got[static_cast<size_t>(s.worst)] << " want "
           << ref[static_cast<size_t>(s.worst)] << " (tol " << max_rel * s.max_ref << ")";
  }
  return ::testing::AssertionSuccess();
}

// Tolerances of one rounding to the output dtype plus f32 arithmetic differences.
inline double rel_tol(DType dt) {
  return dt == DType::kBF16 ? 1e-2 : (dt == DType::kF16 ? 2e-3 : 1e-5);
}

inline std::string dtype_label(DType dt) {
  return std::string(dtype_name(dt));
}

}  // namespace ls::cuda_test
