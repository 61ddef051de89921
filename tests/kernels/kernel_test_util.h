#pragma once
// Helpers shared by the kernel tests: seeded random data stored in a given float dtype (the
// f32 values a test compares against are the rounded ones the kernel reads), NaN poisoning,
// and tolerance checks.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"

namespace ls::kernels::test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Values held in `dtype` storage, with their exact f32 meaning.
struct TypedArray {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
  std::vector<float> values;

  void resize(int64_t n, DType dt) {
    dtype = dt;
    values.assign(static_cast<size_t>(n), 0.0f);
    bytes.assign(static_cast<size_t>(dtype_nbytes(dt, n)), 0);
  }
  // Stores v at index i (rounded to the dtype); values[i] becomes the rounded value.
  void set(int64_t i, float v) {
    const int64_t sz = dtype_size(dtype);
    convert_from_f32(&v, dtype, bytes.data() + i * sz, 1);
    convert_to_f32(dtype, bytes.data() + i * sz, &values[static_cast<size_t>(i)], 1);
  }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
};

inline TypedArray random_array(std::mt19937& rng, int64_t n, DType dtype, float lo = -1.0f,
                               float hi = 1.0f) {
  TypedArray a;
  a.resize(n, dtype);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) a.set(i, dist(rng));
  return a;
}

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Fills raw storage of `dtype` with NaN (so an element the kernel forgets to write, or reads
// when it should not, shows up).
inline void poison(void* data, DType dtype, int64_t n) {
  std::vector<float> nan(static_cast<size_t>(n), kNaN);
  convert_from_f32(nan.data(), dtype, data, n);
}

inline std::vector<cpu::Isa> all_isas() {
  return cpu::available_isas();
}
inline std::string isa_label(cpu::Isa isa) {
  return std::string(cpu::isa_name(isa));
}

// |got - want| <= atol + rtol * |want| for every element, and no NaN; reports the first few
// failures with their index.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<double>& want, double atol,
                                            double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  int bad = 0;
  std::string msg;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::abs(want[i]))) {
      if (bad < 5) {
        msg += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
               std::to_string(want[i]) + ";";
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " mismatched:" << msg;
}

}  // namespace ls::kernels::test
