// Paged KV append: one warp per (token, kv head) row, copying the K and V rows into the row's
// head-page (16-byte vectors when source and pool share a dtype). Streaming heads write into their
// ring; a token whose ring row is rewritten later in the same call is skipped, so concurrent
// warps never race on a row and the pools equal in-order writes (as kernels/cpu/kv_append).
// The loads that depend only on the (token, kv head) item (head mode and slot, and with 16-byte
// vectors the source K / V row, up to kCachedVecs vectors per lane) are issued first, so at
// decode sizes their latency overlaps the dependent chain (batch position, then block table).
// An index request (KvAppendParams::summaries) adds as many blocks again past the append's,
// whose warps run the page-summary update of page_summary.cuh over the same items: one launch
// per layer instead of two, and the two halves overlap instead of paying two latency chains in
// sequence. The summary warps read the source keys, not the pools, so they need no ordering with
// the append's writes. Without a request the kernel is the plain append (no summary code).

#include <type_traits>

#include "kernels/cuda/batch_index.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/page_summary.cuh"
#include "kernels/cuda/paged_ops.h"
#include "kernels/kv_quant.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kCachedVecs = 2;  // source vectors a lane holds (head_dim <= 64 vectors)

enum PoolFilter : int { kRetrievalOnly = 0, kStreamingOnly = 1, kBothPools = 2 };

template <typename Ts, typename Td, bool kVec>
__device__ __forceinline__ void copy_row(const Ts* src, Td* dst, int d, int lane) {
  if constexpr (kVec) {
    for (int e = lane * kVecElems<Ts>; e < d; e += 32 * kVecElems<Ts>) {
      *reinterpret_cast<uint4*>(dst + e) = *reinterpret_cast<const uint4*>(src + e);
    }
  } else {
    for (int e = lane; e < d; e += 32) dst[e] = from_f32<Td>(to_f32(src[e]));
  }
}

// Where item (token t, kv head g) writes its K / V row: the head-page of the pool the head's mode
// picks (tiered: its home page; `cache_slot` its resident cache slot, -1: not resident) and the
// row within the page. false: nothing to write (another call's pool, a token of no sequence, a
// ring row rewritten later in this call, or an entry out of range). Shared by the float and the
// quantized append.
struct AppendPlace {
  const PagedKvPool* pool = nullptr;
  bool tiered = false;     // the pool is a tier's page cache (write-through to the home)
  int64_t head_page = 0;   // head-page index (tiered: of the home)
  int32_t row = 0;         // row within the head-page
  int32_t cache_slot = -1; // tiered: the resident cache slot, -1: none
};

__device__ __forceinline__ bool place_append(const KvAppendParams& p, int filter, int32_t t,
                                             int32_t mode, int32_t slot, AppendPlace& out) {
  const TokenPlace tp = place_token(p.q_indptr, p.kv_lens, p.num_seqs, t);
  if (tp.seq < 0) return false;
  const int32_t s = tp.seq;
  const bool streaming = mode == static_cast<int32_t>(HeadMode::kStreaming);
  if (filter != kBothPools && streaming != (filter == kStreamingOnly)) return false;
  const PagedKvPool& pool = streaming ? p.streaming : p.retrieval;
  if (pool.page_tokens <= 0 || pool.head_dim != p.head_dim || !pool.k || !pool.v) return false;
  if (slot < 0 || slot >= pool.heads_per_block) return false;
  const int32_t pt = pool.page_tokens;
  const int64_t pos = tp.position;
  const int64_t page = pos / pt;
  int64_t table_index = page;
  const int32_t* table = p.retrieval_blocks;
  int32_t stride = p.retrieval_blocks_stride;
  if (streaming) {
    const int32_t ring = p.ring_pages[s];
    if (ring <= 0) return false;
    // The same ring row is written again later in this call: skip the dead write.
    if (page >= p.num_sink_pages && pos + static_cast<int64_t>(ring) * pt < p.kv_lens[s]) {
      return false;
    }
    table_index = ring_table_index(static_cast<int32_t>(page), p.num_sink_pages, ring);
    table = p.streaming_blocks;
    stride = p.streaming_blocks_stride;
  }
  if (table_index < 0 || table_index >= stride) return false;
  const int32_t block = table[static_cast<int64_t>(s) * stride + table_index];
  if (block < 0 || block >= pool.num_blocks) return false;
  out.pool = &pool;
  out.head_page = static_cast<int64_t>(block) * pool.heads_per_block + slot;
  out.row = static_cast<int32_t>(pos % pt);
  // Tiered retrieval pool (paged_kv.h): write-through to the home (pinned host memory, through
  // UVA) and, when the head-page is resident, to its cache slot. Untiered: the page itself.
  out.tiered = pool.page_slot != nullptr;
  out.cache_slot = -1;
  if (out.tiered) {
    const int32_t cs = pool.page_slot[out.head_page];
    if (cs >= 0 && cs < pool.num_cache_slots) out.cache_slot = cs;
  }
  return true;
}

