#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attention_pages.h"
#include "kernels/cpu/attention_quant_fp8.h"
#include "kernels/cpu/attention_quant_int.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/kv_dequant.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

constexpr int32_t kTileRows = 64;         // target query rows (tokens x group heads) per tile
constexpr int32_t kMinPagesPerChunk = 4;  // a split chunk covers at least this many pages
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One unit of scheduled work: a query tile of one (sequence, kv head), or one chunk of its
// page list when the tile is split.
struct Item {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t q_row = 0;       // first query row (index into q / out tokens)
  int32_t num_q = 0;       // query tokens in the tile
  int64_t first_pos = 0;   // absolute position of the tile's first query
  int32_t page_begin = 0;  // chunk [page_begin, page_end) of the tile's visible page list
  int32_t page_end = 0;
  int32_t partial = -1;  // partial slot, or -1 when the item writes out directly
  int64_t cost = 0;      // rows x visible tokens, for largest-first scheduling
};

// A split tile: chunks in slots [first_slot, first_slot + num_slots), merged after the run.
struct SplitGroup {
  Item tile;
  int32_t first_slot = 0;
  int32_t num_slots = 0;
};

// Partial softmax states of split chunks: slot i holds [rows, head_dim] o, [rows] m and l.
struct Partials {
  std::vector<int64_t> offset;  // [slots + 1] float offsets into o (rows * head_dim each)
  std::vector<float> o;
  std::vector<float> m;  // [sum of rows] indexed by offset / head_dim
  std::vector<float> l;
};

// Kept across calls (one call per layer per decode step).
struct Plan {
  std::vector<Item> items;
  std::vector<SplitGroup> groups;
  Partials partials;
};

Plan& caller_plan() {
  thread_local Plan plan;
  return plan;
}

struct Geometry {
  int32_t group = 0;
  int32_t head_dim = 0;
  int64_t q_row_bytes = 0;  // one head's row in q / out
};

// Per-thread buffers, grown on demand and kept across calls (decode issues one call per
// layer per step; reallocating would dominate short calls).
struct ThreadScratch {
  std::vector<float> q, s, kf, vf, o, m, l, alpha, row;
  std::vector<PageVisit> pages;
  // Binds a tile of `rows` rows against pages of `page_tokens` keys; the lanes layout pads
  // the rows to whole vectors of `width`; `dequant` keeps f32 K and V pages (quantized pools).
  TileState bind(int32_t rows, int32_t head_dim, int32_t page_tokens, int32_t width, bool lanes,
                 bool dequant = false) {
    const auto grow = [](std::vector<float>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    };
    TileState t;
    t.rows = rows;
    t.lanes = lanes;
    t.padded_rows = lanes ? (rows + width - 1) / width * width : rows;
    t.head_dim = head_dim;
    t.ld_s = (page_tokens + width - 1) / width * width;
    grow(q, int64_t{t.padded_rows} * head_dim);
    grow(s, lanes ? int64_t{page_tokens} * t.padded_rows : int64_t{rows} * t.ld_s);
    grow(kf, lanes || dequant ? int64_t{page_tokens} * head_dim : 0);
    grow(vf, dequant ? int64_t{page_tokens} * head_dim : 0);
    grow(o, int64_t{rows} * head_dim);
    grow(m, t.padded_rows);
    grow(l, t.padded_rows);
    grow(alpha, t.padded_rows);
    grow(row, head_dim);
    t.q = q.data();
    t.s = s.data();
    t.kf = kf.data();
    t.o = o.data();
    t.m = m.data();
    t.l = l.data();
    t.alpha = alpha.data();
    return t;
  }
};

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

void* out_row(const AttentionParams& p, const Geometry& geo, int64_t token, int32_t q_head) {
  return static_cast<char*>(p.out) + (token * p.num_q_heads + q_head) * geo.q_row_bytes;
}

