// The GPU side of the hierarchical KV tier (docs/hierarchical-kv.md) against the CPU:
//  - the residency op (kernels/cuda/page_residency.cu) from the same random states and batches as
//    kernels/cpu/page_residency: tables, stamps, clocks, error flag, counters equal, copy lists
//    equal as sets (GPU rows append in any order), carried over many calls; the partition reset;
//    also with per-request partitions (row_slots, elastic device budgets) resized and moved every
//    20 calls, each row freeing the slots it gives up by a ranged reset;
//  - attention reading a tiered retrieval pool (every head-page at a random cache slot, the homes
//    NaN-poisoned so a read of them shows) gives bitwise the output of the untiered pool, for
//    decode (selected, causal, streaming heads) and prefill chunks;
//  - kv_append on a tiered pool: homes equal the untiered pool after the same appends, resident
//    slots equal their homes, non-resident slots untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "attention_scenario.h"
#include "cuda_test_util.h"
#include "kernels/cpu/kv_append.h"
#include "kernels/cpu/page_residency.h"
#include "kernels/cuda/attention.h"
#include "kernels/page_residency.h"

namespace ls::cuda_test {
namespace {

using kernels::HeadMode;

TEST(CudaKvTier, ResidencyOpEqualsTheCpuOp) {
  LS_REQUIRE_CUDA();
  for (int variant = 0; variant < 4; ++variant) {
    const auto replacement =
        variant % 2 == 1 ? kernels::Replacement::kPlainLru : kernels::Replacement::kBucketedLru;
    const bool elastic = variant >= 2;
    std::mt19937 rng((replacement == kernels::Replacement::kPlainLru ? 5 : 6) + (elastic ? 10 : 0));
    const int32_t rows = 5, per_row = 200, heads = 4, hpb = 3, pt = 16, max_sel = 24;
    const int32_t blocks = 400, slots = rows * per_row;
    const int64_t pages = int64_t{blocks} * hpb;
    const std::vector<int32_t> mode = {static_cast<int32_t>(HeadMode::kSelected),
                                       static_cast<int32_t>(HeadMode::kStreaming),
                                       static_cast<int32_t>(HeadMode::kSelected),
                                       static_cast<int32_t>(HeadMode::kCausal)};
    const std::vector<int32_t> hslot = {2, 0, 0, 1};
    // CPU state and its device mirror.
    std::vector<int32_t> page_slot(static_cast<size_t>(pages), -1), slot_page(slots, -1),
        stamp(slots, 0), clock(rows, 0);
    DeviceArray d_page_slot = DeviceArray::of(page_slot), d_slot_page = DeviceArray::of(slot_page),
                d_stamp = DeviceArray::of(stamp), d_clock = DeviceArray::of(clock);
    DeviceArray d_src(slots * 4), d_dst(slots * 4), d_scratch(slots * 4), d_small(24);
    gpu()->fill_zero(d_small.data(), 24);
    int64_t counters[2] = {0, 0};
    std::vector<int64_t> row_counters(static_cast<size_t>(rows) * kernels::kRowCounters, 0);
    DeviceArray d_row_counters(static_cast<int64_t>(row_counters.size()) * 8);
    gpu()->fill_zero(d_row_counters.data(), d_row_counters.bytes());
    int32_t cpu_error = 0;
    // Each row owns a disjoint run of blocks (a sequence's table).
    std::vector<int32_t> perm(blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    // Partitions as (begin, end) per row; the op reads them only when elastic.
    std::vector<int32_t> spans;
    for (int32_t r = 0; r < rows; ++r) spans.insert(spans.end(), {r * per_row, (r + 1) * per_row});
    DeviceArray d_spans = DeviceArray::of(spans);
    auto reset_both = [&](int32_t row, int32_t begin, int32_t end, bool clock_too) {
      kernels::ResidencyResetParams rp;
      rp.row = row;
      rp.slots_per_row = per_row;
      rp.first_slot = begin;
      rp.num_slots = end - begin;
      rp.reset_clock = clock_too;
      rp.page_slot = page_slot.data();
      rp.slot_page = slot_page.data();
      rp.slot_stamp = stamp.data();
      rp.row_clock = clock.data();
      ASSERT_TRUE(kernels::cpu::page_residency_reset(rp).ok());
      rp.page_slot = d_page_slot.as<int32_t>();
      rp.slot_page = d_slot_page.as<int32_t>();
      rp.slot_stamp = d_stamp.as<int32_t>();
      rp.row_clock = d_clock.as<int32_t>();
      gpu()->page_residency_reset(rp);
    };
    for (int call = 0; call < 120; ++call) {
      if (elastic && call % 20 == 10) {
        // New partitions: random sizes and gaps, in row order.
        std::vector<int32_t> next;
        int32_t cursor = 0;
        for (int32_t r = 0; r < rows; ++r) {
          cursor = std::min(slots, cursor + static_cast<int32_t>(rng() % 3));
          const int32_t left = slots - cursor;
          const int32_t fair = left / (rows - r);
          const int32_t size = std::min(left, static_cast<int32_t>(rng() % static_cast<uint32_t>(2 * fair + 1)));
          next.insert(next.end(), {cursor, cursor + size});
          cursor += size;
        }
        for (int32_t r = 0; r < rows; ++r) {
          const int32_t ob = spans[2 * static_cast<size_t>(r)], oe = spans[2 * static_cast<size_t>(r) + 1];
          const int32_t nb = next[2 * static_cast<size_t>(r)], ne = next[2 * static_cast<size_t>(r) + 1];
          if (std::min(oe, nb) > ob) reset_both(r, ob, std::min(oe, nb), false);
          if (oe > std::max(ob, ne)) reset_both(r, std::max(ob, ne), oe, false);
        }
        spans = next;
        gpu()->copy_bytes(d_spans.data(), spans.data(), static_cast<int64_t>(spans.size()) * 4);
      }
      if (elastic && call % 30 == 29) {  // reset a random row's partition on both sides
        const auto row = static_cast<int32_t>(rng() % rows);
        const int32_t b = spans[2 * static_cast<size_t>(row)], e = spans[2 * static_cast<size_t>(row) + 1];
        if (e > b) reset_both(row, b, e, true);
      } else if (call % 30 == 29) {  // reset a random row on both sides
        kernels::ResidencyResetParams rp;
        rp.row = static_cast<int32_t>(rng() % rows);
        rp.slots_per_row = per_row;
        rp.page_slot = page_slot.data();
        rp.slot_page = slot_page.data();
        rp.slot_stamp = stamp.data();
        rp.row_clock = clock.data();
        ASSERT_TRUE(kernels::cpu::page_residency_reset(rp).ok());
        rp.page_slot = d_page_slot.as<int32_t>();
        rp.slot_page = d_slot_page.as<int32_t>();
        rp.slot_stamp = d_stamp.as<int32_t>();
        rp.row_clock = d_clock.as<int32_t>();
        gpu()->page_residency_reset(rp);
      }
      std::vector<int32_t> batch(rows);
      std::iota(batch.begin(), batch.end(), 0);
      std::shuffle(batch.begin(), batch.end(), rng);
      batch.resize(1 + rng() % rows);
      const auto n = static_cast<int32_t>(batch.size());
      const int32_t stride = blocks / rows;
      std::vector<int32_t> kv_lens(n), table(static_cast<size_t>(n) * stride), sel_rows(n);
      std::vector<int32_t> selected(static_cast<size_t>(n) * heads * max_sel, 0),
          num_selected(static_cast<size_t>(n) * heads, 0);
      for (int32_t s = 0; s < n; ++s) {
        const int32_t r = batch[static_cast<size_t>(s)];
        std::copy(perm.begin() + r * stride, perm.begin() + (r + 1) * stride,
                  table.begin() + s * stride);
        // Causal heads read every page: keep 2 selecting heads' lists + 1 causal head within the
        // partition most of the time; sometimes overflow on purpose (a long causal context).
        const bool overflow = rng() % 10 == 0;
        kv_lens[static_cast<size_t>(s)] =
            overflow ? stride * pt : 1 + static_cast<int32_t>(rng() % (100 * pt));
        const int32_t np = (kv_lens[static_cast<size_t>(s)] - 1) / pt + 1;
        sel_rows[static_cast<size_t>(s)] = rng() % 4 == 0 ? -1 : s;
        for (int32_t g = 0; g < heads; ++g) {
          const int32_t cnt = static_cast<int32_t>(rng() % max_sel);
          const size_t base = (static_cast<size_t>(s) * heads + g);
          num_selected[base] = cnt;
          std::vector<int32_t> list;
          for (int32_t i = 0; i < cnt; ++i) list.push_back(static_cast<int32_t>(rng() % (np + 3)));
          if (rng() % 2) std::sort(list.begin(), list.end());  // also unsorted, duplicates
          std::copy(list.begin(), list.end(), selected.begin() + base * max_sel);
        }
      }
      kernels::PageResidencyParams p;
      p.num_seqs = n;
      p.num_kv_heads = heads;
      p.page_tokens = pt;
      p.heads_per_block = hpb;
      p.num_blocks = blocks;
      p.retrieval_blocks_stride = stride;
      p.max_selected = max_sel;
      p.slots_per_row = per_row;
      p.num_cache_slots = slots;
      p.replacement = replacement;
      p.bucket_ticks = 3;
      p.num_buckets = 8;
      p.max_copies = slots;
      // CPU
      std::vector<int32_t> src(slots), dst(slots);
      int32_t count = 0;
      kernels::PageResidencyParams c = p;
      c.kv_lens = kv_lens.data();
      c.head_mode = mode.data();
      c.head_slot = hslot.data();
      c.retrieval_blocks = table.data();
      c.selected_rows = sel_rows.data();
      c.selected = selected.data();
      c.num_selected = num_selected.data();
      c.cache_rows = batch.data();
      c.row_slots = elastic ? spans.data() : nullptr;
      c.page_slot = page_slot.data();
      c.slot_page = slot_page.data();
      c.slot_stamp = stamp.data();
      c.row_clock = clock.data();
      c.copy_src = src.data();
      c.copy_dst = dst.data();
      c.copy_count = &count;
      c.error = &cpu_error;
      c.counters = counters;
      c.row_counters = row_counters.data();
      ASSERT_TRUE(kernels::cpu::page_residency(c, cpu_pool()).ok());
      // GPU
      DeviceArray d_kv = DeviceArray::of(kv_lens), d_mode = DeviceArray::of(mode),
                  d_hslot = DeviceArray::of(hslot), d_table = DeviceArray::of(table),
                  d_sel_rows = DeviceArray::of(sel_rows), d_sel = DeviceArray::of(selected),
                  d_nsel = DeviceArray::of(num_selected), d_rows = DeviceArray::of(batch);
      kernels::PageResidencyParams g = p;
      g.kv_lens = d_kv.as<int32_t>();
      g.head_mode = d_mode.as<int32_t>();
      g.head_slot = d_hslot.as<int32_t>();
      g.retrieval_blocks = d_table.as<int32_t>();
      g.selected_rows = d_sel_rows.as<int32_t>();
      g.selected = d_sel.as<int32_t>();
      g.num_selected = d_nsel.as<int32_t>();
      g.cache_rows = d_rows.as<int32_t>();
      g.row_slots = elastic ? d_spans.as<int32_t>() : nullptr;
      g.page_slot = d_page_slot.as<int32_t>();
      g.slot_page = d_slot_page.as<int32_t>();
      g.slot_stamp = d_stamp.as<int32_t>();
      g.row_clock = d_clock.as<int32_t>();
      g.copy_src = d_src.as<int32_t>();
      g.copy_dst = d_dst.as<int32_t>();
      g.scratch = d_scratch.as<int32_t>();
      auto* small = static_cast<char*>(d_small.data());
      g.copy_count = reinterpret_cast<int32_t*>(small);
      g.error = reinterpret_cast<int32_t*>(small + 4);
      g.counters = reinterpret_cast<int64_t*>(small + 8);
      g.row_counters = d_row_counters.as<int64_t>();
      gpu()->page_residency(g);
      ASSERT_TRUE(gpu()->take_error().ok());
      const auto small_host = d_small.download_as<int32_t>();
      ASSERT_EQ(small_host[0], count) << "call " << call;
      ASSERT_EQ(small_host[1], cpu_error) << "call " << call;
      const auto d_counters = d_small.download_as<int64_t>();
      ASSERT_EQ(d_counters[1], counters[0]);
      ASSERT_EQ(d_counters[2], counters[1]);
      ASSERT_EQ(d_row_counters.download_as<int64_t>(), row_counters) << "call " << call;
      std::vector<std::pair<int32_t, int32_t>> want, got;
      const auto gs = d_src.download_as<int32_t>(), gd = d_dst.download_as<int32_t>();
      for (int32_t i = 0; i < count; ++i) {
        want.push_back({src[static_cast<size_t>(i)], dst[static_cast<size_t>(i)]});
        got.push_back({gs[static_cast<size_t>(i)], gd[static_cast<size_t>(i)]});
      }
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, want) << "call " << call;
      ASSERT_EQ(d_page_slot.download_as<int32_t>(), page_slot) << "call " << call;
      ASSERT_EQ(d_slot_page.download_as<int32_t>(), slot_page) << "call " << call;
      ASSERT_EQ(d_stamp.download_as<int32_t>(), stamp) << "call " << call;
      ASSERT_EQ(d_clock.download_as<int32_t>(), clock) << "call " << call;
    }
    EXPECT_GT(counters[0], 0);
    EXPECT_GT(counters[1], 0);
    EXPECT_EQ(cpu_error, kernels::kResidencyOverflow);  // the long causal contexts overflowed
  }
}

// Every retrieval head-page moved to a random cache slot; the homes poisoned.
void check_tiered_attention(AttentionScenario& sc, std::mt19937& rng, const char* what) {
  const std::vector<float> ref = sc.run_gpu();
  const DType dt = sc.config().dtype;
  DeviceArray out(dtype_nbytes(dt, sc.out_numel()));
  out.poison(dt, sc.out_numel());
  kernels::AttentionParams dp = sc.device_params(out.data());
  const kernels::PagedKvPool home = dp.retrieval;
  const int64_t pages = int64_t{home.num_blocks} * home.heads_per_block;
  const int64_t page_bytes = dtype_nbytes(dt, int64_t{home.page_tokens} * home.head_dim);
  std::vector<int32_t> slot_of(static_cast<size_t>(pages));
  std::iota(slot_of.begin(), slot_of.end(), 0);
  std::shuffle(slot_of.begin(), slot_of.end(), rng);
  DeviceArray ck(pages * page_bytes), cv(pages * page_bytes);
  for (int64_t h = 0; h < pages; ++h) {
    gpu()->copy_bytes(static_cast<char*>(ck.data()) + slot_of[static_cast<size_t>(h)] * page_bytes,
                      static_cast<const char*>(home.k) + h * page_bytes, page_bytes);
    gpu()->copy_bytes(static_cast<char*>(cv.data()) + slot_of[static_cast<size_t>(h)] * page_bytes,
                      static_cast<const char*>(home.v) + h * page_bytes, page_bytes);
  }
  DeviceArray d_slot = DeviceArray::of(slot_of);
  DeviceArray poisoned_k(pages * page_bytes), poisoned_v(pages * page_bytes);
  poisoned_k.poison(dt, pages * page_bytes / dtype_size(dt));
  poisoned_v.poison(dt, pages * page_bytes / dtype_size(dt));
  dp.retrieval.k = ck.data();
  dp.retrieval.v = cv.data();
  dp.retrieval.home_k = poisoned_k.data();
  dp.retrieval.home_v = poisoned_v.data();
  dp.retrieval.page_slot = d_slot.as<int32_t>();
  dp.retrieval.num_cache_slots = static_cast<int32_t>(pages);
  gpu()->attention(dp);
  const std::vector<float> got = out.download_floats(dt, sc.out_numel());
  ASSERT_TRUE(gpu()->take_error().ok());
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i] == ref[i] || (std::isnan(got[i]) && std::isnan(ref[i])))
        << what << ": element " << i << " " << got[i] << " vs " << ref[i];
  }
}