// Item = token * num_kv_heads + kv head; one warp, `lane` its lane.
template <typename Ts, typename Td, bool kVec>
__device__ __forceinline__ void append_item(const KvAppendParams& p, int filter, int64_t item,
                                            int lane) {
  const int32_t t = static_cast<int32_t>(item / p.num_kv_heads);
  const int32_t g = static_cast<int32_t>(item % p.num_kv_heads);
  const int32_t mode = p.head_mode[g];
  const int32_t slot = p.head_slot[g];
  const int64_t src_row = (static_cast<int64_t>(t) * p.num_kv_heads + g) * p.head_dim;
  constexpr int kV = kVecElems<Ts>;
  const bool cached = kVec && p.head_dim <= 32 * kV * kCachedVecs;
  uint4 kbuf[kCachedVecs], vbuf[kCachedVecs];
  if (cached) {
#pragma unroll
    for (int c = 0; c < kCachedVecs; ++c) {
      const int e = (lane + 32 * c) * kV;
      if (e < p.head_dim) {
        kbuf[c] = *reinterpret_cast<const uint4*>(static_cast<const Ts*>(p.k) + src_row + e);
        vbuf[c] = *reinterpret_cast<const uint4*>(static_cast<const Ts*>(p.v) + src_row + e);
      }
    }
  }
  AppendPlace at;
  if (!place_append(p, filter, t, mode, slot, at)) return;
  const PagedKvPool& pool = *at.pool;
  const bool tiered = at.tiered;
  const int64_t pt = pool.page_tokens;
  const int64_t dst_row = (at.head_page * pt + at.row) * p.head_dim;
  const int64_t cache_row =
      at.cache_slot >= 0 ? (static_cast<int64_t>(at.cache_slot) * pt + at.row) * p.head_dim : -1;
  Td* base_k = static_cast<Td*>(tiered ? pool.home_k : pool.k);
  Td* base_v = static_cast<Td*>(tiered ? pool.home_v : pool.v);
  // write_homes false (benchmarks): the resident slot only.
  const int first_copy = tiered && !p.write_homes ? 1 : 0;
  for (int copy = first_copy; copy < (cache_row >= 0 ? 2 : 1); ++copy) {
    Td* dk = (copy == 0 ? base_k + dst_row : static_cast<Td*>(pool.k) + cache_row);
    Td* dv = (copy == 0 ? base_v + dst_row : static_cast<Td*>(pool.v) + cache_row);
    if (cached) {
#pragma unroll
      for (int c = 0; c < kCachedVecs; ++c) {
        const int e = (lane + 32 * c) * kV;
        if (e < p.head_dim) {
          *reinterpret_cast<uint4*>(dk + e) = kbuf[c];
          *reinterpret_cast<uint4*>(dv + e) = vbuf[c];
        }
      }
      continue;
    }
    copy_row<Ts, Td, kVec>(static_cast<const Ts*>(p.k) + src_row, dk, p.head_dim, lane);
    copy_row<Ts, Td, kVec>(static_cast<const Ts*>(p.v) + src_row, dv, p.head_dim, lane);
  }
}

