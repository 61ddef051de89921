// paged_attention against dense double-precision attention (attention_case.h) for every ISA:
// kCausal = dense causal over contiguous K/V, kStreaming = dense under the explicit Λ mask,
// kSelected = dense restricted to the selected pages' tokens (plus the pages after the last
// listed one). Batches mix decode tokens, prefill chunks that continue a context and whole
// prompts; heads of different modes share one call.

#include <gtest/gtest.h>

#include "attention_case.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_pages.h"
#include "kernels/cpu/kv_append.h"

namespace ls::kernels::test {
namespace {

using cpu::Isa;

ThreadPool& pool2() {
  static ThreadPool pool(2);
  return pool;
}

double atol_for(DType q_dtype) {
  switch (q_dtype) {
    case DType::kBF16:
      return 8e-3;  // output rounded to 8 mantissa bits
    case DType::kF16:
      return 1e-3;
    default:
      return 2e-5;
  }
}

void expect_matches(const AttentionCase& c, ThreadPool& pool, const std::string& label) {
  const std::vector<double> want = c.reference();
  for (Isa isa : all_isas()) {
    const auto got = c.run([&](const AttentionParams& p) { cpu::paged_attention(p, pool, isa); });
    const double atol = atol_for(c.config().q_dtype);
    EXPECT_TRUE(all_close(got, want, atol, atol)) << label << " isa=" << isa_label(isa);
  }
}

// Decode tokens, a chunk continuing a context, a whole prompt and a one-token context in one
// batch; the kv heads cover all three modes.
std::vector<SeqSpec> mixed_batch(std::mt19937& rng, int32_t page_tokens, int32_t num_kv_heads) {
  std::uniform_int_distribution<int32_t> len(2 * page_tokens, 6 * page_tokens);
  std::vector<SeqSpec> seqs(4);
  seqs[0].kv_len = len(rng);  // decode
  seqs[0].q_len = 1;
  seqs[1].kv_len = len(rng) + 40;  // chunk of a longer prompt
  seqs[1].q_len = 37;
  seqs[2].kv_len = 70;  // whole prompt
  seqs[2].q_len = 70;
  seqs[3].kv_len = 1;  // first decode step of an empty context
  seqs[3].q_len = 1;
  for (int i = 0; i < 4; ++i) {
    auto& s = seqs[static_cast<size_t>(i)];
    s.local_tokens = std::uniform_int_distribution<int32_t>(1, 3 * page_tokens)(rng);
    s.selected_row = i == 2 ? -1 : 3 - i;  // the prompt has no selection (treated as causal)
    const int32_t pages = (s.kv_len + page_tokens - 1) / page_tokens;
    s.selected.resize(static_cast<size_t>(num_kv_heads));
    for (auto& l : s.selected) {
      for (int32_t j = 0; j < pages; ++j) {
        if (std::bernoulli_distribution(0.4)(rng)) l.push_back(j);
      }
      // Sometimes stop before the last page, so "every page after the last listed" matters.
      while (!l.empty() && std::bernoulli_distribution(0.5)(rng)) l.pop_back();
    }
  }
  return seqs;
}

TEST(PagedAttention, MixedModesAndBatchMatchDenseReferences) {
  std::mt19937 rng(21);
  for (int32_t head_dim : {64, 96, 128}) {
    for (int32_t group : {1, 2, 4, 8}) {
      for (int32_t page_tokens : {16, 64}) {
        CaseConfig cfg;
        cfg.head_dim = head_dim;
        cfg.group = group;
        cfg.page_tokens = page_tokens;
        cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
        cfg.num_sink_pages = 1;
        cfg.sink_tokens = page_tokens / 2 + 3;
        const DType kv_dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
        cfg.kv_dtype = kv_dtypes[(head_dim / 32 + group) % 3];
        const AttentionCase c(rng, cfg, mixed_batch(rng, page_tokens, 3));
        expect_matches(c, pool2(),
                       "head_dim=" + std::to_string(head_dim) + " group=" + std::to_string(group) +
                           " page=" + std::to_string(page_tokens) +
                           " kv=" + std::string(dtype_name(cfg.kv_dtype)));
      }
    }
  }
}

TEST(PagedAttention, ReducedPrecisionQueriesAndOutputs) {
  std::mt19937 rng(22);
  for (DType q_dtype : {DType::kBF16, DType::kF16}) {
    CaseConfig cfg;
    cfg.head_dim = 128;
    cfg.group = 4;
    cfg.q_dtype = q_dtype;
    cfg.kv_dtype = DType::kBF16;
    cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal};
    const AttentionCase c(rng, cfg, mixed_batch(rng, cfg.page_tokens, 2));
    expect_matches(c, pool2(), std::string("q=") + std::string(dtype_name(q_dtype)));
  }
}

// Decode at every length from 1 to several pages past the ring (sink page + ring of 3 pages),
// for a sink shorter than its page and for a sink filling it.
TEST(PagedAttention, StreamingDecodeAtEveryLengthAcrossRingWrap) {
  std::mt19937 rng(23);
  for (int32_t sink_tokens : {5, 16}) {
    for (int32_t len = 1; len <= (1 + 3 + 4) * 16; ++len) {
      CaseConfig cfg;
      cfg.head_dim = 64;
      cfg.group = 2;
      cfg.page_tokens = 16;
      cfg.sink_tokens = sink_tokens;
      cfg.modes = {HeadMode::kStreaming};
      SeqSpec s;
      s.kv_len = len;
      s.q_len = 1;
      s.local_tokens = 32;  // ring = ceil(32 / 16) + 1 = 3 pages
      const AttentionCase c(rng, cfg, {s});
      expect_matches(c, pool2(),
                     "sink=" + std::to_string(sink_tokens) + " len=" + std::to_string(len));
    }
  }
}

// Prefill chunks of several sizes at every chunk end position, ring sized to the contract's
// minimum for the chunk, two sink pages.
TEST(PagedAttention, StreamingPrefillChunksAcrossRingWrap) {
  std::mt19937 rng(24);
  for (int32_t q_len : {2, 7, 16, 40}) {
    for (int32_t len = q_len; len <= 9 * 16; len += 3) {
      CaseConfig cfg;
      cfg.head_dim = 64;
      cfg.group = 1;
      cfg.page_tokens = 16;
      cfg.num_sink_pages = 2;
      cfg.sink_tokens = 20;
      cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal};
      SeqSpec s;
      s.kv_len = len;
      s.q_len = q_len;
      s.local_tokens = 19;
      const AttentionCase c(rng, cfg, {s});
      expect_matches(c, pool2(), "q_len=" + std::to_string(q_len) + " len=" + std::to_string(len));
    }
  }
}

