// KvManager's prefix cache against a shadow model: random workloads of sequences that share
// prefixes (hits, partial hits, decode, preemption as remove-and-readmit, aborts) on a mixed
// retrieval / streaming geometry. The shadow records what every block holds (which page of which
// token prefix, up to which token) as sequences write their tokens; after every operation each
// sequence must read, through its tables, exactly its own tokens on every page its queries can
// see (so no shared block was ever written by another sequence), every block's reference count
// must equal the references the sequences' tables hold, and at the end the pools must be back
// to their initial state.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/paged_kv.h"
#include "kv/kv_manager.h"

namespace ls {
namespace {

KvGeometry geometry(const std::vector<bool>& streaming) {
  KvGeometry g;
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.head_dim = 8;
  g.page_tokens = 4;
  g.logical_page_tokens = 4;
  g.roles = HeadRoles(2, 2, streaming);
  g.sink_tokens = 4;
  g.prefill_local_tokens = 10;
  g.decode_local_tokens = 6;
  g.max_chunk_tokens = 8;
  return g;
}

// What a block holds: page `page` of the sequence whose tokens start with `tokens` (the tokens
// written so far, up to the end of that page).
struct Content {
  int32_t page = -1;
  std::vector<int32_t> tokens;
};

struct Shadow {
  std::vector<int32_t> tokens;  // all tokens the sequence will have (prompt + outputs so far)
  int32_t len = 0;              // tokens it has now (outputs appear one per decode)
  int32_t computed = 0;
  int32_t slot = -1;
  bool prefilling = true;
};

class Harness {
 public:
  explicit Harness(const std::vector<bool>& streaming, int32_t r_blocks, int32_t s_blocks)
      : kv_(geometry(streaming), r_blocks, s_blocks, 4),
        r_(static_cast<size_t>(kv_.num_retrieval_blocks())),
        s_(static_cast<size_t>(kv_.num_streaming_blocks())) {
    kv_.enable_prefix_caching(prefix_seed("shadow"));
  }

  KvManager& kv() { return kv_; }
  int64_t hits = 0;
  int64_t shared_reads = 0;  // pages read through a block another live sequence also holds

  TokenView view(const Shadow& s) const {
    return {std::span<const int32_t>(s.tokens.data(), static_cast<size_t>(s.len)), {}};
  }

  // Admits `s` (not running): match, attach, first chunk. False when it does not fit.
  bool admit(Shadow& s, int32_t chunk) {
    auto slot = kv_.add_sequence();
    if (!slot.ok()) return false;
    const PrefixHit hit = kv_.match_prefix(view(s), s.len - 1);
    EXPECT_EQ(hit.num_tokens % kv_.geometry().page_tokens, 0);
    EXPECT_LT(hit.num_tokens, s.len);
    kv_.attach_prefix(*slot, hit);
    s.slot = *slot;
    s.computed = hit.num_tokens;
    s.prefilling = true;
    hits += hit.num_tokens;
    check_reads(s, s.computed, s.computed);  // the hit's pages hold exactly our tokens
    if (!step(s, chunk)) {
      kv_.remove_sequence(s.slot);
      s.slot = -1;
      s.computed = 0;
      return false;
    }
    return true;
  }

  // One prefill chunk or decode token; false (nothing changed) when the blocks do not fit.
  bool step(Shadow& s, int32_t chunk) {
    const int32_t n = s.prefilling ? std::min(chunk, s.len - s.computed) : 1;
    const int32_t new_len = s.computed + n;
    if (!kv_.can_allocate(kv_.blocks_needed(s.slot, new_len))) return false;
    EXPECT_TRUE(kv_.grow(s.slot, new_len).ok());
    write(s, s.computed, new_len);
    check_reads(s, s.computed, new_len);
    s.computed = new_len;
    kv_.register_pages(s.slot, view(s), s.computed);
    if (s.prefilling && s.computed == s.len) {
      kv_.finish_prefill(s.slot);
      s.prefilling = false;
    }
    return true;
  }

  void remove(Shadow& s) {
    kv_.remove_sequence(s.slot);
    s.slot = -1;
    s.computed = 0;
  }

