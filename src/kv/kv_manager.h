#pragma once
// KvManager: the control plane of the two-way paged KV cache. It hands out sequence slots and
// blocks and keeps each sequence's block tables; it never touches KV memory (kv_pool.h does)
// and so runs and tests without any backend.
//
// Retrieval table of a sequence: logical page j -> block. Streaming table: sink pages first,
// then a ring whose slot for logical page j >= S is S + (j - S) % ring_pages (see
// kernels/paged_kv.h). While a sequence prefills, its ring is sized for the prefill window plus
// one chunk; finish_prefill() shrinks it to the decode window, freeing the extra blocks, so a
// streaming head holds at most num_sink_pages + prefill ring pages whatever the context length.
//
// Prefix caching (docs/prefix-caching.md), when enabled: every full page a sequence computed is
// keyed by its prefix (prefix_key.h) in both pools; blocks are shared read-only by reference
// count and, once unreferenced, stay cached-free in an LRU until the allocator needs them. A new
// sequence starts from the longest cached prefix (match_prefix + attach_prefix). No shared block
// is ever written: a hit covers whole pages short of the last token, and a ring column that
// wraps onto a page takes a fresh block instead of overwriting the cached one.

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kv/prefix_key.h"

#include "core/status.h"
#include "kv/block_allocator.h"
#include "kv/kv_geometry.h"
#include "kv/prefix_key.h"

namespace ls {

struct SequenceKv {
  bool active = false;
  bool prefilling = true;
  int32_t num_tokens = 0;           // tokens with space reserved (written or about to be)
  int32_t ring_pages = 0;           // current ring capacity in pages
  std::vector<int32_t> retrieval;   // [num logical pages] retrieval block per page
  std::vector<int32_t> streaming;   // [streaming_table_stride] block per table column, -1 = none
  std::vector<PrefixKey> keys;      // [full pages keyed so far] prefix key of each (caching on)
  int64_t admission = 0;            // distinct per add_sequence(): a row that changed hands
  int32_t prefill_end = 0;          // tokens computed by prefill (set when it moves to decode)
};

// A cached prefix found for a new sequence: its first num_tokens tokens (whole pages).
struct PrefixHit {
  int32_t num_tokens = 0;
  std::vector<PrefixKey> keys;      // [num pages]
  std::vector<int32_t> retrieval;   // [num pages] (empty without retrieval heads)
  // Streaming heads: (page, block) of the sink pages and of the pages the next chunk's window
  // reads; older pages are not needed (their ring columns start empty).
  std::vector<std::pair<int32_t, int32_t>> streaming;
};

struct BlockCount {
  int32_t retrieval = 0;
  int32_t streaming = 0;
};

class KvManager {
 public:
  KvManager(KvGeometry geometry, int32_t num_retrieval_blocks, int32_t num_streaming_blocks,
            int32_t max_seqs);

  const KvGeometry& geometry() const { return geometry_; }
  int32_t max_seqs() const { return static_cast<int32_t>(seqs_.size()); }
  int32_t max_retrieval_pages_per_seq() const;  // longest retrieval table (context / page)

  // Returns a free slot (row of the block tables), or ResourceExhausted.
  Result<int32_t> add_sequence();
  // Frees the slot and every block it holds.
  void remove_sequence(int32_t slot);
  const SequenceKv& sequence(int32_t slot) const { return seqs_[static_cast<size_t>(slot)]; }
  int32_t num_active() const;

  // Blocks that growing `slot` to `new_len` tokens would take from each pool.
  BlockCount blocks_needed(int32_t slot, int32_t new_len) const;
  // Blocks a new sequence needs for its first `len` tokens (prefilling).
  BlockCount blocks_for_new_sequence(int32_t len) const;
  bool can_allocate(const BlockCount& count) const;
  // Reserves space for tokens [num_tokens, new_len); all or nothing. A prefill chunk may not
  // exceed geometry().max_chunk_tokens when there are streaming heads (the ring is sized for it).
  Status grow(int32_t slot, int32_t new_len);
  // The sequence moves to decode: its ring shrinks to decode_ring_pages().
  void finish_prefill(int32_t slot);

  // Prefix caching: keys pages from now on, under the chain seeded by `seed`.
  // `exclusive_retrieval` (the host KV tier): a hit stops at the first retrieval block a live
  // sequence holds, so no retrieval page is shared by two sequences at once (the tier's
  // residency table gives a head-page one device-cache slot, in one request row's partition);
  // cached-free pages are taken back as usual and their homes fetched like any miss.
  // `exact_decode_len` (AttentionPolicy::exact_decode_len): pages filled by decode steps are
  // keyed while the context is at most this long, where a decode step writes the K/V a prefill
  // would; beyond it only prefill-computed pages are (decode attention over a window or a page
  // selection writes other K/V, and a hit on them would change a later request's output).
  void enable_prefix_caching(const PrefixKey& seed, bool exclusive_retrieval = false,
                             int64_t exact_decode_len = std::numeric_limits<int64_t>::max());
  bool prefix_caching() const { return caching_; }
  // The longest cached prefix of `tokens`, in whole pages, of at most max_tokens tokens (the
  // caller keeps at least the last token to compute). Changes nothing.
  PrefixHit match_prefix(const TokenView& tokens, int32_t max_tokens) const;
  // Gives the sequence just added in `slot` the hit's blocks (one more reference each).
  void attach_prefix(int32_t slot, const PrefixHit& hit);
  // Keys the full pages among the sequence's first num_computed tokens (their K/V written): all
  // of them while it prefills, and once it decodes, those within max(prefill_end,
  // exact_decode_len) tokens (a chat's next turn re-sends the answer and hits them).
  void register_pages(int32_t slot, const TokenView& tokens, int32_t num_computed);
  int32_t num_cached_free_blocks() const {
    return retrieval_.num_cached_free() + streaming_.num_cached_free();
  }
  const BlockAllocator& retrieval_allocator() const { return retrieval_; }
  const BlockAllocator& streaming_allocator() const { return streaming_; }

  int32_t num_free_retrieval_blocks() const { return retrieval_.num_free(); }
  int32_t num_free_streaming_blocks() const { return streaming_.num_free(); }
  int32_t num_retrieval_blocks() const { return retrieval_.num_blocks(); }
  int32_t num_streaming_blocks() const { return streaming_.num_blocks(); }
  int64_t bytes_in_use() const;
  int64_t bytes_total() const;
  double usage() const;  // bytes_in_use / bytes_total (0 when the cache is empty)
  // KV bytes one sequence holds (retrieval pages grow with context; streaming stay bounded).
  int64_t sequence_bytes(int32_t slot) const;
  int64_t sequence_streaming_bytes(int32_t slot) const;

 private:
  int32_t ring_column(int32_t logical_page, int32_t ring_pages) const;
  // Whether page j of the sequence still has its own ring column (or is a sink page).
  bool streaming_page_held(const SequenceKv& seq, int32_t page) const;

  KvGeometry geometry_;
  BlockAllocator retrieval_;
  BlockAllocator streaming_;
  std::vector<SequenceKv> seqs_;  // [max_seqs]
  bool caching_ = false;
  bool exclusive_retrieval_ = false;
  int64_t exact_decode_len_ = 0;
  int64_t admissions_ = 0;
  PrefixKey seed_;
};

}  // namespace ls
