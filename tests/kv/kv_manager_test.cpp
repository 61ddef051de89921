// KvManager: slots, block accounting and the streaming ring, checked against a shadow model of
// which logical page every block holds.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "kernels/paged_kv.h"

namespace ls {
namespace {

KvGeometry make_geometry(int32_t layers, int32_t heads, const std::vector<bool>& streaming,
                         int32_t page, int32_t sink, int32_t prefill_local, int32_t decode_local,
                         int32_t max_chunk) {
  KvGeometry g;
  g.num_layers = layers;
  g.num_kv_heads = heads;
  g.head_dim = 8;
  g.page_tokens = page;
  g.logical_page_tokens = page;
  g.roles = HeadRoles(layers, heads, streaming);
  g.sink_tokens = sink;
  g.prefill_local_tokens = prefill_local;
  g.decode_local_tokens = decode_local;
  g.max_chunk_tokens = max_chunk;
  return g;
}

// Replays growth and checks, at every length, that every key a query may see (Λ mask of the
// step's newest queries) is found through the ring mapping in a block that holds its page.
class RingChecker {
 public:
  RingChecker(KvManager& kv, int32_t slot) : kv_(kv), slot_(slot) {}

  void grow(int32_t new_len, int32_t local_tokens) {
    const SequenceKv& before = kv_.sequence(slot_);
    const int32_t old_len = before.num_tokens;
    ASSERT_TRUE(kv_.grow(slot_, new_len).ok());
    const SequenceKv& seq = kv_.sequence(slot_);
    const auto& g = kv_.geometry();
    for (int32_t t = old_len; t < new_len; ++t) {
      const int32_t page = t / g.page_tokens;
      const int32_t col =
          kernels::streaming_table_index(page, g.num_sink_pages(), seq.ring_pages);
      const int32_t block = seq.streaming[static_cast<size_t>(col)];
      ASSERT_GE(block, 0) << "token " << t;
      holds_[block] = page;
    }
    // Every query of this step must find each visible key's page.
    for (int32_t q = old_len; q < new_len; ++q) {
      for (int32_t k = 0; k <= q; ++k) {
        if (!kernels::streaming_visible(q, k, g.sink_tokens, local_tokens)) continue;
        const int32_t page = k / g.page_tokens;
        const int32_t col =
            kernels::streaming_table_index(page, g.num_sink_pages(), seq.ring_pages);
        const int32_t block = seq.streaming[static_cast<size_t>(col)];
        ASSERT_GE(block, 0);
        ASSERT_EQ(holds_[block], page)
            << "len " << new_len << " query " << q << " key " << k << " ring " << seq.ring_pages;
      }
    }
  }

  void finish_prefill() {
    kv_.finish_prefill(slot_);
    // Blocks still in the table keep their pages; freed ones are forgotten.
    std::map<int32_t, int32_t> kept;
    for (int32_t b : kv_.sequence(slot_).streaming)
      if (b >= 0) kept[b] = holds_[b];
    holds_ = kept;
  }

