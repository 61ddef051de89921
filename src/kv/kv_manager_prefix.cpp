// KvManager's prefix cache (docs/prefix-caching.md): matching a new sequence's tokens against
// cached pages, giving it those pages, and keying the pages sequences compute.
#include <algorithm>
#include <vector>

#include "kv/kv_manager.h"

namespace ls {

void KvManager::enable_prefix_caching(const PrefixKey& seed, bool exclusive_retrieval,
                                      int64_t exact_decode_len) {
  caching_ = true;
  exclusive_retrieval_ = exclusive_retrieval;
  exact_decode_len_ = exact_decode_len;
  seed_ = seed;
}

bool KvManager::streaming_page_held(const SequenceKv& seq, int32_t page) const {
  if (page < geometry_.num_sink_pages()) return true;
  const int32_t last_page = (seq.num_tokens - 1) / geometry_.page_tokens;
  return last_page - page < seq.ring_pages;
}

PrefixHit KvManager::match_prefix(const TokenView& tokens, int32_t max_tokens) const {
  PrefixHit hit;
  if (!caching_) return hit;
  const int32_t p = geometry_.page_tokens;
  const int32_t max_pages = std::min(max_tokens, tokens.size()) / p;
  const bool has_r = geometry_.roles.num_retrieval() > 0;
  const bool has_s = geometry_.roles.num_streaming() > 0;
  const int32_t sink = geometry_.num_sink_pages();
  std::vector<int32_t> s_blocks;  // [pages looked up] streaming block per page, -1 = not cached
  std::vector<int32_t> page(static_cast<size_t>(p));
  PrefixKey key = seed_;
  for (int32_t j = 0; j < max_pages; ++j) {
    for (int32_t i = 0; i < p; ++i) page[static_cast<size_t>(i)] = tokens.at(j * p + i);
    key = prefix_chain(key, page);
    const int32_t r = has_r ? retrieval_.lookup(key) : -1;
    if (has_r && r < 0) break;  // retrieval heads need every page
    if (has_r && exclusive_retrieval_ && retrieval_.is_used(r)) break;
    const int32_t s = has_s ? streaming_.lookup(key) : -1;
    if (has_s && j < sink && s < 0) break;  // streaming heads need every sink page
    hit.keys.push_back(key);
    if (has_r) hit.retrieval.push_back(r);
    s_blocks.push_back(s);
  }
  auto n = static_cast<int32_t>(hit.keys.size());
  if (has_s) {
    // Streaming heads also need the pages the next chunk's first query sees in its window
    // (the attention kernels read no older ring page): the longest n whose window pages are
    // all cached. The wider of the two windows, so the decode ring is full too if the prompt
    // ends right after the hit.
    const int64_t local = std::max(geometry_.prefill_local_tokens, geometry_.decode_local_tokens);
    auto window_ok = [&](int32_t pages) {
      const int64_t first_key = std::max<int64_t>(0, int64_t{pages} * p - local + 1);
      const auto first = static_cast<int32_t>(std::max<int64_t>(sink, first_key / p));
      for (int32_t j = first; j < pages; ++j) {
        if (s_blocks[static_cast<size_t>(j)] < 0) return false;
      }
      return true;
    };
    while (n > 0 && !window_ok(n)) --n;
    if (n > 0) {
      const int64_t first_key = std::max<int64_t>(0, int64_t{n} * p - local + 1);
      const auto first = static_cast<int32_t>(std::max<int64_t>(sink, first_key / p));
      for (int32_t j = 0; j < std::min(n, sink); ++j) {
        hit.streaming.emplace_back(j, s_blocks[static_cast<size_t>(j)]);
      }
      for (int32_t j = first; j < n; ++j) hit.streaming.emplace_back(j, s_blocks[static_cast<size_t>(j)]);
    }
  }
  hit.keys.resize(static_cast<size_t>(n));
  if (has_r) hit.retrieval.resize(static_cast<size_t>(n));
  hit.num_tokens = n * p;
  return hit;
}

void KvManager::attach_prefix(int32_t slot, const PrefixHit& hit) {
  SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  if (!caching_ || !seq.active || hit.num_tokens == 0) return;
  seq.retrieval = hit.retrieval;
  for (int32_t b : seq.retrieval) retrieval_.retain(b);
  for (const auto& [page, block] : hit.streaming) {
    streaming_.retain(block);
    seq.streaming[static_cast<size_t>(ring_column(page, seq.ring_pages))] = block;
  }
  seq.keys = hit.keys;
  seq.num_tokens = hit.num_tokens;
}

void KvManager::register_pages(int32_t slot, const TokenView& tokens, int32_t num_computed) {
  SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  // Pages filled by decode steps too (a chat's next turn re-sends the answer), while decode
  // attention is what prefill computes: a decode step at context kv_len <= exact_decode_len
  // writes the K/V a prefill would, so such pages hit without changing a later request's output.
  // Past that length (a streaming window or a page selection narrower than the context) decode
  // K/V differ, and neither they nor any later page, whose K/V depend on them, are keyed; a
  // preempted sequence recomputes its outputs by prefill, and those pages are keyed then. A page
  // is keyed once its last token's K/V is written, and no step writes a full page again (a ring
  // column wrapping onto it takes a fresh block), so the keyed bytes stay as they are.
  if (!caching_ || !seq.active) return;
  const int32_t exact =
      seq.prefilling
          ? num_computed
          : std::max(seq.prefill_end,
                     static_cast<int32_t>(std::min<int64_t>(num_computed, exact_decode_len_)));
  const int32_t p = geometry_.page_tokens;
  const int32_t full = std::min({exact, seq.num_tokens, tokens.size()}) / p;
  std::vector<int32_t> page(static_cast<size_t>(p));
  for (auto j = static_cast<int32_t>(seq.keys.size()); j < full; ++j) {
    for (int32_t i = 0; i < p; ++i) page[static_cast<size_t>(i)] = tokens.at(j * p + i);
    const PrefixKey key = prefix_chain(seq.keys.empty() ? seed_ : seq.keys.back(), page);
    seq.keys.push_back(key);
    if (geometry_.roles.num_retrieval() > 0) retrieval_.set_key(seq.retrieval[static_cast<size_t>(j)], key);
    if (geometry_.roles.num_streaming() > 0 && streaming_page_held(seq, j)) {
      const int32_t b = seq.streaming[static_cast<size_t>(ring_column(j, seq.ring_pages))];
      if (b >= 0) streaming_.set_key(b, key);
    }
  }
}

}  // namespace ls
