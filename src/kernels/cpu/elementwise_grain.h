#pragma once
// Internal to kernels/cpu: how finely the streaming element-wise ops split their work. A part
// below ~16K floats costs less than waking the pool's other threads, so decode-sized calls run
// on the caller alone.

#include <algorithm>
#include <cstdint>

namespace ls::kernels::cpu {

inline constexpr int64_t kMinFloatsPerPart = 16384;

// Rows per part so that each part touches at least kMinFloatsPerPart floats.
inline int64_t rows_grain(int64_t floats_per_row) {
  return std::max<int64_t>(1, kMinFloatsPerPart / std::max<int64_t>(1, floats_per_row));
}

}  // namespace ls::kernels::cpu