 private:
  KvManager& kv_;
  int32_t slot_;
  std::map<int32_t, int32_t> holds_;  // block -> logical page it holds
};

TEST(KvManager, RingMappingEveryLengthDecode) {
  // page 4, sink 6 (2 sink pages, the second half-filled with non-sink tokens), decode window 7.
  auto g = make_geometry(2, 2, {false, true, true, false}, 4, 6, 9, 7, 5);
  EXPECT_EQ(g.num_sink_pages(), 2);
  EXPECT_EQ(g.decode_ring_pages(), (7 + 3) / 4 + 1);
  KvManager kv(g, 64, 64, 2);
  auto slot = kv.add_sequence();
  ASSERT_TRUE(slot.ok());
  RingChecker check(kv, *slot);
  // Prefill 3 tokens, then decode one token at a time far past the ring size.
  check.grow(3, g.prefill_local_tokens);
  check.finish_prefill();
  for (int32_t len = 4; len <= 4 * (g.num_sink_pages() + g.decode_ring_pages()) * 4; ++len) {
    check.grow(len, g.decode_local_tokens);
    if (HasFatalFailure()) return;
  }
}

TEST(KvManager, RingMappingChunkedPrefillThenDecode) {
  for (int32_t chunk : {1, 3, 4, 5}) {
    for (int32_t prompt : {1, 7, 16, 23, 40, 61}) {
      auto g = make_geometry(1, 2, {true, false}, 4, 4, 9, 6, chunk);
      KvManager kv(g, 256, 256, 1);
      auto slot = kv.add_sequence();
      ASSERT_TRUE(slot.ok());
      RingChecker check(kv, *slot);
      for (int32_t len = 0; len < prompt;) {
        len = std::min(prompt, len + chunk);
        check.grow(len, g.prefill_local_tokens);
        if (HasFatalFailure()) return;
      }
      check.finish_prefill();
      EXPECT_EQ(kv.sequence(*slot).ring_pages, g.decode_ring_pages());
      for (int32_t len = prompt + 1; len <= prompt + 50; ++len) {
        check.grow(len, g.decode_local_tokens);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(KvManager, RingMappingWhenTheDecodeWindowIsWiderThanThePrefillWindow) {
  // A decode window wider than the prefill window must not remap pages already written.
  for (int32_t prompt : {1, 5, 9, 22}) {
    auto g = make_geometry(1, 1, {true}, 4, 4, 2, 16, 1);
    EXPECT_GE(g.prefill_ring_pages(), g.decode_ring_pages());
    KvManager kv(g, 0, 64, 1);
    auto slot = kv.add_sequence();
    ASSERT_TRUE(slot.ok());
    RingChecker check(kv, *slot);
    for (int32_t len = 1; len <= prompt; ++len) check.grow(len, g.prefill_local_tokens);
    check.finish_prefill();
    for (int32_t len = prompt + 1; len <= prompt + 60; ++len) {
      check.grow(len, g.decode_local_tokens);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(KvManager, StreamingBytesDoNotGrowWithContext) {
  auto g = make_geometry(2, 2, {false, true, true, false}, 16, 32, 128, 64, 64);
  KvManager kv(g, 1024, 64, 1);
  auto slot = kv.add_sequence();
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(kv.grow(*slot, 64).ok());
  kv.finish_prefill(*slot);
  const int64_t bound =
      static_cast<int64_t>(g.num_sink_pages() + g.decode_ring_pages()) * g.streaming_block_bytes();
  int64_t prev_retrieval = 0;
  for (int32_t len = 65; len <= 4000; ++len) {
    ASSERT_TRUE(kv.grow(*slot, len).ok());
    EXPECT_LE(kv.sequence_streaming_bytes(*slot), bound);
    const int64_t retrieval = kv.sequence_bytes(*slot) - kv.sequence_streaming_bytes(*slot);
    EXPECT_GE(retrieval, prev_retrieval);
    prev_retrieval = retrieval;
  }
  EXPECT_EQ(kv.sequence_streaming_bytes(*slot), bound);
  EXPECT_EQ(prev_retrieval, static_cast<int64_t>((4000 + 15) / 16) * g.retrieval_block_bytes());
}

TEST(KvManager, AllOrNothingAndRelease) {
  auto g = make_geometry(1, 2, {false, true}, 4, 4, 8, 4, 64);
  KvManager kv(g, 5, 8, 3);
  auto a = kv.add_sequence();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(kv.blocks_for_new_sequence(20).retrieval, 5);
  EXPECT_EQ(kv.blocks_for_new_sequence(20).streaming, 5);  // 1 sink + 4 ring pages
  ASSERT_TRUE(kv.grow(*a, 20).ok());  // 5 retrieval pages: the pool is now empty
  EXPECT_EQ(kv.num_free_retrieval_blocks(), 0);
  auto b = kv.add_sequence();
  ASSERT_TRUE(b.ok());
  const int32_t free_streaming = kv.num_free_streaming_blocks();
  Status st = kv.grow(*b, 2);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.sequence(*b).num_tokens, 0);
  EXPECT_EQ(kv.num_free_streaming_blocks(), free_streaming);  // nothing taken on failure
  kv.remove_sequence(*a);
  EXPECT_EQ(kv.num_free_retrieval_blocks(), 5);
  EXPECT_EQ(kv.num_free_streaming_blocks(), 8);
  EXPECT_TRUE(kv.grow(*b, 2).ok());
  EXPECT_GT(kv.usage(), 0.0);
  kv.remove_sequence(*b);
  EXPECT_EQ(kv.bytes_in_use(), 0);
}

TEST(KvManager, SlotsRunOut) {
  auto g = make_geometry(1, 1, {false}, 4, 0, 8, 4, 64);
  KvManager kv(g, 8, 0, 2);
  ASSERT_TRUE(kv.add_sequence().ok());
  ASSERT_TRUE(kv.add_sequence().ok());
  EXPECT_EQ(kv.add_sequence().status().code(), StatusCode::kResourceExhausted);
}

TEST(KvManager, FinishPrefillFreesRingBlocks) {
  auto g = make_geometry(1, 1, {true}, 4, 4, 32, 4, 16);
  KvManager kv(g, 0, 64, 1);
  auto slot = kv.add_sequence();
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(kv.grow(*slot, 16).ok());
  ASSERT_TRUE(kv.grow(*slot, 32).ok());
  ASSERT_TRUE(kv.grow(*slot, 48).ok());
  const int32_t used_prefill = kv.num_streaming_blocks() - kv.num_free_streaming_blocks();
  EXPECT_EQ(used_prefill, 12);  // 1 sink page + 11 ring pages (ring of 13 not yet full)
  kv.finish_prefill(*slot);
  const int32_t used_decode = kv.num_streaming_blocks() - kv.num_free_streaming_blocks();
  EXPECT_EQ(used_decode, g.num_sink_pages() + g.decode_ring_pages());
}

}  // namespace
}  // namespace ls
