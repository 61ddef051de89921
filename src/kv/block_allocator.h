#pragma once
// Block ids [0, num_blocks) with reference counts, and the prefix cache's index over them.
// Control plane only: it never touches the memory the ids stand for.
//
// A block is free (on the free stack), in use (reference count > 0), or cached-free: no longer
// referenced but keyed by the content it holds (a full page of a prefix, see prefix_key.h), kept
// in an LRU so a later request with the same prefix can take it back with retain(). allocate()
// takes a free block first and otherwise evicts the least recently released cached one, so
// cached-free blocks count as free (num_free()). Freed blocks are reused last-in first-out (warm
// in caches). Without keys (prefix caching off) this is a plain free list.

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "kv/prefix_key.h"

namespace ls {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks = 0);

  int32_t num_blocks() const { return num_blocks_; }
  // Blocks allocate() can hand out: free plus cached-free (evictable).
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_used() const { return num_blocks_ - num_free(); }
  int32_t num_cached_free() const { return static_cast<int32_t>(lru_.size()); }
  int32_t num_keyed() const { return static_cast<int32_t>(index_.size()); }
  // Returns a block with one reference, or -1 when none is free. Evicting a cached-free block
  // forgets its key.
  int32_t allocate();
  // Drops one reference; at zero the block becomes cached-free when keyed, else free.
  void free(int32_t block);
  // Adds a reference to a block in use or cached-free (which leaves the LRU).
  void retain(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  bool is_used(int32_t block) const { return refs_[static_cast<size_t>(block)] > 0; }

  // Keys a block in use by the content it holds. No-op when the block already has a key or
  // another block holds this content (the first copy stays the cached one).
  void set_key(int32_t block, const PrefixKey& key);
  // The block holding `key` (in use or cached-free), or -1.
  int32_t lookup(const PrefixKey& key) const;
  bool has_key(int32_t block) const { return keyed_[static_cast<size_t>(block)]; }

 private:
  void forget_key(int32_t block);

  int32_t num_blocks_;
  std::vector<int32_t> free_;  // stack of free (unkeyed, unreferenced) ids
  std::vector<int32_t> refs_;  // [num_blocks] reference counts; catches double frees
  std::vector<bool> keyed_;    // [num_blocks]
  std::vector<PrefixKey> keys_;  // [num_blocks] valid where keyed_
  std::list<int32_t> lru_;       // cached-free blocks, least recently released first
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // [num_blocks] valid while in lru_
  std::unordered_map<PrefixKey, int32_t, PrefixKeyHash> index_;  // key -> block
};

}  // namespace ls