// A ring smaller than the contract asks for: pages whose slot was reused are skipped (the
// reference drops exactly the keys no longer stored), never read as other positions' keys.
TEST(PagedAttention, UndersizedRingSkipsReusedSlots) {
  std::mt19937 rng(30);
  for (int32_t len = 40; len <= 120; len += 7) {
    CaseConfig cfg;
    cfg.page_tokens = 16;
    cfg.sink_tokens = 4;
    cfg.modes = {HeadMode::kStreaming};
    SeqSpec s;
    s.kv_len = len;
    s.q_len = 30;
    s.local_tokens = 40;
    s.ring_pages = 2;  // the chunk needs up to 6
    const AttentionCase c(rng, cfg, {s});
    expect_matches(c, pool2(), "len=" + std::to_string(len));
  }
}

// Long single-sequence decode: too few items for the pool, so page lists are split into
// chunks and merged; the result must not depend on the thread count.
TEST(PagedAttention, SplitDecodeMatchesForAnyThreadCount) {
  std::mt19937 rng(25);
  CaseConfig cfg;
  cfg.head_dim = 128;
  cfg.group = 4;
  cfg.page_tokens = 16;
  cfg.modes = {HeadMode::kCausal, HeadMode::kSelected};
  SeqSpec s;
  s.kv_len = 2000;
  s.q_len = 1;
  s.selected_row = 0;
  s.selected = {{}, {0, 3, 4, 50, 51, 90, 124}};
  const AttentionCase c(rng, cfg, {s});
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    expect_matches(c, pool, "threads=" + std::to_string(threads));
  }
}