// out rows of a tile = o / l (0 where l == 0), converted to q_dtype.
template <class S>
void write_rows(const AttentionParams& p, const Geometry& geo, const Item& it, const float* o,
                const float* l, float* tmp) {
  constexpr int64_t kW = S::kWidth;
  const int64_t d = geo.head_dim;
  for (int32_t t = 0; t < it.num_q; ++t) {
    for (int32_t h = 0; h < geo.group; ++h) {
      const int64_t r = int64_t{t} * geo.group + h;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      void* dst = out_row(p, geo, it.q_row + t, it.kv_head * geo.group + h);
      float* f = p.q_dtype == DType::kF32 ? static_cast<float*>(dst) : tmp;
      const auto vinv = S::set1(inv);
      int64_t e = 0;
      for (; e + kW <= d; e += kW) S::store(f + e, S::mul(S::load(o + r * d + e), vinv));
      for (; e < d; ++e) f[e] = o[r * d + e] * inv;
      if (p.q_dtype != DType::kF32) convert_from_f32(tmp, p.q_dtype, dst, d);
    }
  }
}

// Scaled queries of the tile, in the layout of t (rows: [rows, head_dim]; lanes: transposed
// to [head_dim, padded_rows] with zero padding rows).
template <class S>
void load_queries(const AttentionParams& p, const Geometry& geo, const Item& it, const TileState& t,
                  float* tmp) {
  const int64_t d = geo.head_dim;
  if (t.lanes) std::fill(t.q, t.q + d * t.padded_rows, 0.0f);
  for (int32_t tok = 0; tok < it.num_q; ++tok) {
    for (int32_t h = 0; h < geo.group; ++h) {
      const int64_t r = int64_t{tok} * geo.group + h;
      const auto* src = static_cast<const char*>(p.q) +
                        ((int64_t{it.q_row} + tok) * p.num_q_heads + it.kv_head * geo.group + h) *
                            geo.q_row_bytes;
      float* dst = t.lanes ? tmp : t.q + r * d;
      simd::widen_to_f32<S>(p.q_dtype, src, dst, d);
      if (t.lanes) {
        for (int64_t e = 0; e < d; ++e) t.q[e * t.padded_rows + r] = dst[e] * p.scale;
      } else {
        for (int64_t e = 0; e < d; ++e) dst[e] *= p.scale;
      }
    }
  }
}

// Sets the scores of keys a row may not see to -inf: local indices outside
// [0, sink_end) u [window_begin, end); the rows layout also pads each row to ld_s.
void mask_scores(const TileState& t, int32_t row, const VisibleKeys& vk, int32_t keys) {
  if (!t.lanes) {
    float* srow = t.s + int64_t{row} * t.ld_s;
    std::fill(srow + vk.sink_end, srow + vk.window_begin, kNegInf);
    std::fill(srow + vk.end, srow + t.ld_s, kNegInf);
    return;
  }
  for (int32_t j = vk.sink_end; j < vk.window_begin; ++j) t.score(row, j) = kNegInf;
  for (int32_t j = vk.end; j < keys; ++j) t.score(row, j) = kNegInf;
}