TEST(CudaKvTier, AttentionReadsSlotsBitwiseLikeTheUntieredPool) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(77);
  for (int32_t d : {64, 128}) {
    ScenarioConfig cfg;
    cfg.head_dim = d;
    cfg.group = 4;
    cfg.page_tokens = 16;
    cfg.modes = {HeadMode::kSelected, HeadMode::kStreaming, HeadMode::kCausal};
    // decode: selections (raw lists) and a sequence without one
    SeqSpec a{.kv_len = 900, .q_len = 1, .local_tokens = 64, .selected_row = 0};
    a.selected = {{0, 3, 9, 20, 40, 55}, {}, {}};
    SeqSpec b{.kv_len = 333, .q_len = 1, .local_tokens = 64};
    AttentionScenario decode(rng, cfg, {a, b});
    check_tiered_attention(decode, rng, "decode");
    // prefill chunks, at head_dim 128 also with the warp-specialised kernel's TMA loads for every
    // span
    AttentionScenario prefill(rng, cfg, {SeqSpec{.kv_len = 300, .q_len = 300},
                                         SeqSpec{.kv_len = 700, .q_len = 137}});
    check_tiered_attention(prefill, rng, "prefill");
    if (d == 128) {  // the warp-specialised kernel (kAuto's at head_dim 128)
      kernels::cuda::AttentionOptions tma;
      tma.prefill_tma_min_blocks = 0;
      ScopedAttentionOptions scoped(tma);
      check_tiered_attention(prefill, rng, "prefill, TMA");
    }
  }
}

