// Where one tiered decode layer's time goes (the host KV tier, docs/hierarchical-kv.md), kernel by
// kernel, at the Llama-3-8B shape under lserve (8 kv heads: 4 retrieval heads with a 4096-token
// budget, i.e. 63 listed pages of 64 tokens plus the tail; 4 streaming heads with 128 sinks and a
// 256-token window; d 128, bf16). For each batch B and context C, one JSON line per measurement:
//  - "tier_residency": the residency op (memset of the copy count + one kernel) for one layer, at
//    the partition size each --ratios buffer ratio gives (slots_per_row = min(all of a request's
//    head-pages, max(one layer's pages, ratio x one decode step's mandatory pages)), as
//    model_stack sizes it) with a --miss-fractions share of the layer's mandatory pages missing.
//    The partition is full (steady state: no free slot) and its stamps spread over the last 80
//    decode steps, so victims come from the oldest buckets. Timed as a graph of calls, each after
//    a restore of the residency state (device copies); the restores alone are timed the same way
//    and subtracted. "copies" is the copy count the op produced (B x misses when it works).
//  - "tier_copy": the gather kernel moving N head-pages (K and V, 16 KiB each) from random pages
//    of a pinned host pool to random cache slots, with the count in device memory (as the engine
//    records it) and max_pages = the whole cache, for N = 0 (the launch alone) and each miss
//    count above.
//  - "tier_attention": the decode attention call (all 8 heads), untiered (the retrieval pool
//    indexed by block) and tiered (the same pages, all resident, read through page_slot from
//    random cache slots: the tiered kernel instantiation), as graphs of calls rotating over 8
//    selections (more bytes than the L2 holds).
//  - "tier_layer": per buffer ratio and miss share, what the tier adds to one layer (residency +
//    copy of the misses + tiered minus untiered attention) and to a 32-layer step ("step_ms").
// The numbers separate the tier's fixed per-layer cost (launches, partition scans: the step cost
// at a 100% hit ratio) from its per-miss cost (PCIe reads).
// Usage: bench_cuda_kv_tier [--out FILE] [--batches 1,8] [--contexts 32768,131072]
//        [--ratios 1,2,4,5,8] [--miss-fractions 0,0.05,0.1,0.15] [--host-pool-mib 1024]

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/page_copy.h"
#include "kernels/page_residency.h"