// kKv: the pool's float dtype; a quantized pool runs with kKv = f32 on pages dequantized per
// visit into the tile's f32 buffers (kf, vf), so everything after the dequantization is the f32
// kernel; except decode tiles (rows layout) on quantized pages with AVX2 or AVX-512, whose Q·K^T
// and P·V run on the codes (int8 / int4: kernels/cpu/attention_quant_int.h; fp8:
// attention_quant_fp8.h). Those are 256-bit AVX2 code, which the AVX-512 instantiation calls
// too (an AVX-512 machine runs it natively): they read only the tile's buffers, whose rows-layout
// padding (to 8 or 16 floats) they do not depend on.
// kQuant: instantiated for quantized pools only, so the float pools' instantiations stay as
// they were (the fused paths' code would change GCC's inlining of their page loop).
template <class S, DType kKv, bool kQuant = false>
void run_item(const AttentionParams& p, const Geometry& geo, const Item& it, Partials& partials) {
  ThreadScratch& scratch = thread_scratch();
  const bool streaming = p.head_mode[it.kv_head] == static_cast<int32_t>(HeadMode::kStreaming);
  const PagedKvPool& kv = streaming ? p.streaming : p.retrieval;
  const int32_t pt = kv.page_tokens;
  const int32_t rows = it.num_q * geo.group;
  const int64_t d = geo.head_dim;
  const bool lanes = rows >= kLanesMinRows;
  const KvQuant quant = kv.quant;
  const bool dequant = quant != KvQuant::kNone;
  const int64_t page_bytes = pool_page_bytes(kv);
  TileState t = scratch.bind(rows, geo.head_dim, pt, S::kWidth, lanes, dequant);
  float* vf = scratch.vf.data();
  load_queries<S>(p, geo, it, t, scratch.row.data());
  bool int_path = false;  // int8 / int4 codes in integer dot products
  bool fp8_path = false;  // fp8 codes widened in registers
#if defined(LS_KERNELS_HAVE_AVX2)
  IntDecodeScratch* isc = nullptr;
  if constexpr (kQuant && !std::is_same_v<S, simd::Scalar>) {
    int_path = !lanes && int_decode_supported(quant, geo.head_dim, pt);
    fp8_path = !lanes && quant == KvQuant::kFp8 && geo.head_dim % 16 == 0;
    if (int_path) {
      isc = &int_decode_scratch();
      int_decode_begin(t, quant, pt, *isc);
    }
  }
#endif
  std::fill(t.m, t.m + t.padded_rows, kNegInf);
  std::fill(t.l, t.l + t.padded_rows, 0.0f);
  std::fill(t.o, t.o + int64_t{rows} * d, 0.0f);

  const int64_t q_last = it.first_pos + it.num_q - 1;
  collect_visible_pages(p, it.seq, it.kv_head, it.first_pos, q_last, scratch.pages);
  const int32_t sink = p.sink_tokens;
  const int32_t local = streaming ? p.local_tokens[it.seq] : 0;
  const int32_t page_end =
      std::min<int32_t>(it.page_end, static_cast<int32_t>(scratch.pages.size()));
  for (int32_t pi = it.page_begin; pi < page_end; ++pi) {
    const PageVisit& page = scratch.pages[static_cast<size_t>(pi)];
    int64_t key_row0 = page.head_page * pt;  // row of the page's first key in the pool
    const int32_t keys = page.num_tokens;
    const void* k_base = kv.k;
    const void* v_base = kv.v;
    PagePrefetch prefetch;
    t.prefetch = nullptr;
    if (pi + 1 < page_end) {
      const PageVisit& next = scratch.pages[static_cast<size_t>(pi + 1)];
      const int64_t offset = next.head_page * page_bytes;
      prefetch.k = static_cast<const char*>(kv.k) + offset;
      prefetch.v = static_cast<const char*>(kv.v) + offset;
      prefetch.bytes = dequant ? page_bytes : dtype_nbytes(kKv, int64_t{next.num_tokens} * d);
      // P·V runs keys x (row blocks x head_dim blocks) steps; cover the page in about half.
      // (The integer path steps once per key pair, the fp8 path once per key.)
      const int64_t steps =
          int_path ? std::max<int64_t>(1, keys / 2)
          : fp8_path ? std::max<int64_t>(1, keys)
                   : std::max<int64_t>(
                         1, int64_t{keys} * ((d / S::kWidth + S::kAxpyVecs - 1) / S::kAxpyVecs));
      prefetch.lines_per_step = std::max<int64_t>(1, 2 * (prefetch.bytes / 64) / steps);
      t.prefetch = &prefetch;
    }
    [[maybe_unused]] const KvQuantRow k_rows =
        int_path || fp8_path ? kv_quant_row(quant, kv.k, page.head_page, 0, pt, geo.head_dim)
                             : KvQuantRow{};
    if (dequant && !int_path && !fp8_path) {
      dequantize_page_rows(quant, kv.k, page.head_page, pt, geo.head_dim, keys, t.kf);
      k_base = t.kf;
      v_base = vf;
      key_row0 = 0;
    }
    if (lanes) {
      const float* kf = t.kf;
      if constexpr (kKv == DType::kF32) {
        kf = static_cast<const float*>(k_base) + key_row0 * d;
      } else {
        simd::widen_to_f32<S>(kKv, static_cast<const char*>(kv.k) + dtype_nbytes(kKv, key_row0 * d),
                              t.kf, int64_t{keys} * d);
      }
      lanes_scores<S>(t, kf, keys);
    } else if (int_path || fp8_path) {
#if defined(LS_KERNELS_HAVE_AVX2)
      if (fp8_path) {
        fp8_scores(t, k_rows.codes, k_rows.params, keys);
      } else if (quant == KvQuant::kInt4) {
        int_scores<true>(t, *isc, k_rows.codes, k_rows.params, keys);
      } else {
        int_scores<false>(t, *isc, k_rows.codes, k_rows.params, keys);
      }
#endif
    } else {
      dot_tile<S, kKv>(t.q, d, rows, k_base, key_row0, d, keys, d, t.s, t.ld_s);
    }
    int32_t keys_used = 0;
    for (int32_t tok = 0; tok < it.num_q; ++tok) {
      const VisibleKeys vk = visible_keys(streaming, it.first_pos + tok, page, sink, local);
      keys_used = std::max(keys_used, vk.end);
      for (int32_t h = 0; h < geo.group; ++h) mask_scores(t, tok * geo.group + h, vk, keys);
    }
    if (keys_used == 0) continue;
    if (lanes) {
      lanes_softmax<S>(t, keys_used);
    } else {
      rows_softmax<S>(t);
    }
#if defined(LS_KERNELS_HAVE_AVX2)
    if (int_path || fp8_path) {
      const KvQuantRow v_rows = kv_quant_row(quant, kv.v, page.head_page, 0, pt, geo.head_dim);
      if (fp8_path) {
        fp8_pv(t, v_rows.codes, v_rows.params, keys_used);
      } else if (quant == KvQuant::kInt4) {
        int_pv<true>(t, *isc, v_rows.codes, v_rows.params, keys_used);
      } else {
        int_pv<false>(t, *isc, v_rows.codes, v_rows.params, keys_used);
      }
      continue;
    }
#endif
    if (dequant) dequantize_page_rows(quant, kv.v, page.head_page, pt, geo.head_dim, keys_used, vf);
    pv_update<S, kKv>(t, keys_used, v_base, key_row0);
  }

  if (it.partial < 0) {
    write_rows<S>(p, geo, it, t.o, t.l, scratch.row.data());
    return;
  }
  const int64_t off = partials.offset[static_cast<size_t>(it.partial)];
  std::copy(t.o, t.o + int64_t{rows} * d, partials.o.data() + off);
  std::copy(t.m, t.m + rows, partials.m.data() + off / d);
  std::copy(t.l, t.l + rows, partials.l.data() + off / d);
}