  // Every block's reference count equals the table entries naming it.
  void check_refs(const std::vector<Shadow*>& live) {
    std::vector<int32_t> r(r_.size(), 0), st(s_.size(), 0);
    for (const Shadow* s : live) {
      const SequenceKv& seq = kv_.sequence(s->slot);
      for (int32_t b : seq.retrieval) ++r[static_cast<size_t>(b)];
      for (int32_t b : seq.streaming)
        if (b >= 0) ++st[static_cast<size_t>(b)];
    }
    for (size_t b = 0; b < r.size(); ++b) {
      ASSERT_EQ(kv_.retrieval_allocator().ref_count(static_cast<int32_t>(b)), r[b]) << "r" << b;
    }
    for (size_t b = 0; b < st.size(); ++b) {
      ASSERT_EQ(kv_.streaming_allocator().ref_count(static_cast<int32_t>(b)), st[b]) << "s" << b;
    }
  }

 private:
  void write(const Shadow& s, int32_t begin, int32_t end) {
    const SequenceKv& seq = kv_.sequence(s.slot);
    const KvGeometry& g = kv_.geometry();
    for (int32_t t = begin; t < end; ++t) {
      const int32_t page = t / g.page_tokens;
      Content c{page, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + t + 1)};
      if (g.roles.num_retrieval() > 0) {
        const int32_t b = seq.retrieval[static_cast<size_t>(page)];
        ASSERT_EQ(kv_.retrieval_allocator().ref_count(b), 1) << "write into a shared block";
        r_[static_cast<size_t>(b)] = c;
      }
      if (g.roles.num_streaming() > 0) {
        const int32_t col = kernels::streaming_table_index(page, g.num_sink_pages(), seq.ring_pages);
        const int32_t b = seq.streaming[static_cast<size_t>(col)];
        ASSERT_GE(b, 0);
        ASSERT_EQ(kv_.streaming_allocator().ref_count(b), 1) << "write into a shared block";
        s_[static_cast<size_t>(b)] = c;
      }
    }
  }

  // Queries [q_begin, q_end) (or, when empty, the next query at q_end) find every key they can
  // see in a block that holds that page of this sequence's tokens.
  void check_reads(const Shadow& s, int32_t q_begin, int32_t q_end) {
    const SequenceKv& seq = kv_.sequence(s.slot);
    const KvGeometry& g = kv_.geometry();
    const int32_t p = g.page_tokens;
    const int32_t local = s.prefilling ? g.prefill_local_tokens : g.decode_local_tokens;
    auto expect = [&](const std::vector<Content>& pool, int32_t b, int32_t k, int32_t written) {
      ASSERT_GE(b, 0) << "key " << k;
      const Content& c = pool[static_cast<size_t>(b)];
      ASSERT_EQ(c.page, k / p) << "key " << k;
      ASSERT_GE(static_cast<int32_t>(c.tokens.size()), std::min(written, (k / p + 1) * p));
      ASSERT_TRUE(std::equal(c.tokens.begin(), c.tokens.begin() + k + 1, s.tokens.begin()))
          << "key " << k << " holds another prefix";
    };
    const int32_t first_q = q_begin < q_end ? q_begin : q_end;
    const int32_t last_q = q_begin < q_end ? q_end - 1 : q_end;
    const int32_t written = q_begin < q_end ? q_end : q_begin;
    for (int32_t q = first_q; q <= last_q; ++q) {
      for (int32_t k = 0; k <= std::min(q, written - 1); ++k) {
        const int32_t page = k / p;
        if (g.roles.num_retrieval() > 0) {
          const int32_t b = seq.retrieval[static_cast<size_t>(page)];
          expect(r_, b, k, written);
          if (kv_.retrieval_allocator().ref_count(b) > 1) ++shared_reads;
        }
        if (g.roles.num_streaming() > 0 && kernels::streaming_visible(q, k, g.sink_tokens, local)) {
          const int32_t col = kernels::streaming_table_index(page, g.num_sink_pages(), seq.ring_pages);
          expect(s_, seq.streaming[static_cast<size_t>(col)], k, written);
        }
      }
    }
  }