// ---- quantized pools (kernels/kv_quant.h): quantize on the way in ----
// One warp per (token, kv head) item as above: the lanes read the row, a warp reduction gives the
// row's min / max / max|x| (order-independent, so the parameters are bit for bit the CPU's), then
// each lane writes the codes of its elements (int4: of its element pairs) and lane 0 the row's
// parameters, to the home and, when resident, to the cache slot.

__device__ __forceinline__ void warp_merge_stats(KvRowStats& st) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    KvRowStats o;
    o.mn = __shfl_xor_sync(0xffffffffu, st.mn, off);
    o.mx = __shfl_xor_sync(0xffffffffu, st.mx, off);
    o.amax = __shfl_xor_sync(0xffffffffu, st.amax, off);
    o.finite = __shfl_xor_sync(0xffffffffu, static_cast<int>(st.finite), off) != 0;
    kv_row_stats_merge(st, o);
  }
}

template <typename Ts>
__device__ __forceinline__ void quantize_row_warp(KvQuant q, const Ts* src, int d, KvQuantRow home,
                                                  KvQuantRow cache, int lane) {
  KvRowStats st;
  for (int e = lane; e < d; e += 32) kv_row_stats_add(st, to_f32(src[e]));
  warp_merge_stats(st);
  float params[2];
  kv_quant_params(q, st, params);
  if (q == KvQuant::kInt4) {
    for (int i = lane; 2 * i < d; i += 32) {
      const uint8_t lo = kv_quant_code(q, to_f32(src[2 * i]), params);
      const uint8_t hi = 2 * i + 1 < d ? kv_quant_code(q, to_f32(src[2 * i + 1]), params) : 0;
      const auto b = static_cast<uint8_t>(lo | (hi << 4));
      home.codes[i] = b;
      if (cache.codes) cache.codes[i] = b;
    }
  } else {
    for (int e = lane; e < d; e += 32) {
      const uint8_t c = kv_quant_code(q, to_f32(src[e]), params);
      home.codes[e] = c;
      if (cache.codes) cache.codes[e] = c;
    }
  }
  if (lane < kv_quant_params_per_token(q)) {
    home.params[lane] = params[lane];
    if (cache.params) cache.params[lane] = params[lane];
  }
}

// append_item for quantized pools: the same placement (place_append), then the warp quantizes.
template <typename Ts>
__device__ __forceinline__ void append_item_quant(const KvAppendParams& p, int filter, int64_t item,
                                                  int lane) {
  const int32_t t = static_cast<int32_t>(item / p.num_kv_heads);
  const int32_t g = static_cast<int32_t>(item % p.num_kv_heads);
  const int32_t mode = p.head_mode[g];
  const int32_t slot = p.head_slot[g];
  AppendPlace at;
  if (!place_append(p, filter, t, mode, slot, at)) return;
  const PagedKvPool& pool = *at.pool;
  if (pool.quant == KvQuant::kNone) return;
  const bool tiered = at.tiered;
  const int32_t pt = pool.page_tokens;
  const int64_t head_page = at.head_page;
  const int32_t cache_slot = at.cache_slot;
  const int32_t row = at.row;
  const int64_t src_row = (static_cast<int64_t>(t) * p.num_kv_heads + g) * p.head_dim;
  const KvQuant q = pool.quant;
  void* homes[2] = {tiered ? pool.home_k : pool.k, tiered ? pool.home_v : pool.v};
  void* caches[2] = {pool.k, pool.v};
  const void* srcs[2] = {p.k, p.v};
  for (int a = 0; a < 2; ++a) {
    const KvQuantRow home = kv_quant_row(q, homes[a], head_page, row, pt, p.head_dim);
    const KvQuantRow cache =
        cache_slot >= 0 ? kv_quant_row(q, caches[a], cache_slot, row, pt, p.head_dim) : KvQuantRow{};
    quantize_row_warp<Ts>(q, static_cast<const Ts*>(srcs[a]) + src_row, p.head_dim, home, cache,
                          lane);
  }
}

