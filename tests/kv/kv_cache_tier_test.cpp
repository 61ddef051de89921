// KvCacheTier on the CPU backend: a layer whose pages do not fit a request's partition fails the
// step with a clear error (the runner returns it, the engine fails that step's requests), the
// flag is cleared so the next step runs, the partition reset returns every slot, and the tiered
// view is what the kernels expect (cache k/v, homes, residency table). Elastic budgets: a row
// grown past its even share holds a layer it could not before, pages in slots a row gives up
// leave the cache, pages in slots it keeps stay, and plans beyond the cache are refused.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache_tier.h"

namespace ls {
namespace {

KvGeometry geometry() {
  KvGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.head_dim = 8;
  g.page_tokens = 4;
  g.logical_page_tokens = 4;
  g.roles = HeadRoles(1, 1, {false});
  return g;
}

TEST(KvCacheTier, OverflowIsAClearErrorAndTheTierKeepsWorking) {
  auto backend = make_cpu_backend(1);
  const KvGeometry g = geometry();
  KvTierConfig cfg;
  cfg.enabled = true;
  cfg.num_rows = 2;
  cfg.slots_per_row = 2;
  const int32_t blocks = 8;
  auto homes_k = backend->allocate_zeroed(blocks * g.page_bytes(), MemoryTier::kHost);
  auto homes_v = backend->allocate_zeroed(blocks * g.page_bytes(), MemoryTier::kHost);
  ASSERT_TRUE(homes_k.ok() && homes_v.ok());
  auto tier = KvCacheTier::create(g, *backend, blocks, cfg);
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  kernels::PagedKvPool homes;
  homes.k = homes_k->data();
  homes.v = homes_v->data();
  homes.num_blocks = blocks;
  homes.heads_per_block = 1;
  homes.page_tokens = g.page_tokens;
  homes.head_dim = g.head_dim;
  const kernels::PagedKvPool view = tier->tiered_view(homes);
  EXPECT_EQ(view.home_k, homes.k);
  EXPECT_NE(view.k, homes.k);
  EXPECT_NE(view.page_slot, nullptr);
  EXPECT_EQ(view.num_cache_slots, 4);

  // One causal head, row 1; a context of `pages` pages in blocks 3, 4, 5.
  const std::vector<int32_t> table = {3, 4, 5};
  const int32_t mode = static_cast<int32_t>(kernels::HeadMode::kCausal), slot = 0, row = 1;
  auto step = [&](int32_t kv_len) {
    kernels::AttentionParams a;
    a.num_seqs = 1;
    a.num_kv_heads = 1;
    a.kv_lens = &kv_len;
    a.head_mode = &mode;
    a.head_slot = &slot;
    a.retrieval = view;
    a.retrieval_blocks = table.data();
    a.retrieval_blocks_stride = 3;
    tier->retrieve(*backend, a, &row);
    KvTierCounters c;
    return std::make_pair(tier->finish_step(*backend, c), c);
  };
  auto [ok, c1] = step(2 * g.page_tokens);  // two pages: fits
  ASSERT_TRUE(ok.ok()) << ok.to_string();
  EXPECT_EQ(c1.misses, 2);
  auto [bad, c2] = step(3 * g.page_tokens);  // three pages, two slots
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--device-kv-cache-bytes"), std::string::npos) << bad.message();
  EXPECT_EQ(c2.misses, 2);  // nothing was placed
  auto [again, c3] = step(2 * g.page_tokens);  // the flag was cleared; hits now
  ASSERT_TRUE(again.ok()) << again.to_string();
  EXPECT_EQ(c3.hits, c1.hits + 2 + 2);  // the overflowing call stamped its two hits too
  ASSERT_TRUE(backend->take_error().ok());

  const std::vector<int32_t> slots = tier->slot_pages(*backend);
  EXPECT_EQ(slots[2], 3);  // row 1 owns slots 2, 3; blocks 3 and 4 (one head-page each)
  EXPECT_EQ(slots[3], 4);
  tier->reset_row(*backend, row);
  for (int32_t v : tier->slot_pages(*backend)) EXPECT_EQ(v, -1);
  for (int32_t v : tier->page_slots(*backend)) EXPECT_EQ(v, -1);
}

TEST(KvCacheTier, ElasticBudgetsResizePartitionsAndFreeWhatMoves) {
  auto backend = make_cpu_backend(1);
  const KvGeometry g = geometry();
  KvTierConfig cfg;
  cfg.enabled = true;
  cfg.num_rows = 3;
  cfg.slots_per_row = 2;
  cfg.budget = KvBudgetMode::kElastic;
  const int32_t blocks = 12;
  auto homes_k = backend->allocate_zeroed(blocks * g.page_bytes(), MemoryTier::kHost);
  auto homes_v = backend->allocate_zeroed(blocks * g.page_bytes(), MemoryTier::kHost);
  ASSERT_TRUE(homes_k.ok() && homes_v.ok());
  auto tier = KvCacheTier::create(g, *backend, blocks, cfg);
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  kernels::PagedKvPool homes;
  homes.k = homes_k->data();
  homes.v = homes_v->data();
  homes.num_blocks = blocks;
  homes.heads_per_block = 1;
  homes.page_tokens = g.page_tokens;
  homes.head_dim = g.head_dim;
  const kernels::PagedKvPool view = tier->tiered_view(homes);
  const int32_t mode = static_cast<int32_t>(kernels::HeadMode::kCausal), slot = 0;
  auto step = [&](int32_t row, const std::vector<int32_t>& table) {
    const auto kv_len = static_cast<int32_t>(table.size()) * g.page_tokens;
    kernels::AttentionParams a;
    a.num_seqs = 1;
    a.num_kv_heads = 1;
    a.kv_lens = &kv_len;
    a.head_mode = &mode;
    a.head_slot = &slot;
    a.retrieval = view;
    a.retrieval_blocks = table.data();
    a.retrieval_blocks_stride = static_cast<int32_t>(table.size());
    tier->retrieve(*backend, a, &row);
    KvTierCounters c;
    return tier->finish_step(*backend, c);
  };
  EXPECT_EQ(tier->row_budgets(), (std::vector<int32_t>{2, 2, 2}));
  EXPECT_FALSE(step(1, {0, 1, 2}).ok());  // three pages, two slots: overflow
  // Row 1 grows to 4 slots, row 0 keeps 2, row 2 gets none.
  ASSERT_TRUE(tier->set_row_budgets(*backend, {2, 4, 0}).ok());
  EXPECT_EQ(tier->row_budgets(), (std::vector<int32_t>{2, 4, 0}));
  ASSERT_TRUE(step(0, {6, 7}).ok());
  ASSERT_TRUE(step(1, {0, 1, 2}).ok());  // fits now
  std::vector<int32_t> ps = tier->page_slots(*backend);
  for (int32_t page : {6, 7}) {
    EXPECT_GE(ps[static_cast<size_t>(page)], tier->row_spans()[0].begin);
    EXPECT_LT(ps[static_cast<size_t>(page)], tier->row_spans()[0].end);
  }
  for (int32_t page : {0, 1, 2}) {
    EXPECT_GE(ps[static_cast<size_t>(page)], tier->row_spans()[1].begin);
    EXPECT_LT(ps[static_cast<size_t>(page)], tier->row_spans()[1].end);
  }
  // Row 0 shrinks to nothing and row 1 takes the whole cache: row 0's pages leave, row 1's stay.
  const int32_t kept = ps[0];
  ASSERT_TRUE(tier->set_row_budgets(*backend, {0, 6, 0}).ok());
  ps = tier->page_slots(*backend);
  EXPECT_EQ(ps[6], -1);
  EXPECT_EQ(ps[7], -1);
  EXPECT_EQ(ps[0], kept);
  const std::vector<int32_t> sp = tier->slot_pages(*backend);
  int32_t resident = 0;
  for (int32_t v : sp) resident += v >= 0 ? 1 : 0;
  EXPECT_EQ(resident, 3);
  // Beyond the cache, or the wrong number of rows: refused, nothing changes.
  EXPECT_FALSE(tier->set_row_budgets(*backend, {2, 3, 2}).ok());
  EXPECT_FALSE(tier->set_row_budgets(*backend, {2, 2}).ok());
  EXPECT_EQ(tier->row_budgets(), (std::vector<int32_t>{0, 6, 0}));
  for (int32_t row = 0; row < 3; ++row) tier->reset_row(*backend, row);
  for (int32_t v : tier->page_slots(*backend)) EXPECT_EQ(v, -1);
  ASSERT_TRUE(backend->take_error().ok());
}

}  // namespace
}  // namespace ls