  KvManager kv_;
  std::vector<Content> r_;  // [retrieval blocks]
  std::vector<Content> s_;  // [streaming blocks]
};

class PrefixShadow : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixShadow, RandomWorkloadsReadTheirOwnTokensAndReturnThePools) {
  const std::string roles = GetParam();  // 'R' retrieval / 'S' streaming per (layer, head)
  std::vector<bool> streaming;
  for (char c : roles) streaming.push_back(c == 'S');
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    Harness h(streaming, 48, 40);
    const int32_t r_total = h.kv().num_free_retrieval_blocks();
    const int32_t s_total = h.kv().num_free_streaming_blocks();
    // A few documents; prompts are a document's prefix plus a few random tokens, over a small
    // alphabet so that generated tokens also repeat.
    std::vector<std::vector<int32_t>> docs(3);
    for (auto& d : docs)
      for (int32_t i = 0; i < 40; ++i) d.push_back(static_cast<int32_t>(rng() % 5));
    std::vector<Shadow> seqs(10);
    for (Shadow& s : seqs) {
      const auto& d = docs[rng() % docs.size()];
      const auto take = static_cast<int32_t>(rng() % 36) + 1;
      s.tokens.assign(d.begin(), d.begin() + take);
      for (int32_t i = static_cast<int32_t>(rng() % 4); i > 0; --i) s.tokens.push_back(static_cast<int32_t>(rng() % 5));
      s.len = static_cast<int32_t>(s.tokens.size());
      // Outputs it will generate (decode), known ahead so the shadow can key them.
      for (int32_t i = static_cast<int32_t>(rng() % 12); i > 0; --i) s.tokens.push_back(static_cast<int32_t>(rng() % 3));
    }
    std::vector<Shadow*> live;
    for (int32_t op = 0; op < 400; ++op) {
      const uint32_t what = rng() % 10;
      if (what < 3) {  // admit a waiting one
        std::vector<Shadow*> waiting;
        for (Shadow& s : seqs)
          if (s.slot < 0 && s.len <= static_cast<int32_t>(s.tokens.size()) && s.len > 0) waiting.push_back(&s);
        if (!waiting.empty()) {
          Shadow* s = waiting[rng() % waiting.size()];
          if (h.admit(*s, 1 + static_cast<int32_t>(rng() % 8))) live.push_back(s);
        }
      } else if (what < 8 && !live.empty()) {  // step a running one
        Shadow* s = live[rng() % live.size()];
        if (!s->prefilling && s->len == static_cast<int32_t>(s->tokens.size())) {
          h.remove(*s);  // finished: its pages stay cached
          s->len = 0;
          live.erase(std::find(live.begin(), live.end(), s));
        } else {
          if (!s->prefilling && s->computed == s->len) ++s->len;  // the sampled token
          if (!h.step(*s, 1 + static_cast<int32_t>(rng() % 8)) && !s->prefilling &&
              s->computed < s->len) {
            --s->len;
          }
        }
      } else if (!live.empty()) {  // preempt (readmitted later with its tokens) or abort
        Shadow* s = live[rng() % live.size()];
        h.remove(*s);
        if (what == 9) s->len = 0;  // aborted
        live.erase(std::find(live.begin(), live.end(), s));
      }
      if (::testing::Test::HasFatalFailure()) return;
      h.check_refs(live);
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (Shadow* s : live) h.remove(*s);
    EXPECT_EQ(h.kv().num_free_retrieval_blocks(), r_total);
    EXPECT_EQ(h.kv().num_free_streaming_blocks(), s_total);
    EXPECT_EQ(h.kv().bytes_in_use(), 0);
    EXPECT_EQ(h.kv().num_active(), 0);
    h.check_refs({});
    EXPECT_GT(h.hits, 0) << "seed " << seed << ": the workload never hit the cache";
  }
}

INSTANTIATE_TEST_SUITE_P(Roles, PrefixShadow, ::testing::Values("RRRR", "SSSS", "RSSR"));

// Caching off: nothing is keyed, a finished sequence's blocks go straight back, and no prefix
// ever matches.
TEST(PrefixCache, OffMatchesNothing) {
  KvManager kv(geometry({false, true, false, true}), 16, 16, 2);
  auto slot = kv.add_sequence();
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(kv.grow(*slot, 8).ok());
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  kv.register_pages(*slot, {tokens, {}}, 8);
  kv.remove_sequence(*slot);
  EXPECT_EQ(kv.match_prefix({tokens, {}}, 8).num_tokens, 0);
  EXPECT_EQ(kv.num_cached_free_blocks(), 0);
}

