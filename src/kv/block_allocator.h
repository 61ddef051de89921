#pragma once
// A free list of block ids [0, num_blocks). Control plane only: it never touches the memory the
// ids stand for. Freed blocks are reused last-in first-out (warm in caches).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ls {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks = 0);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks_ - num_free(); }
  // Returns a block id, or -1 when none is free.
  int32_t allocate();
  void free(int32_t block);
  bool is_used(int32_t block) const { return used_[static_cast<size_t>(block)]; }

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_;  // stack of free ids
  std::vector<bool> used_;     // [num_blocks], catches double frees
};

}  // namespace ls