// Rows whose mask admits no key come out as zeros (sink 0 and window 0).
TEST(PagedAttention, RowWithNoVisibleKeyIsZero) {
  std::mt19937 rng(26);
  CaseConfig cfg;
  cfg.sink_tokens = 0;
  cfg.modes = {HeadMode::kStreaming};
  SeqSpec s;
  s.kv_len = 40;
  s.q_len = 3;
  s.local_tokens = 0;
  s.ring_pages = 4;
  const AttentionCase c(rng, cfg, {s});
  const auto got = c.run([&](const AttentionParams& p) { cpu::paged_attention(p, pool2()); });
  for (float v : got) EXPECT_EQ(v, 0.0f);
}

// The planner visits only pages that can be visible: a streaming tile deep in a long prompt
// sees its sink pages and the pages of its window, so prefill cost grows with the window.
TEST(VisiblePages, StreamingTileVisitsSinksAndWindowOnly) {
  std::mt19937 rng(27);
  CaseConfig cfg;
  cfg.page_tokens = 16;
  cfg.num_sink_pages = 2;
  cfg.sink_tokens = 32;
  cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal};
  SeqSpec s;
  s.kv_len = 4000;
  s.q_len = 4000;
  s.local_tokens = 100;
  const AttentionCase c(rng, cfg, {s});
  const AttentionParams p = c.params(nullptr);
  std::vector<cpu::PageVisit> pages;
  // Queries at positions [3000, 3063]: window keys [2901, 3063] -> pages 181..191, plus sinks.
  ASSERT_TRUE(cpu::collect_visible_pages(p, 0, 0, 3000, 3063, pages));
  std::vector<int32_t> first;
  for (const auto& v : pages) first.push_back(v.first_pos / 16);
  std::vector<int32_t> want = {0, 1};
  for (int32_t j = 2901 / 16; j <= 3063 / 16; ++j) want.push_back(j);
  EXPECT_EQ(first, want);
  // A causal head sees every page up to the tile's last query.
  ASSERT_TRUE(cpu::collect_visible_pages(p, 0, 1, 3000, 3063, pages));
  EXPECT_EQ(pages.size(), size_t{3063 / 16 + 1});
}