// A full page hit, the last token kept back, and the LRU: cached-free blocks count as free and
// are evicted oldest first, tail pages before head pages.
TEST(PrefixCache, HitsWholePagesAndEvictsTailsFirst) {
  KvManager kv(geometry({false, false, false, false}), 4, 0, 2);
  kv.enable_prefix_caching(prefix_seed("t"));
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto slot = kv.add_sequence();
  ASSERT_TRUE(kv.grow(*slot, 12).ok());
  kv.register_pages(*slot, {a, {}}, 12);
  kv.remove_sequence(*slot);
  EXPECT_EQ(kv.num_free_retrieval_blocks(), 4);
  EXPECT_EQ(kv.num_cached_free_blocks(), 3);
  // The same 12 tokens: two pages (the third holds the last token, which must be computed).
  EXPECT_EQ(kv.match_prefix({a, {}}, 11).num_tokens, 8);
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 0, 9};
  EXPECT_EQ(kv.match_prefix({b, {}}, 8).num_tokens, 4);
  // Two blocks taken: the free one, then the oldest cached-free block, the tail (page 2).
  auto s2 = kv.add_sequence();
  ASSERT_TRUE(kv.grow(*s2, 8).ok());
  EXPECT_EQ(kv.match_prefix({a, {}}, 11).num_tokens, 8);
  kv.remove_sequence(*s2);
  auto s3 = kv.add_sequence();
  ASSERT_TRUE(kv.grow(*s3, 12).ok());  // two free blocks, then page 1 is evicted...
  EXPECT_EQ(kv.match_prefix({a, {}}, 11).num_tokens, 4);  // ...so page 0 still hits
  kv.remove_sequence(*s3);
}

// Pages filled by decode steps are keyed while the context is within the exact decode length
// (where decode attends what prefill would), and never past it; pages prefill computed are
// keyed whatever their length, also after a preemption recomputes decoded tokens by prefill.
TEST(PrefixCache, DecodePagesKeyedWithinTheExactDecodeLength) {
  KvManager kv(geometry({false, false, false, false}), 16, 0, 2);
  kv.enable_prefix_caching(prefix_seed("t"), false, /*exact_decode_len=*/14);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
  std::vector<int32_t> out;
  auto slot = kv.add_sequence();
  ASSERT_TRUE(kv.grow(*slot, 6).ok());
  kv.register_pages(*slot, {prompt, out}, 6);
  kv.finish_prefill(*slot);
  for (int32_t t = 6; t < 24; ++t) {  // decode: the token at position t is written at step t
    out.push_back(100 + t);
    ASSERT_TRUE(kv.grow(*slot, t + 1).ok());
    kv.register_pages(*slot, {prompt, out}, t + 1);
  }
  // Context up to 14: pages [0, 12) keyed (page 3, [12, 16), got its last token at context 16).
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out.begin(), out.end());
  EXPECT_EQ(kv.match_prefix({all, {}}, 23).num_tokens, 12);
  kv.remove_sequence(*slot);
  EXPECT_EQ(kv.match_prefix({all, {}}, 23).num_tokens, 12);

  // A long prompt (prefill past the exact length) keys its own pages, none of its decode's.
  std::vector<int32_t> long_prompt(18, 7);
  std::vector<int32_t> long_out;
  auto s2 = kv.add_sequence();
  ASSERT_TRUE(kv.grow(*s2, 8).ok());
  kv.register_pages(*s2, {long_prompt, long_out}, 8);
  ASSERT_TRUE(kv.grow(*s2, 16).ok());
  kv.register_pages(*s2, {long_prompt, long_out}, 16);
  ASSERT_TRUE(kv.grow(*s2, 18).ok());
  kv.register_pages(*s2, {long_prompt, long_out}, 18);
  kv.finish_prefill(*s2);
  for (int32_t t = 18; t < 26; ++t) {
    long_out.push_back(200 + t);
    ASSERT_TRUE(kv.grow(*s2, t + 1).ok());
    kv.register_pages(*s2, {long_prompt, long_out}, t + 1);
  }
  std::vector<int32_t> long_all = long_prompt;
  long_all.insert(long_all.end(), long_out.begin(), long_out.end());
  EXPECT_EQ(kv.match_prefix({long_all, {}}, 25).num_tokens, 16);
  // Preempted and re-admitted: prefill recomputes prompt and outputs, and keys all its pages.
  kv.remove_sequence(*s2);
  auto s3 = kv.add_sequence();
  const PrefixHit hit = kv.match_prefix({long_prompt, long_out}, 25);
  kv.attach_prefix(*s3, hit);
  ASSERT_TRUE(kv.grow(*s3, 24).ok());
  kv.register_pages(*s3, {long_prompt, long_out}, 24);
  EXPECT_EQ(kv.match_prefix({long_all, {}}, 25).num_tokens, 24);
  kv.remove_sequence(*s3);
}

}  // namespace
}  // namespace ls
