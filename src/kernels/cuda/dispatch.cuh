#pragma once
// Internal to kernels/cuda: host-side dispatch from a runtime float DType to a device element
// type, so launchers are written once as template lambdas.

#include <string_view>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/device_types.cuh"

namespace ls::kernels::cuda {

inline bool is_float_dtype(DType dt) {
  return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16;
}

// Returns fn.template operator()<T>() (a Status) with T the device type of `dt`; an
// invalid-argument Status naming `what` for non-float dtypes.
template <class Fn>
Status dispatch_float(DType dt, std::string_view what, Fn&& fn) {
  switch (dt) {
    case DType::kF32:
      return fn.template operator()<float>();
    case DType::kBF16:
      return fn.template operator()<__nv_bfloat16>();
    case DType::kF16:
      return fn.template operator()<__half>();
    default:
      return invalid_argument("{}: dtype {} is not a float type", what, dtype_name(dt));
  }
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Blocks for a grid-stride loop over `n` items with `threads` per block: enough to fill the GPU,
// never more than the items need.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = int64_t{132} * 16;
  return static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
}

}  // namespace ls::kernels::cuda