template <typename Ts, typename Tm>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    kv_append_quant_kernel(const KvAppendParams p, const SummaryUpdateParams su, int filter,
                           unsigned append_blocks) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t num_items = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  const int64_t warps_per_block = blockDim.x / 32;
  if constexpr (!std::is_void_v<Tm>) {
    if (blockIdx.x >= append_blocks) {
      const int64_t stride = (gridDim.x - append_blocks) * warps_per_block;
      for (int64_t item = (blockIdx.x - append_blocks) * warps_per_block + threadIdx.x / 32;
           item < num_items; item += stride) {
        page_summary_item<Ts, Tm>(su, item, lane);
      }
      return;
    }
  }
  const int64_t stride = append_blocks * warps_per_block;
  for (int64_t item = blockIdx.x * warps_per_block + threadIdx.x / 32; item < num_items;
       item += stride) {
    append_item_quant<Ts>(p, filter, item, lane);
  }
}

Status launch_quant(const KvAppendParams& p, int filter, bool index, cudaStream_t stream) {
  const int64_t warps = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  const unsigned append_blocks = grid_for(warps, kWarpsPerBlock);
  return dispatch_float(p.src_dtype, "kv_append", [&]<typename Ts>() {
    if (!index) {
      kv_append_quant_kernel<Ts, void><<<append_blocks, kWarpsPerBlock * 32, 0, stream>>>(
          p, SummaryUpdateParams{}, filter, append_blocks);
      return launch_status("kv_append");
    }
    const SummaryUpdateParams su = summary_update_of(p);
    return dispatch_float(su.summaries.dtype, "kv_append", [&]<typename Tm>() {
      kv_append_quant_kernel<Ts, Tm><<<2 * append_blocks, kWarpsPerBlock * 32, 0, stream>>>(
          p, su, filter, append_blocks);
      return launch_status("kv_append");
    });
  });
}

// Blocks [0, append_blocks) append; with Tm non-void (the summary element type) the blocks past
// them update the summaries `su` of the same items. Both halves grid-stride over all items.
template <typename Ts, typename Td, bool kVec, typename Tm>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    kv_append_kernel(const KvAppendParams p, const SummaryUpdateParams su, int filter,
                     unsigned append_blocks) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t num_items = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  const int64_t warps_per_block = blockDim.x / 32;
  if constexpr (!std::is_void_v<Tm>) {
    if (blockIdx.x >= append_blocks) {
      const int64_t stride = (gridDim.x - append_blocks) * warps_per_block;
      for (int64_t item = (blockIdx.x - append_blocks) * warps_per_block + threadIdx.x / 32;
           item < num_items; item += stride) {
        page_summary_item<Ts, Tm>(su, item, lane);
      }
      return;
    }
  }
  const int64_t stride = append_blocks * warps_per_block;
  for (int64_t item = blockIdx.x * warps_per_block + threadIdx.x / 32; item < num_items;
       item += stride) {
    append_item<Ts, Td, kVec>(p, filter, item, lane);
  }
}

