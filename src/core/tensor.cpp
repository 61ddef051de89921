#include "core/tensor.h"

#include <fmt/format.h>

#include <cassert>

namespace ls {

std::string_view device_name(Device device) {
  return device == Device::kCpu ? "cpu" : "cuda";
}

static void fill_contiguous_strides(TensorView& v) {
  int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.strides[static_cast<size_t>(i)] = s;
    s *= v.shape[static_cast<size_t>(i)];
  }
}

TensorView::TensorView(void* d, DType dt, std::initializer_list<int64_t> s, Device dev)
    : data(d), dtype(dt), device(dev), ndim(static_cast<int>(s.size())) {
  assert(s.size() <= kMaxDims);
  size_t i = 0;
  for (int64_t x : s) shape[i++] = x;
  fill_contiguous_strides(*this);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[static_cast<size_t>(i)] != 1 && strides[static_cast<size_t>(i)] != s) return false;
    s *= shape[static_cast<size_t>(i)];
  }
  return true;
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  assert(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0]);
  TensorView v = *this;
  v.shape[0] = end - begin;
  v.data = static_cast<char*>(data) + dtype_nbytes(dtype, begin * strides[0]);
  return v;
}

TensorView TensorView::reshaped(std::initializer_list<int64_t> new_shape) const {
  assert(is_contiguous());
  TensorView v(data, dtype, new_shape, device);
  assert(v.numel() == numel());
  return v;
}

std::string TensorView::describe() const {
  std::string dims;
  for (int i = 0; i < ndim; ++i) {
    if (i) dims += ", ";
    dims += std::to_string(shape[static_cast<size_t>(i)]);
  }
  return fmt::format("{}[{}] {}", dtype_name(dtype), dims, device_name(device));
}

}  // namespace ls