TEST(CudaKvTier, AppendWritesHomesThroughAndResidentSlots) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(91);
  const int32_t heads = 2, d = 64, pt = 16, blocks = 12, num_seqs = 2;
  const DType dt = DType::kBF16;
  const int64_t pages = int64_t{blocks} * heads;
  const int64_t page_elems = int64_t{pt} * d;
  const std::vector<int32_t> q_indptr = {0, 5, 6}, kv_lens = {5, 40};
  const std::vector<int32_t> mode = {static_cast<int32_t>(HeadMode::kCausal),
                                     static_cast<int32_t>(HeadMode::kSelected)};
  const std::vector<int32_t> hslot = {0, 1};
  const int32_t stride = 4;
  const std::vector<int32_t> table = {7, -1, -1, -1, 2, 9, 4, -1};
  const int32_t tokens = 6;
  HostArray k = random_array(rng, int64_t{tokens} * heads * d, dt),
            v = random_array(rng, int64_t{tokens} * heads * d, dt);
  // Half of the pages resident at random slots; cache and homes start with random bytes.
  std::vector<int32_t> slot_of(static_cast<size_t>(pages), -1);
  std::vector<int32_t> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < pages; i += 2) slot_of[static_cast<size_t>(order[static_cast<size_t>(i)])] = static_cast<int32_t>(i / 2);
  const int32_t slots = static_cast<int32_t>(pages / 2);
  HostArray home = random_array(rng, pages * page_elems, dt), home_v = random_array(rng, pages * page_elems, dt);
  // A resident slot holds its home's bytes (the tier's invariant the append must keep).
  HostArray cache(slots * page_elems, dt), cache_v(slots * page_elems, dt);
  const int64_t pb = dtype_nbytes(dt, page_elems);
  for (int64_t h = 0; h < pages; ++h) {
    const int32_t s = slot_of[static_cast<size_t>(h)];
    if (s < 0) continue;
    std::copy(home.bytes.begin() + h * pb, home.bytes.begin() + (h + 1) * pb, cache.bytes.begin() + s * pb);
    std::copy(home_v.bytes.begin() + h * pb, home_v.bytes.begin() + (h + 1) * pb, cache_v.bytes.begin() + s * pb);
  }
  DeviceArray d_k = DeviceArray::of(k), d_v = DeviceArray::of(v), d_home = DeviceArray::of(home),
              d_home_v = DeviceArray::of(home_v), d_cache = DeviceArray::of(cache),
              d_cache_v = DeviceArray::of(cache_v), d_slot = DeviceArray::of(slot_of),
              d_indptr = DeviceArray::of(q_indptr), d_kv = DeviceArray::of(kv_lens),
              d_mode = DeviceArray::of(mode), d_hslot = DeviceArray::of(hslot),
              d_table = DeviceArray::of(table);
  kernels::KvAppendParams p;
  p.src_dtype = dt;
  p.num_tokens = tokens;
  p.num_kv_heads = heads;
  p.head_dim = d;
  p.num_seqs = num_seqs;
  p.retrieval_blocks_stride = stride;
  p.retrieval.dtype = dt;
  p.retrieval.num_blocks = blocks;
  p.retrieval.heads_per_block = heads;
  p.retrieval.page_tokens = pt;
  p.retrieval.head_dim = d;
  p.retrieval.num_cache_slots = slots;
  // CPU on host copies
  kernels::KvAppendParams c = p;
  HostArray h_home = home, h_home_v = home_v, h_cache = cache, h_cache_v = cache_v;
  c.k = k.data();
  c.v = v.data();
  c.q_indptr = q_indptr.data();
  c.kv_lens = kv_lens.data();
  c.head_mode = mode.data();
  c.head_slot = hslot.data();
  c.retrieval_blocks = table.data();
  c.retrieval.k = h_cache.data();
  c.retrieval.v = h_cache_v.data();
  c.retrieval.home_k = h_home.data();
  c.retrieval.home_v = h_home_v.data();
  c.retrieval.page_slot = slot_of.data();
  kernels::cpu::kv_append(c, cpu_pool());
  // GPU
  p.k = d_k.data();
  p.v = d_v.data();
  p.q_indptr = d_indptr.as<int32_t>();
  p.kv_lens = d_kv.as<int32_t>();
  p.head_mode = d_mode.as<int32_t>();
  p.head_slot = d_hslot.as<int32_t>();
  p.retrieval_blocks = d_table.as<int32_t>();
  p.retrieval.k = d_cache.data();
  p.retrieval.v = d_cache_v.data();
  p.retrieval.home_k = d_home.data();
  p.retrieval.home_v = d_home_v.data();
  p.retrieval.page_slot = d_slot.as<int32_t>();
  gpu()->kv_append(p);
  ASSERT_TRUE(gpu()->take_error().ok());
  EXPECT_EQ(d_home.download(), h_home.bytes);
  EXPECT_EQ(d_home_v.download(), h_home_v.bytes);
  EXPECT_EQ(d_cache.download(), h_cache.bytes);
  EXPECT_EQ(d_cache_v.download(), h_cache_v.bytes);
  // And the CPU result is itself the write-through: resident slots equal their homes.
  for (int64_t h = 0; h < pages; ++h) {
    const int32_t s = slot_of[static_cast<size_t>(h)];
    if (s < 0) continue;
    EXPECT_TRUE(std::equal(h_cache.bytes.begin() + s * pb, h_cache.bytes.begin() + (s + 1) * pb,
                           h_home.bytes.begin() + h * pb));
  }
}

}  // namespace
}  // namespace ls::cuda_test
