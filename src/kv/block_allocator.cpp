#include "kv/block_allocator.h"

#include <cassert>

namespace ls {

BlockAllocator::BlockAllocator(int32_t num_blocks)
    : num_blocks_(num_blocks), used_(static_cast<size_t>(num_blocks), false) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  used_[static_cast<size_t>(b)] = true;
  return b;
}

void BlockAllocator::free(int32_t block) {
  assert(block >= 0 && block < num_blocks_ && used_[static_cast<size_t>(block)]);
  used_[static_cast<size_t>(block)] = false;
  free_.push_back(block);
}

}  // namespace ls