namespace ls::bench {
namespace {

using kernels::HeadMode;

constexpr int32_t kQHeads = 32, kKvHeads = 8, kRetrieval = 4, kD = 128, kPage = 64;
constexpr int32_t kLayers = 32;
constexpr int32_t kBudgetPages = 4096 / kPage;  // 64: 63 listed + the tail page
constexpr int32_t kSinkTokens = 128, kSinkPages = 2, kLocal = 256;
constexpr int64_t kRowBytes = int64_t{kD} * 2;
constexpr int64_t kPageBytes = int64_t{kPage} * kRowBytes;  // 16 KiB
constexpr int32_t kBucketTicks = kLayers;                  // one decode step
constexpr int kCalls = 20;                                  // calls per timed graph
constexpr int kSelections = 8;                              // attention replicas

CudaBackend* g_b = nullptr;

Buffer alloc(int64_t bytes, MemoryTier tier = MemoryTier::kDevice) {
  auto buf = g_b->allocate(std::max<int64_t>(bytes, 16), tier);
  if (!buf.ok()) {
    std::fprintf(stderr, "bench_cuda_kv_tier: %s\n", buf.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*buf);
}

Buffer upload(const std::vector<int32_t>& v) {
  Buffer buf = alloc(static_cast<int64_t>(v.size()) * 4);
  if (!v.empty()) g_b->copy_bytes(buf.data(), v.data(), static_cast<int64_t>(v.size()) * 4);
  return buf;
}

void fill(void* p, int64_t bytes, uint64_t seed) {
  auto stream = static_cast<cudaStream_t>(g_b->stream_handle());
  die_on(fill_uniform_bf16(p, bytes / 2, seed, -1, 1, stream), "fill");
}

// Microseconds per call of `fn`, captured kCalls times in one graph and replayed; -1 when the
// capture failed. fn runs once uncaptured first (sizes scratch).
template <class Fn>
double graph_us(Fn&& fn) {
  fn();
  g_b->synchronize();
  double us = -1;
  if (g_b->begin_capture().ok()) {
    for (int i = 0; i < kCalls; ++i) fn();
    auto graph = g_b->end_capture();
    if (graph.ok()) us = median_ms(*g_b, 2, 9, [&] { (void)g_b->replay(*graph); }) * 1e3 / kCalls;
    g_b->drop_graphs();
  }
  return us;
}

kernels::PagedKvPool pool_view(void* k, void* v, int32_t blocks, int32_t hpb) {
  kernels::PagedKvPool p;
  p.k = k;
  p.v = v;
  p.dtype = DType::kBF16;
  p.num_blocks = blocks;
  p.heads_per_block = hpb;
  p.page_tokens = kPage;
  p.head_dim = kD;
  return p;
}

struct Case {
  int64_t B = 0, C = 0;
  int32_t pages = 0;      // per sequence
  int32_t mandatory = 0;  // head-pages the layer reads per sequence (retrieval heads)
  // Attention state shared by the residency op and the attention calls.
  Buffer indptr, lens, rows, modes, slots, rings, locals, s_table, table;
  std::vector<Buffer> selected, num_selected;  // kSelections replicas
  std::vector<std::vector<int32_t>> host_selected;  // [replica] [B, kKvHeads, kBudgetPages]
};

// Per (sequence, head) kBudgetPages - 1 listed pages: a sorted random choice in [0, pages - 2)
// and page pages - 2, so the tail is exactly the last page and every head reads kBudgetPages.
std::vector<int32_t> random_selection(const Case& c, std::mt19937& rng) {
  std::vector<int32_t> sel(static_cast<size_t>(c.B * kKvHeads * kBudgetPages), 0);
  std::vector<int32_t> all(static_cast<size_t>(c.pages - 2));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t s = 0; s < c.B; ++s) {
    for (int32_t g = 0; g < kKvHeads; ++g) {
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int32_t> pick(all.begin(), all.begin() + (kBudgetPages - 2));
      std::sort(pick.begin(), pick.end());
      pick.push_back(c.pages - 2);
      std::copy(pick.begin(), pick.end(),
                sel.begin() + (s * kKvHeads + g) * kBudgetPages);
    }
  }
  return sel;
}

kernels::AttentionParams attention_params(Case& c, void* q, void* o, int replica,
                                          const kernels::PagedKvPool& retrieval,
                                          const kernels::PagedKvPool& streaming) {
  kernels::AttentionParams p;
  p.q = q;
  p.out = o;
  p.q_dtype = DType::kBF16;
  p.num_tokens = static_cast<int32_t>(c.B);
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kD;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.num_seqs = static_cast<int32_t>(c.B);
  p.q_indptr = c.indptr.as<int32_t>();
  p.kv_lens = c.lens.as<int32_t>();
  p.head_mode = c.modes.as<int32_t>();
  p.head_slot = c.slots.as<int32_t>();
  p.retrieval = retrieval;
  p.retrieval_blocks = c.table.as<int32_t>();
  p.retrieval_blocks_stride = c.pages;
  p.streaming = streaming;
  p.streaming_blocks = c.s_table.as<int32_t>();
  p.streaming_blocks_stride = kSinkPages + (kLocal + kPage - 1) / kPage + 1;
  p.num_sink_pages = kSinkPages;
  p.ring_pages = c.rings.as<int32_t>();
  p.sink_tokens = kSinkTokens;
  p.local_tokens = c.locals.as<int32_t>();
  p.selected_rows = c.rows.as<int32_t>();
  p.selected = c.selected[static_cast<size_t>(replica)].as<int32_t>();
  p.num_selected = c.num_selected[static_cast<size_t>(replica)].as<int32_t>();
  p.max_selected = kBudgetPages;
  p.selection_just_written = false;
  return p;
}

struct AttentionTimes {
  double untiered_us = -1, tiered_us = -1;
};

AttentionTimes bench_attention(Case& c, JsonLines& out) {
  const int32_t ring = (kLocal + kPage - 1) / kPage + 1;
  const int32_t s_per_seq = kSinkPages + ring;
  const int64_t r_pages = c.B * c.pages * kRetrieval;  // head-pages of the layer's view
  Buffer q = alloc(c.B * kQHeads * kRowBytes), o = alloc(c.B * kQHeads * kRowBytes);
  fill(q.data(), q.bytes(), 41);
  Buffer k = alloc(r_pages * kPageBytes), v = alloc(r_pages * kPageBytes);
  fill(k.data(), k.bytes(), 42);
  fill(v.data(), v.bytes(), 43);
  Buffer sk = alloc(c.B * s_per_seq * kRetrieval * kPageBytes);
  Buffer sv = alloc(c.B * s_per_seq * kRetrieval * kPageBytes);
  fill(sk.data(), sk.bytes(), 44);
  fill(sv.data(), sv.bytes(), 45);
  const kernels::PagedKvPool streaming =
      pool_view(sk.data(), sv.data(), static_cast<int32_t>(c.B * s_per_seq), kRetrieval);
  // Tiered: the same buffers are the cache, every head-page at a random slot.
  std::vector<int32_t> perm(static_cast<size_t>(r_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(perm.begin(), perm.end(), rng);
  Buffer page_slot = upload(perm);
  const kernels::PagedKvPool plain =
      pool_view(k.data(), v.data(), static_cast<int32_t>(c.B * c.pages), kRetrieval);
  kernels::PagedKvPool tiered = plain;
  tiered.page_slot = page_slot.as<int32_t>();
  tiered.num_cache_slots = static_cast<int32_t>(r_pages);
  tiered.home_k = k.data();  // not read by attention
  tiered.home_v = v.data();

  AttentionTimes t;
  for (const bool is_tiered : {false, true}) {
    std::vector<kernels::AttentionParams> params;
    for (int r = 0; r < kSelections; ++r) {
      params.push_back(
          attention_params(c, q.data(), o.data(), r, is_tiered ? tiered : plain, streaming));
    }
    int i = 0;
    const double us = graph_us([&] { g_b->attention(params[static_cast<size_t>(i++ % kSelections)]); });
    const Status err = g_b->take_error();
    (is_tiered ? t.tiered_us : t.untiered_us) = us;
    out.write(fmt::format(
        R"({{"bench": "tier_attention", "batch": {}, "context": {}, "tiered": {}, "us": {:.2f}, "ok": {}}})",
        c.B, c.C, is_tiered ? "true" : "false", us, err.ok() && us > 0 ? "true" : "false"));
  }
  return t;
}

double bench_copy(Case& c, int64_t count, int64_t max_pages, Buffer& home_k, Buffer& home_v,
                  Buffer& cache_k, Buffer& cache_v, int64_t cache_slots, JsonLines& out) {
  const int64_t home_pages = home_k.bytes() / kPageBytes;
  std::mt19937 rng(static_cast<uint32_t>(count + 3));
  std::vector<int32_t> src(static_cast<size_t>(std::max<int64_t>(count, 1))),
      dst(static_cast<size_t>(std::max<int64_t>(count, 1)));
  std::uniform_int_distribution<int64_t> pick(0, home_pages - 1);
  for (auto& s : src) s = static_cast<int32_t>(pick(rng));
  std::vector<int32_t> slots(static_cast<size_t>(cache_slots));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  for (size_t i = 0; i < dst.size(); ++i) dst[i] = slots[i % slots.size()];
  Buffer d_src = upload(src), d_dst = upload(dst);
  Buffer d_count = upload({static_cast<int32_t>(count)});
  kernels::PageCopyParams p;
  p.src[0] = home_k.data();
  p.src[1] = home_v.data();
  p.dst[0] = cache_k.data();
  p.dst[1] = cache_v.data();
  p.num_arrays = 2;
  p.page_bytes = kPageBytes;
  p.src_stride_bytes = kPageBytes;
  p.dst_stride_bytes = kPageBytes;
  p.src_pages = d_src.as<int32_t>();
  p.dst_pages = d_dst.as<int32_t>();
  p.num_pages_device = d_count.as<int32_t>();
  p.max_pages = static_cast<int32_t>(max_pages);
  p.method = kernels::PageCopyMethod::kGatherKernel;
  const double us = graph_us([&] { g_b->copy_pages(p); });
  const Status err = g_b->take_error();
  const double gbps = us > 0 ? static_cast<double>(count * 2 * kPageBytes) / (us * 1e-6) / 1e9 : 0;
  out.write(fmt::format(
      R"({{"bench": "tier_copy", "batch": {}, "context": {}, "pages": {}, "max_pages": {}, "us": {:.2f}, "gbps": {:.2f}, "ok": {}}})",
      c.B, c.C, count, max_pages, us, gbps, err.ok() && us > 0 ? "true" : "false"));
  return us;
}

// The residency op for one layer of B sequences: partition of `per_row` slots, full, with
// `misses` of each sequence's mandatory pages not resident. Returns us per call.
double bench_residency(Case& c, int32_t per_row, int32_t misses, int replica, JsonLines& out,
                       int64_t* copies_out) {
  std::mt19937 rng(static_cast<uint32_t>(per_row * 31 + misses));
  const std::vector<int32_t>& sel = c.host_selected[static_cast<size_t>(replica)];
  const int32_t resident_mandatory = c.mandatory - misses;
  const int32_t filler = per_row - resident_mandatory;  // other layers' / older pages
  const int32_t filler_blocks = (filler + kRetrieval - 1) / kRetrieval;
  const int64_t table_blocks = c.B * c.pages;
  const int64_t num_blocks = table_blocks + c.B * filler_blocks;
  const int64_t num_home = num_blocks * kRetrieval;
  const int64_t slots = c.B * per_row;
  std::vector<int32_t> page_slot(static_cast<size_t>(num_home), -1);
  std::vector<int32_t> slot_page(static_cast<size_t>(slots), -1), stamp(static_cast<size_t>(slots));
  std::vector<int32_t> clock(static_cast<size_t>(c.B), 1'000'000);
  std::uniform_int_distribution<int32_t> age(1, 80 * kBucketTicks);
  std::vector<int32_t> table(static_cast<size_t>(table_blocks));  // block of (s, j) = s * pages + j
  std::iota(table.begin(), table.end(), 0);
  for (int64_t s = 0; s < c.B; ++s) {
    // The sequence's mandatory head-pages: head slot h (kv head 2h + 1), listed pages + the tail.
    std::vector<int64_t> mand;
    for (int32_t h = 0; h < kRetrieval; ++h) {
      const int32_t g = 2 * h + 1;
      const int32_t* list = sel.data() + (s * kKvHeads + g) * kBudgetPages;
      for (int32_t i = 0; i < kBudgetPages - 1; ++i) mand.push_back((s * c.pages + list[i]) * kRetrieval + h);
      for (int32_t j = list[kBudgetPages - 2] + 1; j < c.pages; ++j) mand.push_back((s * c.pages + j) * kRetrieval + h);
    }
    std::shuffle(mand.begin(), mand.end(), rng);
    std::vector<int32_t> row_slots(static_cast<size_t>(per_row));
    std::iota(row_slots.begin(), row_slots.end(), static_cast<int32_t>(s * per_row));
    std::shuffle(row_slots.begin(), row_slots.end(), rng);
    size_t k = 0;
    for (int32_t i = 0; i < resident_mandatory && i < static_cast<int32_t>(mand.size()); ++i, ++k) {
      slot_page[static_cast<size_t>(row_slots[k])] = static_cast<int32_t>(mand[static_cast<size_t>(i)]);
      page_slot[static_cast<size_t>(mand[static_cast<size_t>(i)])] = row_slots[k];
    }
    const int64_t filler_base = (table_blocks + s * filler_blocks) * kRetrieval;
    for (int32_t f = 0; k < row_slots.size(); ++k, ++f) {
      slot_page[static_cast<size_t>(row_slots[k])] = static_cast<int32_t>(filler_base + f);
      page_slot[static_cast<size_t>(filler_base + f)] = row_slots[k];
    }
    for (int32_t i = 0; i < per_row; ++i) stamp[static_cast<size_t>(s * per_row + i)] = 1'000'000 - age(rng);
  }
  Buffer d_table = upload(table);
  Buffer ps0 = upload(page_slot), sp0 = upload(slot_page), st0 = upload(stamp), cl0 = upload(clock);
  Buffer ps = upload(page_slot), sp = upload(slot_page), st = upload(stamp), cl = upload(clock);
  Buffer copy_src = alloc(slots * 4), copy_dst = alloc(slots * 4), scratch = alloc(slots * 4);
  Buffer small = alloc(32);
  g_b->fill_zero(small.data(), 32);
  auto* sm = static_cast<char*>(small.data());

  kernels::PageResidencyParams r;
  r.num_seqs = static_cast<int32_t>(c.B);
  r.kv_lens = c.lens.as<int32_t>();
  r.num_kv_heads = kKvHeads;
  r.head_mode = c.modes.as<int32_t>();
  r.head_slot = c.slots.as<int32_t>();
  r.page_tokens = kPage;
  r.heads_per_block = kRetrieval;
  r.num_blocks = static_cast<int32_t>(num_blocks);
  r.retrieval_blocks = d_table.as<int32_t>();
  r.retrieval_blocks_stride = c.pages;
  r.selected_rows = c.rows.as<int32_t>();
  r.selected = c.selected[static_cast<size_t>(replica)].as<int32_t>();
  r.num_selected = c.num_selected[static_cast<size_t>(replica)].as<int32_t>();
  r.max_selected = kBudgetPages;
  r.cache_rows = c.rows.as<int32_t>();
  r.slots_per_row = per_row;
  r.num_cache_slots = static_cast<int32_t>(slots);
  r.page_slot = ps.as<int32_t>();
  r.slot_page = sp.as<int32_t>();
  r.slot_stamp = st.as<int32_t>();
  r.row_clock = cl.as<int32_t>();
  r.replacement = kernels::Replacement::kBucketedLru;
  r.bucket_ticks = kBucketTicks;
  r.num_buckets = 64;
  r.copy_src = copy_src.as<int32_t>();
  r.copy_dst = copy_dst.as<int32_t>();
  r.copy_count = reinterpret_cast<int32_t*>(sm);
  r.max_copies = static_cast<int32_t>(slots);
  r.error = reinterpret_cast<int32_t*>(sm + 4);
  r.counters = reinterpret_cast<int64_t*>(sm + 8);
  r.scratch = scratch.as<int32_t>();
  auto restore = [&] {
    g_b->copy_bytes(ps.data(), ps0.data(), ps.bytes());
    g_b->copy_bytes(sp.data(), sp0.data(), sp.bytes());
    g_b->copy_bytes(st.data(), st0.data(), st.bytes());
    g_b->copy_bytes(cl.data(), cl0.data(), cl.bytes());
  };
  // Sanity: one call from the restored state.
  restore();
  g_b->page_residency(r);
  int32_t head[2] = {0, 0};
  g_b->copy_bytes(head, small.data(), 8);
  g_b->synchronize();
  *copies_out = head[0];
  const double both = graph_us([&] {
    restore();
    g_b->page_residency(r);
  });
  const double restore_only = graph_us(restore);
  const Status err = g_b->take_error();
  const double us = both > 0 && restore_only > 0 ? both - restore_only : -1;
  out.write(fmt::format(
      R"({{"bench": "tier_residency", "batch": {}, "context": {}, "slots_per_row": {}, "mandatory": {}, "misses": {}, "copies": {}, "overflow": {}, "us": {:.2f}, "restore_us": {:.2f}, "ok": {}}})",
      c.B, c.C, per_row, c.mandatory, misses, head[0], head[1], us, restore_only,
      err.ok() && us > 0 && head[1] == 0 && head[0] == c.B * misses ? "true" : "false"));
  return us;
}

void run_case(int64_t B, int64_t C, const std::vector<int64_t>& ratios,
              const std::vector<double>& fractions, int64_t host_pool_bytes, JsonLines& out) {
  Case c;
  c.B = B;
  c.C = C;
  c.pages = static_cast<int32_t>((C + kPage - 1) / kPage);
  c.mandatory = kRetrieval * kBudgetPages;  // 63 listed + the tail page, per head
  std::vector<int32_t> mode, slot;
  for (int32_t g = 0; g < kKvHeads; ++g) {
    const bool streaming = g % 2 == 0;
    mode.push_back(static_cast<int32_t>(streaming ? HeadMode::kStreaming : HeadMode::kSelected));
    slot.push_back(g / 2);
  }
  std::vector<int32_t> indptr(static_cast<size_t>(B + 1)), rows(static_cast<size_t>(B));
  std::iota(indptr.begin(), indptr.end(), 0);
  std::iota(rows.begin(), rows.end(), 0);
  const int32_t ring = (kLocal + kPage - 1) / kPage + 1;
  const int32_t s_per_seq = kSinkPages + ring;
  std::vector<int32_t> s_table(static_cast<size_t>(B * s_per_seq));
  std::iota(s_table.begin(), s_table.end(), 0);
  std::vector<int32_t> table(static_cast<size_t>(B * c.pages));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(11);
  std::shuffle(table.begin(), table.end(), rng);
  c.indptr = upload(indptr);
  c.lens = upload(std::vector<int32_t>(static_cast<size_t>(B), static_cast<int32_t>(C)));
  c.rows = upload(rows);
  c.modes = upload(mode);
  c.slots = upload(slot);
  c.rings = upload(std::vector<int32_t>(static_cast<size_t>(B), ring));
  c.locals = upload(std::vector<int32_t>(static_cast<size_t>(B), kLocal));
  c.s_table = upload(s_table);
  c.table = upload(table);
  for (int r = 0; r < kSelections; ++r) {
    c.host_selected.push_back(random_selection(c, rng));
    c.selected.push_back(upload(c.host_selected.back()));
    c.num_selected.push_back(upload(
        std::vector<int32_t>(static_cast<size_t>(B * kKvHeads), kBudgetPages - 1)));
  }
  const AttentionTimes at = bench_attention(c, out);

  // Copies: a pinned host pool and a device cache big enough for the largest miss count.
  Buffer home_k = alloc(host_pool_bytes / 2, MemoryTier::kHost);
  Buffer home_v = alloc(host_pool_bytes / 2, MemoryTier::kHost);
  const int64_t cache_slots = std::max<int64_t>(B * c.mandatory, 1024);
  Buffer cache_k = alloc(cache_slots * kPageBytes), cache_v = alloc(cache_slots * kPageBytes);
  for (const int64_t ratio : ratios) {
    const int64_t all_pages = int64_t{c.pages} * kRetrieval * kLayers;
    const int64_t step_need = int64_t{kLayers} * kRetrieval * (kBudgetPages + 1);
    const auto per_row = static_cast<int32_t>(
        std::min(all_pages, std::max<int64_t>(int64_t{c.pages} * kRetrieval, ratio * step_need)));
    const double zero_copy =
        bench_copy(c, 0, B * per_row, home_k, home_v, cache_k, cache_v, cache_slots, out);
    for (const double f : fractions) {
      const auto misses = static_cast<int32_t>(std::lround(f * c.mandatory));
      int64_t copies = 0;
      const double res_us = bench_residency(c, per_row, misses, 0, out, &copies);
      const double copy_us =
          misses == 0 ? zero_copy
                      : bench_copy(c, B * misses, B * per_row, home_k, home_v, cache_k, cache_v,
                                   cache_slots, out);
      const double attn_extra = at.tiered_us - at.untiered_us;
      const double layer_us = res_us + copy_us + attn_extra;
      out.write(fmt::format(
          R"({{"bench": "tier_layer", "batch": {}, "context": {}, "ratio": {}, "slots_per_row": {}, "hit_ratio": {:.3f}, "residency_us": {:.2f}, "copy_us": {:.2f}, "attention_extra_us": {:.2f}, "attention_us": {:.2f}, "layer_extra_us": {:.2f}, "step_extra_ms": {:.3f}}})",
          B, C, ratio, per_row, 1.0 - static_cast<double>(misses) / c.mandatory, res_us, copy_us,
          attn_extra, at.untiered_us, layer_us, layer_us * kLayers / 1e3));
    }
  }
}

int run(int argc, char** argv) {
  auto backend = CudaBackend::create(0);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_cuda_kv_tier: %s\n", backend.status().to_string().c_str());
    return 2;
  }
  g_b = backend->get();
  std::printf("# %s\n", g_b->name().c_str());
  JsonLines out(arg(argc, argv, "--out", ""));
  std::vector<double> fractions;
  {
    const std::string s = arg(argc, argv, "--miss-fractions", "0,0.05,0.1,0.15");
    size_t pos = 0;
    while (pos < s.size()) {
      const size_t comma = s.find(',', pos);
      fractions.push_back(std::stod(s.substr(pos, comma - pos)));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  const int64_t host_mib = parse_list(arg(argc, argv, "--host-pool-mib", "1024"))[0];
  for (const int64_t B : parse_list(arg(argc, argv, "--batches", "1,8"))) {
    for (const int64_t C : parse_list(arg(argc, argv, "--contexts", "32768,131072"))) {
      run_case(B, C, parse_list(arg(argc, argv, "--ratios", "1,2,4,5,8")), fractions,
               host_mib << 20, out);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  return ls::bench::run(argc, argv);
}
