// The residency op (kernels/page_residency.h) on the CPU, against independent references:
//  - a shadow model of the cache (per-row maps page -> slot, stamps) that picks victims by a
//    brute-force sort of the stated replacement order, under random schedules of rows joining,
//    selecting, ending and aborting; after every call the op's tables, stamps and copy list equal
//    the shadow's, every mandatory page is resident in its row's partition (never evicted in the
//    call that needs it), the tables are a consistent bijection, and after copying the copy list
//    every slot the attention will read holds its home's bytes (nothing read before it arrives,
//    nothing lost); after every row is reset, both tables are empty;
//  - the same with per-request partitions (row_slots: elastic device budgets) that are resized and
//    moved every few steps, with gaps between them: the slots a row gives up are freed by a
//    ranged reset, the shadow drops exactly those pages, and no page is ever resident outside its
//    row's partition;
//  - overflow: more mandatory pages than a partition holds sets the error flag, changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <iterator>
#include <tuple>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/page_copy.h"
#include "kernels/cpu/page_residency.h"

namespace ls::kernels {
namespace {

constexpr int32_t kHeads = 3;        // kv heads: 0, 2 selecting, 1 streaming
constexpr int32_t kHpb = 2;          // retrieval head-pages per block (heads 0 and 2)
constexpr int32_t kPageTokens = 4;
constexpr int32_t kPageInts = 8;     // a page's payload in the copy check: 8 ints
constexpr int32_t kMaxSelected = 5;

struct Shadow {
  // per row: slot -> (page, stamp); free slots absent
  std::vector<std::map<int32_t, std::pair<int32_t, int32_t>>> rows;
  std::vector<int32_t> clock;
};

int32_t klass(int32_t stamp, int32_t now, int32_t ticks, int32_t buckets) {
  return std::min(buckets - 1, (now - stamp) / ticks);
}

class Residency
    : public ::testing::TestWithParam<std::tuple<Replacement, int32_t, uint32_t, bool>> {};

TEST_P(Residency, MatchesShadowModelUnderRandomSchedules) {
  // Plain locals: lambdas below capture them (clang 14 cannot capture structured bindings).
  const Replacement replacement = std::get<0>(GetParam());
  const int32_t slots_per_row = std::get<1>(GetParam());
  const uint32_t seed = std::get<2>(GetParam());
  const bool elastic = std::get<3>(GetParam());
  std::mt19937 rng(seed);
  const int32_t num_rows = 4;
  const int32_t num_blocks = 64;
  const int32_t num_pages = num_blocks * kHpb;
  const int32_t num_slots = num_rows * slots_per_row;
  const int32_t ticks = 3, buckets = 4;
  ThreadPool pool(2);

  std::vector<int32_t> page_slot(static_cast<size_t>(num_pages), -1);
  std::vector<int32_t> slot_page(static_cast<size_t>(num_slots), -1);
  std::vector<int32_t> stamp(static_cast<size_t>(num_slots), 0);
  std::vector<int32_t> clock(static_cast<size_t>(num_rows), 0);
  std::vector<int32_t> copy_src(static_cast<size_t>(num_slots)), copy_dst(static_cast<size_t>(num_slots));
  int32_t copy_count = -7, error = 0;
  int64_t counters[2] = {0, 0};
  std::vector<int64_t> row_counters(static_cast<size_t>(num_rows) * kRowCounters, 0);
  std::vector<int64_t> want_row_counters = row_counters;
  // Homes and cache hold page payloads; the cache starts poisoned.
  std::vector<int32_t> homes(static_cast<size_t>(num_pages) * kPageInts);
  for (auto& v : homes) v = static_cast<int32_t>(rng());
  std::vector<int32_t> cache(static_cast<size_t>(num_slots) * kPageInts, -0x5a5a5a5a);

  // Each row's partition [begin, end): even, or resized every few steps when elastic.
  std::vector<std::pair<int32_t, int32_t>> spans;
  for (int32_t r = 0; r < num_rows; ++r) spans.push_back({r * slots_per_row, (r + 1) * slots_per_row});
  std::vector<int32_t> row_slots;  // [num_rows, 2], what the op reads when elastic
  auto sync_row_slots = [&]() {
    row_slots.clear();
    for (const auto& sp : spans) row_slots.insert(row_slots.end(), {sp.first, sp.second});
  };
  sync_row_slots();
  auto reset_slots = [&](int32_t r, int32_t begin, int32_t end, bool clock_too) {
    ResidencyResetParams rp;
    rp.row = r;
    rp.slots_per_row = slots_per_row;
    rp.first_slot = begin;
    rp.num_slots = end - begin;
    rp.reset_clock = clock_too;
    rp.page_slot = page_slot.data();
    rp.slot_page = slot_page.data();
    rp.slot_stamp = stamp.data();
    rp.row_clock = clock.data();
    if (end > begin) {
      ASSERT_TRUE(cpu::page_residency_reset(rp).ok());
    } else if (clock_too) {
      clock[static_cast<size_t>(r)] = 0;
    }
  };

  Shadow shadow;
  shadow.rows.resize(static_cast<size_t>(num_rows));
  shadow.clock.assign(static_cast<size_t>(num_rows), 0);

  // Each row's sequence: blocks owned, context length; blocks come from a shared free list.
  std::vector<int32_t> free_blocks(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) free_blocks[static_cast<size_t>(b)] = num_blocks - 1 - b;
  struct RowSeq {
    bool active = false;
    std::vector<int32_t> blocks;
    int32_t kv_len = 0;
  };
  std::vector<RowSeq> rowseq(static_cast<size_t>(num_rows));
  auto end_row = [&](int32_t r) {
    RowSeq& rs = rowseq[static_cast<size_t>(r)];
    for (int32_t b : rs.blocks) free_blocks.push_back(b);
    rs = RowSeq{};
    if (elastic) {
      reset_slots(r, spans[static_cast<size_t>(r)].first, spans[static_cast<size_t>(r)].second, true);
    } else {
      ResidencyResetParams rp;  // the even partition of the row
      rp.row = r;
      rp.slots_per_row = slots_per_row;
      rp.page_slot = page_slot.data();
      rp.slot_page = slot_page.data();
      rp.slot_stamp = stamp.data();
      rp.row_clock = clock.data();
      ASSERT_TRUE(cpu::page_residency_reset(rp).ok());
    }
    shadow.rows[static_cast<size_t>(r)].clear();
    shadow.clock[static_cast<size_t>(r)] = 0;
  };

  const std::vector<int32_t> head_mode = {static_cast<int32_t>(HeadMode::kSelected),
                                          static_cast<int32_t>(HeadMode::kStreaming),
                                          static_cast<int32_t>(HeadMode::kSelected)};
  const std::vector<int32_t> head_slot = {0, 0, 1};
  int64_t total_misses = 0;
  for (int step = 0; step < 400; ++step) {
    if (elastic && step % 7 == 6) {
      // New partitions: random sizes (some rows get none), random gaps, in row order.
      std::vector<std::pair<int32_t, int32_t>> next;
      int32_t cursor = 0;
      for (int32_t r = 0; r < num_rows; ++r) {
        cursor = std::min(num_slots, cursor + static_cast<int32_t>(rng() % 3));
        const int32_t left = num_slots - cursor;
        const int32_t fair = left / (num_rows - r);
        const int32_t size = std::min(left, static_cast<int32_t>(rng() % static_cast<uint32_t>(2 * fair + 1)));
        next.push_back({cursor, cursor + size});
        cursor += size;
      }
      for (int32_t r = 0; r < num_rows; ++r) {
        const auto [ob, oe] = spans[static_cast<size_t>(r)];
        const auto [nb, ne] = next[static_cast<size_t>(r)];
        reset_slots(r, ob, std::min(oe, nb), false);
        reset_slots(r, std::max(ob, ne), oe, false);
        auto& rowmap = shadow.rows[static_cast<size_t>(r)];
        for (auto it = rowmap.begin(); it != rowmap.end();) {
          it = it->first >= nb && it->first < ne ? std::next(it) : rowmap.erase(it);
        }
      }
      spans = next;
      sync_row_slots();
    }
    // Random row events: join, grow, end/abort.
    for (int32_t r = 0; r < num_rows; ++r) {
      RowSeq& rs = rowseq[static_cast<size_t>(r)];
      if (!rs.active && rng() % 3 == 0) {
        rs.active = true;
      } else if (rs.active && rng() % 25 == 0) {
        end_row(r);
        continue;
      }
      if (!rs.active) continue;
      rs.kv_len += 1 + static_cast<int32_t>(rng() % 6);
      const int32_t need = (rs.kv_len + kPageTokens - 1) / kPageTokens;
      while (static_cast<int32_t>(rs.blocks.size()) < need && !free_blocks.empty()) {
        rs.blocks.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      rs.kv_len = std::min(rs.kv_len, static_cast<int32_t>(rs.blocks.size()) * kPageTokens);
      // A partition must hold a layer's mandatory pages: cap the pages each head reads.
    }
    // The batch: active rows in random order with random selections.
    std::vector<int32_t> batch;
    for (int32_t r = 0; r < num_rows; ++r) {
      if (rowseq[static_cast<size_t>(r)].active && rowseq[static_cast<size_t>(r)].kv_len > 0 && rng() % 4 != 0) {
        batch.push_back(r);
      }
    }
    std::shuffle(batch.begin(), batch.end(), rng);
    if (batch.empty()) continue;
    const auto n = static_cast<int32_t>(batch.size());
    int32_t stride = 1;
    for (int32_t r : batch) stride = std::max<int32_t>(stride, static_cast<int32_t>(rowseq[static_cast<size_t>(r)].blocks.size()));
    std::vector<int32_t> kv_lens(static_cast<size_t>(n)), tables(static_cast<size_t>(n * stride), -1);
    std::vector<int32_t> sel_rows(static_cast<size_t>(n));
    std::vector<int32_t> selected(static_cast<size_t>(n * kHeads * kMaxSelected), 0);
    std::vector<int32_t> num_selected(static_cast<size_t>(n * kHeads), 0);
    std::vector<std::vector<int32_t>> mandatory(static_cast<size_t>(n));  // head-pages, op order
    for (int32_t s = 0; s < n; ++s) {
      const RowSeq& rs = rowseq[static_cast<size_t>(batch[static_cast<size_t>(s)])];
      kv_lens[static_cast<size_t>(s)] = rs.kv_len;
      std::copy(rs.blocks.begin(), rs.blocks.end(), tables.begin() + s * stride);
      const int32_t pages = (rs.kv_len - 1) / kPageTokens + 1;
      // Selection row s: each selecting head lists a random ascending subset whose last entry is
      // near the end, so a few tail pages follow; the partition must fit both heads' pages.
      sel_rows[static_cast<size_t>(s)] = rng() % 5 == 0 ? -1 : s;
      for (int32_t g = 0; g < kHeads; ++g) {
        if (head_mode[static_cast<size_t>(g)] == static_cast<int32_t>(HeadMode::kStreaming)) continue;
        std::vector<int32_t> list;
        int32_t first_tail = 0;
        if (sel_rows[static_cast<size_t>(s)] >= 0) {
          const int32_t last = std::max(0, pages - 1 - static_cast<int32_t>(rng() % 2));
          std::set<int32_t> pick = {last};
          while (static_cast<int32_t>(pick.size()) < std::min(kMaxSelected - 1, last + 1)) {
            pick.insert(static_cast<int32_t>(rng() % static_cast<uint32_t>(last + 1)));
          }
          list.assign(pick.begin(), pick.end());
          const int64_t base = (int64_t{s} * kHeads + g);
          std::copy(list.begin(), list.end(), selected.begin() + base * kMaxSelected);
          num_selected[static_cast<size_t>(base)] = static_cast<int32_t>(list.size());
          first_tail = list.back() + 1;
        }
        std::vector<int32_t> logical = list;
        for (int32_t j = first_tail; j < pages; ++j) logical.push_back(j);
        for (int32_t j : logical) {
          mandatory[static_cast<size_t>(s)].push_back(rs.blocks[static_cast<size_t>(j)] * kHpb +
                                                      head_slot[static_cast<size_t>(g)]);
        }
      }
    }
    // Keep every row's mandatory set within its partition (start-up sizing guarantees it): a row
    // whose set is too large is left out of this step.
    std::vector<int32_t> keep;
    for (int32_t s = 0; s < n; ++s) {
      const auto& sp = spans[static_cast<size_t>(batch[static_cast<size_t>(s)])];
      if (static_cast<int32_t>(mandatory[static_cast<size_t>(s)].size()) <= sp.second - sp.first) {
        keep.push_back(s);
      }
    }
    if (keep.size() != static_cast<size_t>(n)) {
      // Rebuild compacted arrays (sequence order = keep order; selection rows keep their index).
      std::vector<int32_t> kv2, tab2, sel2, rows2;
      std::vector<std::vector<int32_t>> man2;
      for (int32_t s : keep) {
        kv2.push_back(kv_lens[static_cast<size_t>(s)]);
        tab2.insert(tab2.end(), tables.begin() + s * stride, tables.begin() + (s + 1) * stride);
        sel2.push_back(sel_rows[static_cast<size_t>(s)]);
        rows2.push_back(batch[static_cast<size_t>(s)]);
        man2.push_back(mandatory[static_cast<size_t>(s)]);
      }
      kv_lens = kv2, tables = tab2, sel_rows = sel2, batch = rows2, mandatory = man2;
      if (batch.empty()) continue;
    }
    const auto m = static_cast<int32_t>(batch.size());

    PageResidencyParams p;
    p.num_seqs = m;
    p.kv_lens = kv_lens.data();
    p.num_kv_heads = kHeads;
    p.head_mode = head_mode.data();
    p.head_slot = head_slot.data();
    p.page_tokens = kPageTokens;
    p.heads_per_block = kHpb;
    p.num_blocks = num_blocks;
    p.retrieval_blocks = tables.data();
    p.retrieval_blocks_stride = stride;
    p.selected_rows = sel_rows.data();
    p.selected = selected.data();
    p.num_selected = num_selected.data();
    p.max_selected = kMaxSelected;
    p.cache_rows = batch.data();
    p.slots_per_row = slots_per_row;
    p.row_slots = elastic ? row_slots.data() : nullptr;
    p.num_cache_slots = num_slots;
    p.page_slot = page_slot.data();
    p.slot_page = slot_page.data();
    p.slot_stamp = stamp.data();
    p.row_clock = clock.data();
    p.replacement = replacement;
    p.bucket_ticks = ticks;
    p.num_buckets = buckets;
    p.copy_src = copy_src.data();
    p.copy_dst = copy_dst.data();
    p.copy_count = &copy_count;
    p.max_copies = num_slots;
    p.error = &error;
    p.counters = counters;
    p.row_counters = row_counters.data();
    ASSERT_TRUE(cpu::page_residency(p, pool).ok());
    ASSERT_EQ(error, 0) << "step " << step;

    // Shadow: the same rule by brute force.
    std::vector<std::pair<int32_t, int32_t>> want_copies;
    for (int32_t s = 0; s < m; ++s) {
      const int32_t r = batch[static_cast<size_t>(s)];
      auto& rowmap = shadow.rows[static_cast<size_t>(r)];
      const int32_t now = ++shadow.clock[static_cast<size_t>(r)];
      std::vector<int32_t> misses;
      int64_t* want_rc = want_row_counters.data() + static_cast<size_t>(r) * kRowCounters;
      for (int32_t page : mandatory[static_cast<size_t>(s)]) {
        auto hit = std::find_if(rowmap.begin(), rowmap.end(),
                                [&](const auto& e) { return e.second.first == page; });
        ++want_rc[kRowMandatory];
        if (hit != rowmap.end()) {
          // Reused: read by the same row at most one bucket (one step of layer calls) ago.
          if (now - hit->second.second <= ticks) ++want_rc[kRowReused];
          ++want_rc[kRowHits];
          hit->second.second = now;
        } else {
          misses.push_back(page);
        }
      }
      // Candidates: free slots, then resident slots not stamped now, sorted by the stated order.
      struct Cand {
        int32_t slot, key1, key2;
      };
      std::vector<Cand> cands;
      for (int32_t slot = spans[static_cast<size_t>(r)].first; slot < spans[static_cast<size_t>(r)].second;
           ++slot) {
        auto it = rowmap.find(slot);
        if (it == rowmap.end()) {
          cands.push_back({slot, 0, 0});
        } else if (it->second.second != now) {
          const int32_t st = it->second.second;
          if (replacement == Replacement::kBucketedLru) {
            cands.push_back({slot, 1, -klass(st, now, ticks, buckets)});
          } else {
            cands.push_back({slot, 1, st});
          }
        }
      }
      std::sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
        return std::tie(x.key1, x.key2, x.slot) < std::tie(y.key1, y.key2, y.slot);
      });
      ASSERT_GE(cands.size(), misses.size());
      std::vector<int32_t> victims;
      for (size_t i = 0; i < misses.size(); ++i) victims.push_back(cands[i].slot);
      want_rc[kRowMisses] += static_cast<int64_t>(misses.size());
      std::sort(victims.begin(), victims.end());
      for (size_t i = 0; i < misses.size(); ++i) {
        rowmap[victims[i]] = {misses[i], now};
        want_copies.push_back({misses[i], victims[i]});
      }
    }
    // Copy list equal (as a set: CUDA appends rows in any order; the CPU in batch order).
    std::vector<std::pair<int32_t, int32_t>> got_copies;
    for (int32_t i = 0; i < copy_count; ++i) {
      got_copies.push_back({copy_src[static_cast<size_t>(i)], copy_dst[static_cast<size_t>(i)]});
    }
    total_misses += copy_count;
    std::sort(got_copies.begin(), got_copies.end());
    std::sort(want_copies.begin(), want_copies.end());
    ASSERT_EQ(got_copies, want_copies) << "step " << step;
    ASSERT_EQ(row_counters, want_row_counters) << "step " << step;
    // Tables equal the shadow: slot_page/stamp per slot, page_slot a consistent inverse.
    std::vector<bool> owned(static_cast<size_t>(num_slots), false);
    for (int32_t r = 0; r < num_rows; ++r) {
      for (int32_t slot = spans[static_cast<size_t>(r)].first; slot < spans[static_cast<size_t>(r)].second;
           ++slot) {
        owned[static_cast<size_t>(slot)] = true;
        auto it = shadow.rows[static_cast<size_t>(r)].find(slot);
        const int32_t want_page = it == shadow.rows[static_cast<size_t>(r)].end() ? -1 : it->second.first;
        ASSERT_EQ(slot_page[static_cast<size_t>(slot)], want_page) << "step " << step << " slot " << slot;
        if (want_page >= 0) {
          ASSERT_EQ(stamp[static_cast<size_t>(slot)], it->second.second);
          ASSERT_EQ(page_slot[static_cast<size_t>(want_page)], slot);
        }
      }
    }
    for (int32_t slot = 0; slot < num_slots; ++slot) {
      if (!owned[static_cast<size_t>(slot)]) {
        ASSERT_EQ(slot_page[static_cast<size_t>(slot)], -1) << "slot " << slot;
      }
    }
    for (int32_t page = 0; page < num_pages; ++page) {
      const int32_t slot = page_slot[static_cast<size_t>(page)];
      if (slot >= 0) {
        ASSERT_EQ(slot_page[static_cast<size_t>(slot)], page) << "stale page_slot";
      }
    }
    // Move the pages, then every mandatory page must read its home's bytes from its slot.
    PageCopyParams c;
    c.src[0] = homes.data();
    c.dst[0] = cache.data();
    c.num_arrays = 1;
    c.page_bytes = kPageInts * 4;
    c.src_stride_bytes = c.page_bytes;
    c.dst_stride_bytes = c.page_bytes;
    c.src_pages = copy_src.data();
    c.dst_pages = copy_dst.data();
    c.num_pages_device = &copy_count;
    c.max_pages = num_slots;
    ASSERT_TRUE(cpu::page_copy(c, pool).ok());
    for (int32_t s = 0; s < m; ++s) {
      for (int32_t page : mandatory[static_cast<size_t>(s)]) {
        const int32_t slot = page_slot[static_cast<size_t>(page)];
        ASSERT_GE(slot, spans[static_cast<size_t>(batch[static_cast<size_t>(s)])].first);
        ASSERT_LT(slot, spans[static_cast<size_t>(batch[static_cast<size_t>(s)])].second);
        ASSERT_EQ(std::memcmp(&cache[static_cast<size_t>(slot) * kPageInts],
                              &homes[static_cast<size_t>(page) * kPageInts], kPageInts * 4),
                  0)
            << "step " << step << ": a mandatory page reads other bytes than its home";
      }
    }
    // Write-through, as kv_append does: new bytes go to the home and to the resident slot.
    for (int32_t s = 0; s < m; ++s) {
      const int32_t page = mandatory[static_cast<size_t>(s)].back();
      const int32_t word = static_cast<int32_t>(rng() % kPageInts);
      const auto value = static_cast<int32_t>(rng());
      homes[static_cast<size_t>(page) * kPageInts + static_cast<size_t>(word)] = value;
      cache[static_cast<size_t>(page_slot[static_cast<size_t>(page)]) * kPageInts + static_cast<size_t>(word)] = value;
    }
  }
  EXPECT_GT(total_misses, 0);
  EXPECT_EQ(counters[1], total_misses);
  EXPECT_GT(counters[0], 0);
  int64_t reused = 0;
  for (int32_t r = 0; r < num_rows; ++r) reused += row_counters[static_cast<size_t>(r) * kRowCounters + kRowReused];
  EXPECT_GT(reused, 0);
  for (int32_t r = 0; r < num_rows; ++r) end_row(r);
  for (int32_t v : slot_page) ASSERT_EQ(v, -1);
  for (int32_t v : page_slot) ASSERT_EQ(v, -1);
  EXPECT_EQ(static_cast<int32_t>(free_blocks.size()), num_blocks);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, Residency,
    ::testing::Combine(::testing::Values(Replacement::kBucketedLru, Replacement::kPlainLru),
                       ::testing::Values(12, 20, 40), ::testing::Values(1u, 2u, 3u),
                       ::testing::Values(false)));
INSTANTIATE_TEST_SUITE_P(
    ElasticPartitions, Residency,
    ::testing::Combine(::testing::Values(Replacement::kBucketedLru, Replacement::kPlainLru),
                       ::testing::Values(12, 40), ::testing::Values(4u), ::testing::Values(true)));

TEST(Residency, OverflowSetsTheErrorAndAssignsNothing) {
  ThreadPool pool(1);
  const int32_t slots = 2;  // one row of 2 slots; the head reads 3 pages
  std::vector<int32_t> page_slot(8, -1), slot_page(slots, -1), stamp(slots, 0), clock(1, 0);
  std::vector<int32_t> src(slots), dst(slots);
  int32_t count = -1, error = 0;
  const int32_t kv_len = 3 * kPageTokens;
  const std::vector<int32_t> table = {0, 1, 2};
  const int32_t mode = static_cast<int32_t>(HeadMode::kCausal), hslot = 0, row = 0;
  PageResidencyParams p;
  p.num_seqs = 1;
  p.kv_lens = &kv_len;
  p.num_kv_heads = 1;
  p.head_mode = &mode;
  p.head_slot = &hslot;
  p.page_tokens = kPageTokens;
  p.heads_per_block = 1;
  p.num_blocks = 8;
  p.retrieval_blocks = table.data();
  p.retrieval_blocks_stride = 3;
  p.cache_rows = &row;
  p.slots_per_row = slots;
  p.num_cache_slots = slots;
  p.page_slot = page_slot.data();
  p.slot_page = slot_page.data();
  p.slot_stamp = stamp.data();
  p.row_clock = clock.data();
  p.copy_src = src.data();
  p.copy_dst = dst.data();
  p.copy_count = &count;
  p.max_copies = slots;
  p.error = &error;
  ASSERT_TRUE(cpu::page_residency(p, pool).ok());
  EXPECT_EQ(error, kResidencyOverflow);
  EXPECT_EQ(count, 0);
  for (int32_t v : slot_page) EXPECT_EQ(v, -1);
  for (int32_t v : page_slot) EXPECT_EQ(v, -1);
  // Bad params are a Status, not a crash.
  p.max_copies = 1;
  EXPECT_FALSE(cpu::page_residency(p, pool).ok());
}

}  // namespace
}  // namespace ls::kernels
