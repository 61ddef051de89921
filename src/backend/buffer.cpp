#include <unistd.h>

#include <cassert>

#include "backend/backend.h"

namespace ls {

Buffer::~Buffer() {
  if (owner_ && data_) owner_->release(data_, bytes_, tier_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (owner_ && data_) owner_->release(data_, bytes_, tier_);
    owner_ = o.owner_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    tier_ = o.tier_;
    o.owner_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Result<Buffer> Backend::allocate_zeroed(int64_t bytes, MemoryTier tier) {
  LS_ASSIGN_OR_RETURN(Buffer buf, allocate(bytes, tier));
  fill_zero(buf.data(), bytes);
  return buf;
}

int64_t Backend::device_memory_total_bytes() const {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t Backend::device_memory_free_bytes() const {
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  Device dev = Device::kCpu;
  if (owner_ && tier_ == MemoryTier::kDevice) dev = owner_->device();
  TensorView v(data_, dtype, shape, dev);
  assert(v.nbytes() <= bytes_);
  return v;
}

}  // namespace ls