// Combines the chunks of a split tile: o = sum_c o_c e^(m_c - m), l likewise, out = o / l.
template <class S>
void merge_group(const AttentionParams& p, const Geometry& geo, const SplitGroup& g,
                 Partials& partials) {
  ThreadScratch& scratch = thread_scratch();
  const int32_t rows = g.tile.num_q * geo.group;
  const int64_t d = geo.head_dim;
  TileState t = scratch.bind(rows, geo.head_dim, 1, S::kWidth, false);
  for (int32_t r = 0; r < rows; ++r) {
    float m = kNegInf;
    for (int32_t c = 0; c < g.num_slots; ++c) {
      m = std::max(m, partials.m[static_cast<size_t>(
                          partials.offset[static_cast<size_t>(g.first_slot + c)] / d + r)]);
    }
    float l = 0.0f;
    float* o = t.o + int64_t{r} * d;
    std::fill(o, o + d, 0.0f);
    if (m != kNegInf) {
      for (int32_t c = 0; c < g.num_slots; ++c) {
        const int64_t off = partials.offset[static_cast<size_t>(g.first_slot + c)];
        const float mc = partials.m[static_cast<size_t>(off / d + r)];
        if (mc == kNegInf) continue;
        const float w = std::exp(mc - m);
        l += partials.l[static_cast<size_t>(off / d + r)] * w;
        const float* oc = partials.o.data() + off + int64_t{r} * d;
        for (int64_t e = 0; e < d; ++e) o[e] += oc[e] * w;
      }
    }
    t.l[r] = l;
  }
  write_rows<S>(p, geo, g.tile, t.o, t.l, scratch.row.data());
}

