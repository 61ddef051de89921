#include "kv/kv_manager.h"

#include <algorithm>
#include <cassert>

namespace ls {

KvManager::KvManager(KvGeometry geometry, int32_t num_retrieval_blocks,
                     int32_t num_streaming_blocks, int32_t max_seqs)
    : geometry_(std::move(geometry)),
      retrieval_(geometry_.roles.num_retrieval() > 0 ? num_retrieval_blocks : 0),
      streaming_(geometry_.roles.num_streaming() > 0 ? num_streaming_blocks : 0),
      seqs_(static_cast<size_t>(max_seqs)) {}

int32_t KvManager::max_retrieval_pages_per_seq() const {
  return geometry_.roles.num_retrieval() > 0 ? retrieval_.num_blocks() : 0;
}

Result<int32_t> KvManager::add_sequence() {
  for (size_t s = 0; s < seqs_.size(); ++s) {
    SequenceKv& seq = seqs_[s];
    if (seq.active) continue;
    seq = SequenceKv{};
    seq.active = true;
    seq.prefilling = true;
    seq.admission = ++admissions_;
    seq.ring_pages = geometry_.prefill_ring_pages();
    seq.streaming.assign(static_cast<size_t>(geometry_.streaming_table_stride()), -1);
    return static_cast<int32_t>(s);
  }
  return resource_exhausted("all {} sequence slots of the KV cache are in use", seqs_.size());
}

void KvManager::remove_sequence(int32_t slot) {
  SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  if (!seq.active) return;
  // Last pages first: cached-free blocks are evicted in release order, so a cached prefix loses
  // its tail before its head (a shorter hit stays possible). Sink pages go last.
  for (auto it = seq.retrieval.rbegin(); it != seq.retrieval.rend(); ++it) retrieval_.free(*it);
  const auto sink = static_cast<size_t>(std::min<int64_t>(geometry_.num_sink_pages(),
                                                          static_cast<int64_t>(seq.streaming.size())));
  for (size_t c = seq.streaming.size(); c-- > sink;) {
    if (seq.streaming[c] >= 0) streaming_.free(seq.streaming[c]);
  }
  for (size_t c = sink; c-- > 0;) {
    if (seq.streaming[c] >= 0) streaming_.free(seq.streaming[c]);
  }
  seq = SequenceKv{};
}

int32_t KvManager::num_active() const {
  int32_t n = 0;
  for (const auto& s : seqs_) n += s.active ? 1 : 0;
  return n;
}

int32_t KvManager::ring_column(int32_t logical_page, int32_t ring_pages) const {
  const int32_t sink = geometry_.num_sink_pages();
  return logical_page < sink ? logical_page : sink + (logical_page - sink) % ring_pages;
}

namespace {
int32_t pages_for(int32_t tokens, int32_t page_tokens) {
  return (tokens + page_tokens - 1) / page_tokens;
}
}  // namespace

BlockCount KvManager::blocks_needed(int32_t slot, int32_t new_len) const {
  const SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  BlockCount count;
  const int32_t p = geometry_.page_tokens;
  const int32_t first_new_page = pages_for(seq.num_tokens, p);
  const int32_t end_page = pages_for(new_len, p);
  if (geometry_.roles.num_retrieval() > 0) {
    count.retrieval = std::max(0, end_page - static_cast<int32_t>(seq.retrieval.size()));
  }
  if (geometry_.roles.num_streaming() > 0) {
    // Each new page needs its table column filled. Sink pages have their own columns; ring
    // columns are allocated once and reused as the ring wraps, and the first ring_pages new ring
    // pages already cover every column they will touch, so later ones need nothing new.
    const int32_t sink = geometry_.num_sink_pages();
    for (int32_t j = first_new_page; j < std::min(end_page, sink); ++j) {
      if (seq.streaming[static_cast<size_t>(j)] < 0) ++count.streaming;
    }
    const int32_t ring_begin = std::max(first_new_page, sink);
    const int32_t ring_end = std::min(end_page, ring_begin + seq.ring_pages);
    for (int32_t j = ring_begin; j < ring_end; ++j) {
      const int32_t b = seq.streaming[static_cast<size_t>(ring_column(j, seq.ring_pages))];
      // With prefix caching a wrapping column takes a fresh block (the old one may be cached
      // or shared); releasing a block only this sequence holds gives one back, so only a
      // shared one costs a block.
      if (b < 0 || (caching_ && streaming_.ref_count(b) > 1)) ++count.streaming;
    }
  }
  return count;
}

BlockCount KvManager::blocks_for_new_sequence(int32_t len) const {
  BlockCount count;
  const int32_t pages = pages_for(len, geometry_.page_tokens);
  if (geometry_.roles.num_retrieval() > 0) count.retrieval = pages;
  if (geometry_.roles.num_streaming() > 0) {
    const int32_t sink = geometry_.num_sink_pages();
    count.streaming = std::min(pages, sink) +
                      std::min(std::max(0, pages - sink), geometry_.prefill_ring_pages());
  }
  return count;
}

bool KvManager::can_allocate(const BlockCount& count) const {
  return count.retrieval <= retrieval_.num_free() && count.streaming <= streaming_.num_free();
}

Status KvManager::grow(int32_t slot, int32_t new_len) {
  SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  if (!seq.active) return internal_error("grow on inactive KV slot {}", slot);
  if (new_len <= seq.num_tokens) return {};
  if (geometry_.roles.num_streaming() > 0 && seq.prefilling &&
      new_len - seq.num_tokens > geometry_.max_chunk_tokens) {
    return internal_error("prefill chunk of {} tokens exceeds the ring's chunk capacity {}",
                          new_len - seq.num_tokens, geometry_.max_chunk_tokens);
  }
  if (geometry_.roles.num_streaming() > 0 && !seq.prefilling && new_len - seq.num_tokens > 1) {
    return internal_error("a decoding sequence grows one token per step, asked for {}",
                          new_len - seq.num_tokens);
  }
  const BlockCount need = blocks_needed(slot, new_len);
  if (!can_allocate(need)) {
    return resource_exhausted("KV cache full: need {} retrieval + {} streaming blocks, {} + {} free",
                              need.retrieval, need.streaming, retrieval_.num_free(),
                              streaming_.num_free());
  }
  const int32_t p = geometry_.page_tokens;
  const int32_t end_page = pages_for(new_len, p);
  if (geometry_.roles.num_retrieval() > 0) {
    while (static_cast<int32_t>(seq.retrieval.size()) < end_page) {
      seq.retrieval.push_back(retrieval_.allocate());
    }
  }
  if (geometry_.roles.num_streaming() > 0) {
    for (int32_t j = pages_for(seq.num_tokens, p); j < end_page; ++j) {
      int32_t& col = seq.streaming[static_cast<size_t>(ring_column(j, seq.ring_pages))];
      if (col >= 0 && caching_ && j >= geometry_.num_sink_pages()) {
        // Copy-on-write without a copy: the new page overwrites the whole block, so it gets a
        // fresh one and the old page stays intact for whoever shares or may reuse it.
        streaming_.free(col);
        col = -1;
      }
      if (col < 0) col = streaming_.allocate();
    }
  }
  seq.num_tokens = new_len;
  return {};
}

void KvManager::finish_prefill(int32_t slot) {
  SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  if (!seq.active || !seq.prefilling) return;
  seq.prefilling = false;
  seq.prefill_end = seq.num_tokens;
  const int32_t new_ring = geometry_.decode_ring_pages();
  // prefill_ring_pages() >= decode_ring_pages(), so the ring only ever shrinks; the same size
  // keeps every page in its column.
  if (geometry_.roles.num_streaming() == 0 || new_ring == seq.ring_pages) return;
  // Keep the newest `new_ring` ring pages, moved to the columns the smaller ring maps them to;
  // free the blocks of older ring pages. Blocks move between columns, KV bytes do not.
  const int32_t sink = geometry_.num_sink_pages();
  std::vector<int32_t> table(seq.streaming.size(), -1);
  for (int32_t j = 0; j < sink; ++j) table[static_cast<size_t>(j)] = seq.streaming[static_cast<size_t>(j)];
  std::vector<bool> kept(seq.streaming.size(), false);
  const int32_t num_pages = pages_for(seq.num_tokens, geometry_.page_tokens);
  for (int32_t j = std::max(sink, num_pages - new_ring); j < num_pages; ++j) {
    const auto old_col = static_cast<size_t>(ring_column(j, seq.ring_pages));
    const auto new_col = static_cast<size_t>(ring_column(j, new_ring));
    table[new_col] = seq.streaming[old_col];
    kept[old_col] = true;
  }
  for (size_t c = static_cast<size_t>(sink); c < seq.streaming.size(); ++c) {
    if (seq.streaming[c] >= 0 && !kept[c]) streaming_.free(seq.streaming[c]);
  }
  seq.streaming = std::move(table);
  seq.ring_pages = new_ring;
}

int64_t KvManager::bytes_in_use() const {
  return static_cast<int64_t>(retrieval_.num_used()) * geometry_.retrieval_block_bytes() +
         static_cast<int64_t>(streaming_.num_used()) * geometry_.streaming_block_bytes();
}

int64_t KvManager::bytes_total() const {
  return static_cast<int64_t>(retrieval_.num_blocks()) * geometry_.retrieval_block_bytes() +
         static_cast<int64_t>(streaming_.num_blocks()) * geometry_.streaming_block_bytes();
}

double KvManager::usage() const {
  const int64_t total = bytes_total();
  return total > 0 ? static_cast<double>(bytes_in_use()) / static_cast<double>(total) : 0.0;
}

int64_t KvManager::sequence_streaming_bytes(int32_t slot) const {
  const SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  int64_t blocks = 0;
  for (int32_t b : seq.streaming) blocks += b >= 0 ? 1 : 0;
  return blocks * geometry_.streaming_block_bytes();
}

int64_t KvManager::sequence_bytes(int32_t slot) const {
  const SequenceKv& seq = seqs_[static_cast<size_t>(slot)];
  return static_cast<int64_t>(seq.retrieval.size()) * geometry_.retrieval_block_bytes() +
         sequence_streaming_bytes(slot);
}

}  // namespace ls
