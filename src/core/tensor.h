#pragma once
// TensorView: a non-owning view of a buffer (pointer, dtype, shape, strides, device).
// Owning buffers come from a Backend (backend/buffer.h); views are what kernels and layers pass.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace ls {

enum class Device : uint8_t { kCpu, kCuda };
std::string_view device_name(Device device);

inline constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};    // elements per dimension
  std::array<int64_t, kMaxDims> strides{};  // in elements; row-major contiguous by default

  TensorView() = default;
  // Contiguous row-major view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             Device device = Device::kCpu);

  int64_t numel() const;
  int64_t nbytes() const { return dtype_nbytes(dtype, numel()); }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? i + ndim : i)]; }
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // View of rows [begin, end) of dimension 0 (keeps the other dimensions).
  TensorView rows(int64_t begin, int64_t end) const;
  // Same data with a new contiguous shape (numel must match; view must be contiguous).
  TensorView reshaped(std::initializer_list<int64_t> new_shape) const;
  std::string describe() const;  // "bf16[4, 128] cpu"
};

}  // namespace ls