void zero_rows(const AttentionParams& p, const Geometry& geo, int32_t q_row, int32_t num_q,
               int32_t kv_head) {
  for (int32_t t = 0; t < num_q; ++t) {
    for (int32_t h = 0; h < geo.group; ++h) {
      std::memset(out_row(p, geo, q_row + t, kv_head * geo.group + h), 0,
                  static_cast<size_t>(geo.q_row_bytes));
    }
  }
}

bool pool_usable(const PagedKvPool& pool, int32_t head_dim) {
  const bool format_ok = pool.quant == KvQuant::kNone
                             ? simd::is_float_dtype(pool.dtype)
                             : pool.quant == KvQuant::kFp8 || pool.quant == KvQuant::kInt8 ||
                                   pool.quant == KvQuant::kInt4;
  return pool.k && pool.v && pool.page_tokens > 0 && pool.head_dim == head_dim &&
         pool.heads_per_block > 0 && format_ok;
}

template <class S>
void run(const AttentionParams& p, ThreadPool& pool, bool fused_quant) {
  Geometry geo;
  geo.group = p.num_q_heads / p.num_kv_heads;
  geo.head_dim = p.head_dim;
  geo.q_row_bytes = dtype_nbytes(p.q_dtype, p.head_dim);
  const int32_t tile_tokens = std::max(1, kTileRows / geo.group);

  // ---- plan: items with their visible-token cost ----
  // The plan lives in the caller's thread-local storage; workers reach it through these
  // references.
  Plan& plan = caller_plan();
  std::vector<Item>& items = plan.items;
  std::vector<SplitGroup>& groups = plan.groups;
  Partials& partials = plan.partials;
  items.clear();
  groups.clear();
  std::vector<PageVisit>& pages = thread_scratch().pages;
  for (int32_t s = 0; s < p.num_seqs; ++s) {
    const int32_t q_row = p.q_indptr[s];
    const int32_t q_len = p.q_indptr[s + 1] - q_row;
    if (q_len <= 0) continue;
    const int64_t first_pos = int64_t{p.kv_lens[s]} - q_len;
    for (int32_t g = 0; g < p.num_kv_heads; ++g) {
      const bool streaming = p.head_mode[g] == static_cast<int32_t>(HeadMode::kStreaming);
      const bool usable =
          first_pos >= 0 && pool_usable(streaming ? p.streaming : p.retrieval, p.head_dim);
      for (int32_t t0 = 0; t0 < q_len; t0 += tile_tokens) {
        Item it;
        it.seq = s;
        it.kv_head = g;
        it.q_row = q_row + t0;
        it.num_q = std::min(tile_tokens, q_len - t0);
        it.first_pos = first_pos + t0;
        if (!usable ||
            !collect_visible_pages(p, s, g, it.first_pos, it.first_pos + it.num_q - 1, pages)) {
          zero_rows(p, geo, it.q_row, it.num_q, g);
          continue;
        }
        int64_t tokens = 0;
        for (const PageVisit& v : pages) tokens += v.num_tokens;
        it.page_end = static_cast<int32_t>(pages.size());
        it.cost = tokens * it.num_q * geo.group + 1;
        items.push_back(it);
      }
    }
  }

  // ---- split long page lists when there are too few items to keep every thread busy ----
  const int threads = pool.num_threads();
  int32_t num_slots = 0;
  if (threads > 1 && static_cast<int64_t>(items.size()) < 2 * threads) {
    const int64_t want = (4 * threads + static_cast<int64_t>(items.size()) - 1) /
                         std::max<int64_t>(1, static_cast<int64_t>(items.size()));
    std::vector<Item> split;
    for (const Item& it : items) {
      const int32_t n = it.page_end - it.page_begin;
      const int32_t chunks = static_cast<int32_t>(std::min<int64_t>(want, n / kMinPagesPerChunk));
      if (chunks <= 1) {
        split.push_back(it);
        continue;
      }
      SplitGroup g;
      g.tile = it;
      g.first_slot = num_slots;
      g.num_slots = chunks;
      groups.push_back(g);
      for (int32_t c = 0; c < chunks; ++c) {
        Item part = it;
        part.page_begin = it.page_begin + static_cast<int32_t>(int64_t{n} * c / chunks);
        part.page_end = it.page_begin + static_cast<int32_t>(int64_t{n} * (c + 1) / chunks);
        part.partial = num_slots++;
        part.cost = it.cost / chunks + 1;
        split.push_back(part);
      }
    }
    items.swap(split);
  }
  if (num_slots > 0) {
    partials.offset.assign(static_cast<size_t>(num_slots) + 1, 0);
    for (const SplitGroup& g : groups) {
      for (int32_t c = 0; c < g.num_slots; ++c) {
        partials.offset[static_cast<size_t>(g.first_slot + c + 1)] =
            partials.offset[static_cast<size_t>(g.first_slot + c)] +
            int64_t{g.tile.num_q} * geo.group * p.head_dim;
      }
    }
    const int64_t total = partials.offset.back();
    if (static_cast<int64_t>(partials.o.size()) < total)
      partials.o.resize(static_cast<size_t>(total));
    const int64_t total_rows = total / p.head_dim;
    if (static_cast<int64_t>(partials.m.size()) < total_rows) {
      partials.m.resize(static_cast<size_t>(total_rows));
      partials.l.resize(static_cast<size_t>(total_rows));
    }
  }

  // ---- run, largest first, threads pulling items from a shared counter ----
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
  std::atomic<int64_t> next{0};
  const int64_t num_items = static_cast<int64_t>(items.size());
  const auto work = [&](int) {
    for (int64_t i = next.fetch_add(1); i < num_items; i = next.fetch_add(1)) {
      const Item& it = items[static_cast<size_t>(i)];
      const bool streaming = p.head_mode[it.kv_head] == static_cast<int32_t>(HeadMode::kStreaming);
      const PagedKvPool& kv = streaming ? p.streaming : p.retrieval;
      if (kv.quant != KvQuant::kNone) {
        if (fused_quant) {
          run_item<S, DType::kF32, true>(p, geo, it, partials);
        } else {
          run_item<S, DType::kF32, false>(p, geo, it, partials);  // dequantizes every page
        }
        continue;
      }
      simd::dispatch_float_dtype(kv.dtype,
                                 [&]<DType kKv>() { run_item<S, kKv>(p, geo, it, partials); });
    }
  };
  if (num_items <= 1) {
    work(0);
  } else {
    pool.run_on_all(work);
  }

  if (!groups.empty()) {
    pool.parallel_for(static_cast<int64_t>(groups.size()), 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g)
        merge_group<S>(p, geo, groups[static_cast<size_t>(g)], partials);
    });
  }
}

}  // namespace

void paged_attention(const AttentionParams& p, ThreadPool& pool, Isa isa,
                     QuantKvDecode quant_decode) {
  if (p.num_seqs <= 0 || p.num_tokens <= 0 || p.num_q_heads <= 0 || p.num_kv_heads <= 0 ||
      p.head_dim <= 0 || p.num_q_heads % p.num_kv_heads != 0 || !p.q || !p.out || !p.q_indptr ||
      !p.kv_lens || !p.head_mode || !p.head_slot || !simd::is_float_dtype(p.q_dtype)) {
    return;
  }
  const bool fused = quant_decode == QuantKvDecode::kFused;
  simd::dispatch_isa(isa, [&]<class S>() {
    if (p.head_dim % S::kWidth != 0) {
      run<simd::Scalar>(p, pool, fused);  // vector kernels assume whole vectors per head row
    } else {
      run<S>(p, pool, fused);
    }
  });
}

void paged_attention(const AttentionParams& p, ThreadPool& pool, Isa isa) {
  paged_attention(p, pool, isa, QuantKvDecode::kFused);
}

void paged_attention(const AttentionParams& p, ThreadPool& pool) {
  paged_attention(p, pool, best_isa());
}

}  // namespace ls::kernels::cpu