// Launches the append of one pool dtype (Td), with the summary half when Tm is non-void.
template <typename Ts, typename Td, typename Tm>
Status launch_typed(const KvAppendParams& p, const SummaryUpdateParams& su, int filter,
                    cudaStream_t stream) {
  const int64_t warps = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  const unsigned append_blocks = grid_for(warps, kWarpsPerBlock);
  const unsigned blocks =
      append_blocks + (std::is_void_v<Tm> ? 0 : grid_for(warps, kWarpsPerBlock));
  const bool r_aligned = aligned16(p.retrieval.k) && aligned16(p.retrieval.v) &&
                         (!p.retrieval.page_slot ||
                          (aligned16(p.retrieval.home_k) && aligned16(p.retrieval.home_v)));
  const bool s_aligned = aligned16(p.streaming.k) && aligned16(p.streaming.v);
  const bool vec = std::is_same_v<Ts, Td> && p.head_dim % kVecElems<Ts> == 0 && aligned16(p.k) &&
                   aligned16(p.v) && (filter == kStreamingOnly || r_aligned) &&
                   (filter == kRetrievalOnly || s_aligned);
  if constexpr (std::is_same_v<Ts, Td>) {  // 16-byte copies need no conversion
    if (vec) {
      kv_append_kernel<Ts, Td, true, Tm>
          <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p, su, filter, append_blocks);
      return launch_status("kv_append");
    }
  }
  kv_append_kernel<Ts, Td, false, Tm>
      <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p, su, filter, append_blocks);
  return launch_status("kv_append");
}

// `index`: also serve the append's index request (validated by the caller).
Status launch(const KvAppendParams& p, DType pool_dtype, int filter, bool index,
              cudaStream_t stream) {
  return dispatch_float(p.src_dtype, "kv_append", [&]<typename Ts>() {
    return dispatch_float(pool_dtype, "kv_append", [&]<typename Td>() {
      if (!index) return launch_typed<Ts, Td, void>(p, SummaryUpdateParams{}, filter, stream);
      const SummaryUpdateParams su = summary_update_of(p);
      return dispatch_float(su.summaries.dtype, "kv_append", [&]<typename Tm>() {
        return launch_typed<Ts, Td, Tm>(p, su, filter, stream);
      });
    });
  });
}

}  // namespace

Status kv_append(const KvAppendParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.num_seqs <= 0) return {};
  if (!p.k || !p.v || !p.q_indptr || !p.kv_lens || !p.head_mode || !p.head_slot) {
    return invalid_argument("kv_append: null array in params");
  }
  const bool has_r = p.retrieval.k != nullptr, has_s = p.streaming.k != nullptr;
  if (has_r && p.retrieval.page_slot && (!p.retrieval.home_k || !p.retrieval.home_v)) {
    return invalid_argument("kv_append: a tiered retrieval pool without its homes");
  }
  if ((has_r && !p.retrieval_blocks) || (has_s && (!p.streaming_blocks || !p.ring_pages))) {
    return invalid_argument("kv_append: a pool without its block table (or rings)");
  }
  bool index = false;
  if (p.summaries.kmin) {
    LS_ASSIGN_OR_RETURN(index, summary_update_wanted(summary_update_of(p), "kv_append"));
  }
  const bool r_quant = has_r && p.retrieval.quant != KvQuant::kNone;
  const bool s_quant = has_s && p.streaming.quant != KvQuant::kNone;
  if (r_quant || s_quant) {
    if ((has_r && !r_quant) || (has_s && !s_quant)) {
      return invalid_argument("kv_append: a quantized pool beside a float pool");
    }
    const int filter = has_r && has_s ? kBothPools : (has_s ? kStreamingOnly : kRetrievalOnly);
    return launch_quant(p, filter, index, stream);
  }
  if (has_r && has_s && p.retrieval.dtype != p.streaming.dtype) {
    // One launch per pool dtype; the summary half rides on the first.
    LS_RETURN_IF_ERROR(launch(p, p.retrieval.dtype, kRetrievalOnly, index, stream));
    return launch(p, p.streaming.dtype, kStreamingOnly, false, stream);
  }
  if (!has_r && !has_s && !index) return {};
  const int filter = has_r && has_s ? kBothPools : (has_s ? kStreamingOnly : kRetrievalOnly);
  return launch(p, has_s && !has_r ? p.streaming.dtype : p.retrieval.dtype, filter, index, stream);
}

}  // namespace ls::kernels::cuda
