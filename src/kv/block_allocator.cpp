#include "kv/block_allocator.h"

#include <cassert>

namespace ls {

BlockAllocator::BlockAllocator(int32_t num_blocks)
    : num_blocks_(num_blocks),
      refs_(static_cast<size_t>(num_blocks), 0),
      keyed_(static_cast<size_t>(num_blocks), false),
      keys_(static_cast<size_t>(num_blocks)),
      lru_pos_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockAllocator::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    forget_key(b);
  } else {
    return -1;
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockAllocator::free(int32_t block) {
  assert(block >= 0 && block < num_blocks_ && refs_[static_cast<size_t>(block)] > 0);
  const auto i = static_cast<size_t>(block);
  if (--refs_[i] > 0) return;
  if (keyed_[i]) {
    lru_pos_[i] = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockAllocator::retain(int32_t block) {
  assert(block >= 0 && block < num_blocks_);
  const auto i = static_cast<size_t>(block);
  if (refs_[i] == 0) {
    assert(keyed_[i]);  // only cached-free blocks are found again
    lru_.erase(lru_pos_[i]);
  }
  ++refs_[i];
}

void BlockAllocator::set_key(int32_t block, const PrefixKey& key) {
  const auto i = static_cast<size_t>(block);
  assert(refs_[i] > 0);
  if (keyed_[i] || index_.count(key) > 0) return;
  keyed_[i] = true;
  keys_[i] = key;
  index_.emplace(key, block);
}

int32_t BlockAllocator::lookup(const PrefixKey& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

void BlockAllocator::forget_key(int32_t block) {
  const auto i = static_cast<size_t>(block);
  if (!keyed_[i]) return;
  index_.erase(keys_[i]);
  keyed_[i] = false;
}

}  // namespace ls