// kv_append writes each decode step into the pools (retrieval pages and the streaming ring),
// then attention reads them back: the whole path the engine runs, at every length.
TEST(PagedAttention, DecodeLoopThroughKvAppend) {
  std::mt19937 rng(28);
  const int32_t d = 64, pt = 16, group = 2, nsink = 1, ring = 3, sink_tokens = 10, local = 30;
  const int32_t steps = (nsink + ring + 3) * pt;
  const int32_t num_kv = 2;  // head 0 streaming, head 1 causal
  const std::vector<int32_t> mode = {static_cast<int32_t>(HeadMode::kStreaming),
                                     static_cast<int32_t>(HeadMode::kCausal)};
  const std::vector<int32_t> slot = {1, 0};
  const TypedArray keys = random_array(rng, int64_t{steps} * num_kv * d, DType::kF32);
  const TypedArray values = random_array(rng, int64_t{steps} * num_kv * d, DType::kF32);
  const TypedArray queries =
      random_array(rng, int64_t{steps} * num_kv * group * d, DType::kF32, -3, 3);

  const int32_t r_pages = steps / pt + 1;
  std::vector<float> r_k(static_cast<size_t>((r_pages + 1) * 2 * pt * d), kNaN), r_v = r_k;
  std::vector<float> s_k(static_cast<size_t>((nsink + ring + 1) * 2 * pt * d), kNaN), s_v = s_k;
  std::vector<int32_t> r_table(static_cast<size_t>(r_pages));
  for (int32_t i = 0; i < r_pages; ++i) r_table[static_cast<size_t>(i)] = r_pages - i;  // reversed
  const std::vector<int32_t> s_table = {3, 1, 4, 2};
  const PagedKvPool r_pool{r_k.data(), r_v.data(), DType::kF32, r_pages + 1, 2, pt, d};
  const PagedKvPool s_pool{s_k.data(), s_v.data(), DType::kF32, nsink + ring + 1, 2, pt, d};
  const std::vector<int32_t> rings = {ring}, locals = {local};

  for (int32_t len = 1; len <= steps; ++len) {
    const std::vector<int32_t> q_indptr = {0, 1}, kv_lens = {len};
    KvAppendParams ap;
    ap.k = keys.values.data() + int64_t{len - 1} * num_kv * d;
    ap.v = values.values.data() + int64_t{len - 1} * num_kv * d;
    ap.num_tokens = 1;
    ap.num_kv_heads = num_kv;
    ap.head_dim = d;
    ap.num_seqs = 1;
    ap.q_indptr = q_indptr.data();
    ap.kv_lens = kv_lens.data();
    ap.head_mode = mode.data();
    ap.head_slot = slot.data();
    ap.retrieval = r_pool;
    ap.retrieval_blocks = r_table.data();
    ap.retrieval_blocks_stride = r_pages;
    ap.streaming = s_pool;
    ap.streaming_blocks = s_table.data();
    ap.streaming_blocks_stride = 4;
    ap.num_sink_pages = nsink;
    ap.ring_pages = rings.data();
    cpu::kv_append(ap, pool2());

    AttentionParams p;
    p.q = queries.values.data() + int64_t{len - 1} * num_kv * group * d;
    std::vector<float> out(static_cast<size_t>(num_kv * group * d), kNaN);
    p.out = out.data();
    p.num_tokens = 1;
    p.num_q_heads = num_kv * group;
    p.num_kv_heads = num_kv;
    p.head_dim = d;
    p.scale = 0.125f;
    p.num_seqs = 1;
    p.q_indptr = q_indptr.data();
    p.kv_lens = kv_lens.data();
    p.head_mode = mode.data();
    p.head_slot = slot.data();
    p.retrieval = r_pool;
    p.retrieval_blocks = r_table.data();
    p.retrieval_blocks_stride = r_pages;
    p.streaming = s_pool;
    p.streaming_blocks = s_table.data();
    p.streaming_blocks_stride = 4;
    p.num_sink_pages = nsink;
    p.ring_pages = rings.data();
    p.sink_tokens = sink_tokens;
    p.local_tokens = locals.data();
    cpu::paged_attention(p, pool2());

    std::vector<double> want(out.size(), 0.0);
    const int64_t pos = len - 1;
    for (int32_t hq = 0; hq < num_kv * group; ++hq) {
      const int32_t g = hq / group;
      const float* qv = p.q == nullptr ? nullptr : static_cast<const float*>(p.q) + hq * d;
      std::vector<double> w;
      std::vector<int64_t> ks;
      double mx = -INFINITY;
      for (int64_t k = 0; k <= pos; ++k) {
        if (g == 0 && !(k < sink_tokens || pos - k < local)) continue;
        double dot = 0;
        for (int32_t e = 0; e < d; ++e)
          dot += double(qv[e]) * keys.values[static_cast<size_t>((k * num_kv + g) * d + e)];
        w.push_back(dot * 0.125);
        ks.push_back(k);
        mx = std::max(mx, dot * 0.125);
      }
      double denom = 0;
      for (double& x : w) denom += (x = std::exp(x - mx));
      for (size_t i = 0; i < ks.size(); ++i) {
        for (int32_t e = 0; e < d; ++e) {
          want[static_cast<size_t>(hq * d + e)] +=
              w[i] / denom * values.values[static_cast<size_t>((ks[i] * num_kv + g) * d + e)];
        }
      }
    }
    ASSERT_TRUE(all_close(out, want, 2e-5, 2e-5)) << "len=" << len;
  }
}

// Bad plans never crash: out-of-range block ids and slots are skipped, rows stay finite.
TEST(PagedAttention, OutOfRangeTableEntriesAreSkipped) {
  std::mt19937 rng(29);
  CaseConfig cfg;
  cfg.modes = {HeadMode::kCausal};
  SeqSpec s;
  s.kv_len = 50;
  s.q_len = 2;
  const AttentionCase c(rng, cfg, {s});
  auto got = c.run([&](AttentionParams p) {
    std::vector<int32_t> table(p.retrieval_blocks, p.retrieval_blocks + p.retrieval_blocks_stride);
    table[0] = 1 << 30;
    table[1] = -5;
    p.retrieval_blocks = table.data();
    cpu::paged_attention(p, pool2());
  });
  for (float v : got) EXPECT_TRUE(std::isfinite(v));
  got = c.run([&](AttentionParams p) {
    const std::vector<int32_t> bad_slot = {7};
    p.head_slot = bad_slot.data();
    cpu::paged_attention(p, pool2());
  });
  for (float v : got) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace ls::kernels::test
