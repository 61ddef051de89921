// Paged attention dispatch: workspace layout, the prefill tile plan, the split-K reduction and
// the routing between the prefill and decode kernels (attention.h says which runs when).

#include <algorithm>
#include <cstdint>
#include <atomic>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/dispatch.cuh"

namespace ls::kernels::cuda {

namespace {

constexpr int kMaxSplits = 64;
constexpr int kMaxHeadDim = 128;       // largest supported head_dim (attention.h)
constexpr int kDecodeBlocksPerSm = 2;  // decode blocks resident per SM (registers, shared memory)
constexpr int64_t kAlign = 256;

int64_t align_up(int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// Host-known sizes of one call and where each scratch array lives in the workspace.
struct Layout {
  bool decode_all = false;  // num_tokens == num_seqs: the decode kernel serves every token
  bool run_prefill = false;
  bool run_decode = false;
  bool wgmma = false;  // the prefill kernel is the wgmma one
  int32_t bm = 0;      // prefill tile rows
  int32_t max_tiles = 0;
  int32_t items = 0;  // decode grid.x
  int32_t head_chunks = 1;
  int64_t decode_rows = 0;  // (item, kv head, head chunk) rows: num_splits and row_tickets entries
  int32_t max_splits = 1;
  int32_t listed_cap = 32;
  bool ticketed = false;  // the decode splits draw their rows' later blocks by ticket
  int64_t tiles = 0, num_tiles = 0, num_splits = 0, row_tickets = 0, partial_ml = 0, partial_o = 0,
          bytes = 0;
};

bool wgmma_covers(const AttentionParams& p) {
  return p.head_dim == 64 || p.head_dim == 128;
}

// The K/V format of a call's pools (paged_attention checks that the pools present agree).
KvQuant pools_quant(const AttentionParams& p) {
  return p.retrieval.k ? p.retrieval.quant : (p.streaming.k ? p.streaming.quant : KvQuant::kNone);
}

Layout layout_for(const AttentionParams& p, int num_sms, const AttentionOptions& o) {
  Layout L;
  const int32_t group = p.num_q_heads / std::max(1, p.num_kv_heads);
  L.decode_all = !o.prefill_only && p.num_tokens == p.num_seqs;
  L.run_prefill = !L.decode_all;
  L.run_decode = !o.prefill_only;
  L.wgmma = o.prefill_kernel == PrefillKernel::kWgmma ||
            o.prefill_kernel == PrefillKernel::kWgmmaWs ||
            o.prefill_kernel == PrefillKernel::kWgmmaPingPong ||
            (o.prefill_kernel == PrefillKernel::kAuto && wgmma_covers(p));
  const int warps = L.wgmma || (o.prefill_warps == 8 && p.head_dim >= 64) ? 8 : 4;
  L.bm = 16 * warps;
  L.max_tiles = L.run_prefill ? (p.num_tokens + L.bm - 1) / L.bm + p.num_seqs : 0;
  L.items = L.decode_all ? p.num_tokens : p.num_seqs;
  const int head_rows = decode_rows_per_block(pools_quant(p));  // query heads per decode block
  L.head_chunks = (group + head_rows - 1) / head_rows;
  const bool selecting = p.selected && p.num_selected && p.selected_rows;
  if (o.max_splits > 0) {
    L.max_splits = std::min(o.max_splits, kMaxSplits);
  } else {
    // Rounding down keeps the last wave of blocks full (e.g. 64 (token, head) rows on 132 SMs:
    // 8 splits, 512 blocks, not 9 and a 2.2-wave tail). With few rows (at most a quarter of a
    // wave of the blocks the SMs hold): one wave of blocks, or four when the call passes page
    // selections (lserve: selected rows of the budget beside ~10x shorter streaming rows; small
    // blocks let the hardware's block scheduler even them out). Two waves with more rows. The
    // thresholds follow measurements at batch 1, 8, 16 and 32 (8 kv heads, 132 SMs), so the
    // count jumps at a quarter wave (e.g. 66 rows: 16 splits with selections, 67: 7). On an
    // H100, against two waves for every batch: dense batch 1 at 8K 20.0 us per call against 25.6
    // (33 splits), lserve batch 8 at 128K 36.6 against 37.2 (16); lserve batch 16 and 32 and
    // dense batch 32 are best with two waves (docs/history/cuda-decode.md). Decode rows of mixed
    // batches count every sequence (items), prefilling ones included.
    const int64_t base = std::max<int64_t>(1, int64_t{L.items} * p.num_kv_heads * L.head_chunks);
    // Quantized pages: the wave is their kernel's three blocks per SM (attention_decode.cuh),
    // except with page selections, where it stays the float kernel's two: their selected rows are
    // the budget's few 128-key blocks, and the larger wave only added splits to merge (H200, lserve
    // batch 8 at 64K-256K, 24 splits against 16: 1.15-1.30x slower for every format; batch 32
    // within 3%; docs/kv-quantization.md).
    const KvQuant quant = pools_quant(p);
    const int per_sm =
        quant == KvQuant::kNone || selecting ? kDecodeBlocksPerSm : kDecodeQuantBlocksPerSm;
    const int64_t wave = int64_t{per_sm} * std::max(1, num_sms);
    const int64_t splits = 4 * base > wave ? 2 * wave / base : (selecting ? 4 : 1) * wave / base;
    L.max_splits = static_cast<int32_t>(std::clamp<int64_t>(splits, 1, kMaxSplits));
  }
  L.decode_rows = int64_t{L.items} * p.num_kv_heads * L.head_chunks;
  L.ticketed = L.run_decode && L.max_splits > 1 &&
               (o.decode_ticketed_splits > 0 ||
                (o.decode_ticketed_splits < 0 && selecting && L.decode_rows >= 64));
  int32_t listed = std::max(p.num_sink_pages, 1);
  if (p.selected && p.num_selected && p.selected_rows) listed = std::max(listed, p.max_selected);
  L.listed_cap = (listed + 31) / 32 * 32;

  int64_t off = 0;
  L.tiles = off;
  off = align_up(off + int64_t{L.max_tiles} * static_cast<int64_t>(sizeof(PrefillTile)));
  L.num_tiles = off;
  off = align_up(off + 4);
  const int64_t rows = L.run_decode ? int64_t{L.items} * p.num_q_heads * L.max_splits : 0;
  L.num_splits = off;
  off = align_up(off + 4 * L.decode_rows);
  L.row_tickets = off;
  off = align_up(off + (L.ticketed ? 4 * L.decode_rows : 0));
  L.partial_ml = off;
  off = align_up(off + 8 * rows);
  L.partial_o = off;
  off = align_up(off + 4 * rows * p.head_dim);
  L.bytes = off;
  return L;
}

// Lists the prefill query tiles: sequences with q_len >= min_q, split into tiles of `bm` rows,
// each sequence's tiles from the last (the most keys) to the first, so the heaviest blocks start
// first. One warp; lanes take sequences, a warp scan allocates their output ranges.
__global__ void plan_prefill_kernel(const int32_t* q_indptr, const int32_t* kv_lens,
                                    int32_t num_seqs, int32_t num_tokens, int32_t min_q, int32_t bm,
                                    int32_t max_tiles, PrefillTile* tiles, int32_t* num_tiles) {
  const int lane = static_cast<int>(threadIdx.x);
  int32_t base = 0;
  for (int32_t s0 = 0; s0 < num_seqs; s0 += 32) {
    const int32_t s = s0 + lane;
    int32_t begin = 0, len = 0, first = 0, n = 0;
    if (s < num_seqs) {
      const int32_t b = q_indptr[s], e = q_indptr[s + 1];
      begin = max(0, b);
      const int32_t end = min(num_tokens, e);
      len = end - begin;
      first = kv_lens[s] - (e - b) + (begin - b);
      if (len >= min_q && len > 0) n = (len + bm - 1) / bm;
    }
    int32_t incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t up = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += up;
    }
    int32_t idx = base + incl - n;
    for (int32_t t = n - 1; t >= 0 && idx < max_tiles; --t, ++idx) {
      PrefillTile tile;
      tile.seq = s;
      tile.token0 = begin + t * bm;
      tile.num_q = min(bm, len - t * bm);
      tile.first_pos = first + t * bm;
      tiles[idx] = tile;
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) *num_tiles = min(base, max_tiles);
}

// Clears the decode kernel's per-row ticket counters (ticketed splits). A programmatic dependent
// launch that lets the decode kernel start at once, before its own wait (the exception
// pdl_launch.cuh allows): the decode kernel reads nothing before its wait that a kernel of the
// step writes, and its wait covers this kernel, which waits for everything before it (an earlier
// user of the workspace) before it writes.
__global__ void __launch_bounds__(256) decode_prologue_kernel(int32_t* row_tickets, int64_t rows) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = threadIdx.x + static_cast<int64_t>(blockIdx.x) * blockDim.x; i < rows;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    row_tickets[i] = 0;
  }
}

// Combines a token's decode splits: o = sum_z w_z o_z / sum_z w_z l_z with
// w_z = exp2((m_z - max m) * scale * log2 e). Rows served by one split were written directly.
// One block per (item, query head), parallel over the splits: thread z < ns reads split z's
// (m, l), the block reduces max m and sum w l, then warp w sums splits w, w + kReduceWarps, ...
// with lanes over head_dim in float4s (every load of a warp independent, so the latency is a few
// round trips, not one per split), and the warps' sums meet in shared memory. A programmatic
// dependent launch: its blocks are placed while the decode kernel's last blocks finish.
constexpr int kReduceWarps = 8;
constexpr int kReduceThreads = 32 * kReduceWarps;
static_assert(kMaxSplits <= kReduceThreads, "one thread per split reads the (m, l) pairs");

template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    decode_reduce_kernel(const AttentionParams p, const DecodeArgs a, int32_t max_splits) {
  __shared__ float w_s[kMaxSplits];  // weight w_z of split z
  __shared__ float red_m[kReduceWarps], red_l[kReduceWarps];
  __shared__ float4 acc_s[kReduceWarps][kMaxHeadDim / 4];  // per-warp partial sums of o
  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t h = static_cast<int32_t>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t g = h / group, chunk = (h % group) / a.head_rows;
  DecodeTraceRecord tr;  // filled only with a.trace (profiling)
  if (a.trace != nullptr) tr.start = trace_now();
  const int32_t token = a.items_are_tokens ? item : p.q_indptr[item];  // step metadata
  pdl_wait();  // everything below is the decode kernel's output
  pdl_launch_dependents();
  if (a.trace != nullptr) tr.waited = trace_now();
  auto record = [&]() {
    if (a.trace == nullptr || tid != 0) return;
    tr.end = trace_now();
    tr.smid = trace_smid();
    tr.kernel = 1;
    const int64_t decode_blocks =
        static_cast<int64_t>(gridDim.x) * p.num_kv_heads * a.head_chunks * max_splits;
    a.trace[decode_blocks + static_cast<int64_t>(h) * gridDim.x + item] = tr;
  };
  const int64_t base = (static_cast<int64_t>(item) * p.num_q_heads + h) * max_splits;
  const int32_t d4 = p.head_dim / 4;  // head_dim % 16 == 0 (attention.h)
  const float4* po = reinterpret_cast<const float4*>(a.partial_o + base * p.head_dim);
  // The split count, each warp's first split row (lane c < d4 holds float4 c) and the (m, l)
  // pairs load together: one round trip, not three. Slots at or past the count may hold stale
  // values; they are dropped below (weight 0, never read into a sum).
  const int32_t ns_raw =
      a.num_splits[(static_cast<int64_t>(item) * p.num_kv_heads + g) * a.head_chunks + chunk];
  float4 first = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (warp < max_splits && lane < d4) first = po[static_cast<int64_t>(warp) * d4 + lane];
  float2 ml = make_float2(-INFINITY, 0.0f);
  if (tid < max_splits) ml = a.partial_ml[base + tid];
  const int32_t ns = min(ns_raw, max_splits);
  if (ns <= 1) {  // uniform over the block
    record();
    return;
  }
  if (tid >= ns) ml = make_float2(-INFINITY, 0.0f);
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float m = warp_max(ml.x);
  if (lane == 0) red_m[warp] = m;
  __syncthreads();
  float mstar = -INFINITY;
#pragma unroll
  for (int w = 0; w < kReduceWarps; ++w) mstar = fmaxf(mstar, red_m[w]);
  // A split that saw no visible key has m = -inf and weight 0; all -inf: the row is 0.
  const float w_z = (tid < ns && ml.x != -INFINITY && mstar != -INFINITY)
                        ? exp2f((ml.x - mstar) * scale_log2)
                        : 0.0f;
  if (tid < kMaxSplits) w_s[tid] = w_z;
  const float l = warp_sum(w_z * ml.y);
  if (lane == 0) red_l[warp] = l;
  __syncthreads();
  float lsum = 0.0f;
#pragma unroll
  for (int w = 0; w < kReduceWarps; ++w) lsum += red_l[w];

  for (int32_t c = lane; c < d4; c += 32) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int32_t z = warp; z < ns; z += kReduceWarps) {
      const float w = w_s[z];
      if (w == 0.0f) continue;  // never multiply an unwritten / empty partial
      const float4 v = z == warp && c == lane ? first : po[static_cast<int64_t>(z) * d4 + c];
      acc.x = fmaf(w, v.x, acc.x);
      acc.y = fmaf(w, v.y, acc.y);
      acc.z = fmaf(w, v.z, acc.z);
      acc.w = fmaf(w, v.w, acc.w);
    }
    acc_s[warp][c] = acc;
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(token) * p.num_q_heads + h) * p.head_dim;
  for (int32_t c = tid; c < d4; c += kReduceThreads) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kReduceWarps; ++w) {
      const float4 v = acc_s[w][c];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const bool any = lsum > 0.0f;
    out[4 * c + 0] = from_f32<T>(any ? acc.x / lsum : 0.0f);
    out[4 * c + 1] = from_f32<T>(any ? acc.y / lsum : 0.0f);
    out[4 * c + 2] = from_f32<T>(any ? acc.z / lsum : 0.0f);
    out[4 * c + 3] = from_f32<T>(any ? acc.w / lsum : 0.0f);
  }
  record();
}

template <typename T>
Status run_prefill_wgmma(const AttentionParams& p, const Layout& L, const PrefillTile* tiles,
                         const int32_t* num_tiles, int key_block, bool warp_specialized,
                         const AttentionOptions& o, cudaStream_t stream) {
  if (o.prefill_kernel == PrefillKernel::kWgmmaPingPong) {
    const int stages = o.wgmma_ws_stages;
    if (!(stages == 2 || (stages == 3 && p.head_dim == 128))) {
      return invalid_argument("attention: wgmma_ws_stages {} at head_dim {} (2, or 3 at 128)",
                              stages, p.head_dim);
    }
    if (int64_t{L.max_tiles} * p.num_q_heads > INT32_MAX) {
      return invalid_argument("attention: {} query tiles x {} heads is too many items",
                              L.max_tiles, p.num_q_heads);
    }
    const auto typed = [&]<int kD, int kStages>() -> Status {
      return launch_prefill_wgmma_ws<kD, T, 64, true, kStages>(p, tiles, num_tiles, L.max_tiles,
                                                               L.listed_cap, o.prefill_tma,
                                                               o.prefill_tma_min_blocks, stream);
    };
    switch (p.head_dim) {
      case 64:
        return typed.template operator()<64, 2>();
      case 128:
        return stages == 3 ? typed.template operator()<128, 3>()
                           : typed.template operator()<128, 2>();
      default:
        return invalid_argument("attention: the ping-pong wgmma kernels have no head_dim {}",
                                p.head_dim);
    }
  }
  if (warp_specialized) {
    if (p.head_dim != 128) {
      return invalid_argument("attention: the warp-specialised wgmma kernel has no head_dim {}",
                              p.head_dim);
    }
    return launch_prefill_wgmma_ws<128, T, 64, false, 2>(p, tiles, num_tiles, L.max_tiles,
                                                         L.listed_cap, o.prefill_tma,
                                                         o.prefill_tma_min_blocks, stream);
  }
  const auto typed = [&]<int kD>() -> Status {
    if (key_block == 64) {
      return launch_prefill_wgmma<kD, T, 64>(p, tiles, num_tiles, L.max_tiles, L.listed_cap,
                                             stream);
    }
    return launch_prefill_wgmma<kD, T, 128>(p, tiles, num_tiles, L.max_tiles, L.listed_cap, stream);
  };
  switch (p.head_dim) {
    case 64:
      return typed.template operator()<64>();
    case 128:
      return typed.template operator()<128>();
    default:
      return invalid_argument("attention: the wgmma prefill kernel has no head_dim {}", p.head_dim);
  }
}

template <typename T>
Status run_prefill_quant(const AttentionParams& p, const Layout& L, const PrefillTile* tiles,
                         const int32_t* num_tiles, int warps, KvQuant quant, cudaStream_t stream) {
  const auto typed = [&]<int kD>() -> Status {
    if (warps == 8) {
      return launch_prefill_quant<kD, T, 8>(p, tiles, num_tiles, L.max_tiles, L.listed_cap, quant,
                                            stream);
    }
    return launch_prefill_quant<kD, T, 4>(p, tiles, num_tiles, L.max_tiles, L.listed_cap, quant,
                                          stream);
  };
  switch (p.head_dim) {
    case 64:
      return typed.template operator()<64>();
    case 128:
      return typed.template operator()<128>();
    default:
      return invalid_argument("attention: no prefill kernel reads {} pages of head_dim {}",
                              kv_quant_name(quant), p.head_dim);
  }
}

// The warp-specialised wgmma kernel over quantized pages (head_dim 128 only).
template <typename T>
Status run_prefill_ws_quant(const AttentionParams& p, const Layout& L, const PrefillTile* tiles,
                            const int32_t* num_tiles, KvQuant quant, cudaStream_t stream) {
  if (p.head_dim != 128) {
    return invalid_argument("attention: the warp-specialised wgmma kernel has no head_dim {}",
                            p.head_dim);
  }
  switch (quant) {
    case KvQuant::kFp8:
      return launch_prefill_wgmma_ws<128, T, 64, false, 2, KvQuant::kFp8>(
          p, tiles, num_tiles, L.max_tiles, L.listed_cap, false, 0, stream);
    case KvQuant::kInt8:
      return launch_prefill_wgmma_ws<128, T, 64, false, 2, KvQuant::kInt8>(
          p, tiles, num_tiles, L.max_tiles, L.listed_cap, false, 0, stream);
    case KvQuant::kInt4:
      return launch_prefill_wgmma_ws<128, T, 64, false, 2, KvQuant::kInt4>(
          p, tiles, num_tiles, L.max_tiles, L.listed_cap, false, 0, stream);
    default:
      return invalid_argument("attention: no prefill kernel reads {} pages",
                              kv_quant_name(quant));
  }
}

template <typename T>
Status run_prefill(const AttentionParams& p, const Layout& L, const PrefillTile* tiles,
                   const int32_t* num_tiles, int warps, cudaStream_t stream) {
  const auto typed = [&]<int kD>() -> Status {
    if constexpr (kD >= 64) {
      if (warps == 8) {
        return launch_prefill<kD, T, 8>(p, tiles, num_tiles, L.max_tiles, L.listed_cap, stream);
      }
    }
    return launch_prefill<kD, T, 4>(p, tiles, num_tiles, L.max_tiles, L.listed_cap, stream);
  };
  switch (p.head_dim) {
    case 16:
      return typed.template operator()<16>();
    case 32:
      return typed.template operator()<32>();
    case 64:
      return typed.template operator()<64>();
    case 96:
      return typed.template operator()<96>();
    case 128:
      return typed.template operator()<128>();
    default:
      return invalid_argument("attention: head_dim {} is not supported", p.head_dim);
  }
}

template <typename T>
Status run_decode(const AttentionParams& p, const Layout& L, const DecodeArgs& a,
                  cudaStream_t stream) {
  const KvQuant quant = pools_quant(p);
  if (quant != KvQuant::kNone) {
    switch (p.head_dim) {
      case 64:
        return launch_decode_quant<64, T>(p, a, L.items, L.max_splits, quant, stream);
      case 128:
        return launch_decode_quant<128, T>(p, a, L.items, L.max_splits, quant, stream);
      default:
        return invalid_argument("attention: no decode kernel reads {} pages of head_dim {}",
                                kv_quant_name(quant), p.head_dim);
    }
  }
  switch (p.head_dim) {
    case 16:
      return launch_decode<16, T>(p, a, L.items, L.max_splits, stream);
    case 32:
      return launch_decode<32, T>(p, a, L.items, L.max_splits, stream);
    case 64:
      return launch_decode<64, T>(p, a, L.items, L.max_splits, stream);
    case 96:
      return launch_decode<96, T>(p, a, L.items, L.max_splits, stream);
    case 128:
      return launch_decode<128, T>(p, a, L.items, L.max_splits, stream);
    default:
      return invalid_argument("attention: head_dim {} is not supported", p.head_dim);
  }
}

template <typename T>
Status run_typed(const AttentionParams& p, const Layout& L, char* ws, int warps,
                 cudaStream_t stream, const AttentionOptions& o) {
  auto* tiles = reinterpret_cast<PrefillTile*>(ws + L.tiles);
  auto* num_tiles = reinterpret_cast<int32_t*>(ws + L.num_tiles);
  const KvQuant quant = pools_quant(p);
  if (L.run_prefill) {
    plan_prefill_kernel<<<1, 32, 0, stream>>>(p.q_indptr, p.kv_lens, p.num_seqs, p.num_tokens,
                                              o.prefill_only ? 1 : 2, L.bm, L.max_tiles, tiles,
                                              num_tiles);
    LS_RETURN_IF_ERROR(launch_status("plan_prefill_kernel"));
    if (quant != KvQuant::kNone) {
      // Quantized pages with kAuto at head_dim 128, or kWgmmaWs (refused at other head dims):
      // the warp-specialised wgmma kernel whose producer dequantizes (1.8-2.2x the mma.sync
      // kernel on an H200, docs/kv-quantization.md); otherwise the mma.sync kernel (the tile
      // planning above is the same for any kernel of L.bm rows: 8 warps where the wgmma kernel
      // would have run).
      const bool ws = o.prefill_kernel == PrefillKernel::kWgmmaWs ||
                      (o.prefill_kernel == PrefillKernel::kAuto && p.head_dim == 128);
      if (ws) {
        LS_RETURN_IF_ERROR(run_prefill_ws_quant<T>(p, L, tiles, num_tiles, quant, stream));
      } else {
        LS_RETURN_IF_ERROR(run_prefill_quant<T>(p, L, tiles, num_tiles, warps, quant, stream));
      }
    } else if (L.wgmma) {
      // kAuto takes the warp-specialised kernel where it exists (head_dim 128): the fastest
      // there (AttentionOptions::prefill_kernel says by how much).
      const bool ws = o.prefill_kernel == PrefillKernel::kWgmmaWs ||
                      (o.prefill_kernel == PrefillKernel::kAuto && p.head_dim == 128);
      LS_RETURN_IF_ERROR(
          run_prefill_wgmma<T>(p, L, tiles, num_tiles, o.wgmma_key_block, ws, o, stream));
    } else {
      LS_RETURN_IF_ERROR(run_prefill<T>(p, L, tiles, num_tiles, warps, stream));
    }
  }
  if (!L.run_decode || L.items == 0) return {};
  DecodeArgs a;
  a.items_are_tokens = L.decode_all ? 1 : 0;
  a.min_blocks_per_split = o.min_blocks_per_split > 0 ? o.min_blocks_per_split
                                                      : std::max(2, 16 / std::max(1, L.max_splits));
  a.head_chunks = L.head_chunks;
  a.head_rows = decode_rows_per_block(pools_quant(p));
  a.listed_cap = L.listed_cap;
  a.l2_prefetch = o.decode_l2_prefetch < 0 ? (decode_l2_prefetch_pays() ? 1 : 0)
                                           : (o.decode_l2_prefetch != 0 ? 1 : 0);
  a.prewait_prefetch = o.decode_prewait_prefetch;
  a.trace = o.decode_trace;
  a.num_splits = reinterpret_cast<int32_t*>(ws + L.num_splits);
  if (L.ticketed) {
    a.row_tickets = reinterpret_cast<int32_t*>(ws + L.row_tickets);
    a.chunk_blocks = std::max(1, o.decode_chunk_blocks);
    const int blocks = static_cast<int>(std::min<int64_t>((L.decode_rows + 255) / 256, 64));
    LS_RETURN_IF_ERROR(launch_pdl(decode_prologue_kernel, dim3(static_cast<unsigned>(blocks)), 256,
                                  0, stream, "decode_prologue_kernel", a.row_tickets,
                                  L.decode_rows));
  }
  a.partial_ml = reinterpret_cast<float2*>(ws + L.partial_ml);
  a.partial_o = reinterpret_cast<float*>(ws + L.partial_o);
  LS_RETURN_IF_ERROR(run_decode<T>(p, L, a, stream));
  if (L.max_splits > 1) {
    const dim3 grid(static_cast<unsigned>(L.items), static_cast<unsigned>(p.num_q_heads));
    LS_RETURN_IF_ERROR(launch_pdl(decode_reduce_kernel<T>, grid, kReduceThreads, 0, stream,
                                  "decode_reduce_kernel", p, a, L.max_splits));
  }
  return {};
}

bool pool_matches(const PagedKvPool& pool, const AttentionParams& p) {
  if (!pool.k) return true;
  const bool format = pool.quant != KvQuant::kNone || pool.dtype == p.q_dtype;
  return format && aligned16(pool.k) && aligned16(pool.v);
}

// The decode kernel indexes pool rows in 32 bits (attention_decode.cuh's resolve_row). A pool
// without arrays or with a non-positive size is left to the kernels, which attend no row of it.
bool pool_rows_fit(const PagedKvPool& pool) {
  if (!pool.k || pool.num_blocks <= 0 || pool.heads_per_block <= 0 || pool.page_tokens <= 0) {
    return true;
  }
  if (pool.page_slot != nullptr && int64_t{pool.num_cache_slots} > INT32_MAX / pool.page_tokens) {
    return false;  // tiered: rows index the cache
  }
  return int64_t{pool.num_blocks} * pool.heads_per_block <= INT32_MAX / pool.page_tokens;
}

}  // namespace

int64_t decode_trace_records(const AttentionParams& p, int num_sms,
                             const AttentionOptions& options) {
  if (p.num_seqs <= 0 || p.num_tokens <= 0 || p.num_kv_heads <= 0) return 0;
  const Layout L = layout_for(p, num_sms, options);
  if (!L.run_decode) return 0;
  const int64_t decode = L.decode_rows * L.max_splits;
  return decode + (L.max_splits > 1 ? int64_t{L.items} * p.num_q_heads : 0);
}

int64_t attention_workspace_bytes(const AttentionParams& p, int num_sms,
                                  const AttentionOptions& options) {
  if (p.num_seqs <= 0 || p.num_tokens <= 0 || p.num_kv_heads <= 0) return kAlign;
  return layout_for(p, num_sms, options).bytes;
}

bool decode_l2_prefetch_pays() {
  // Bit d: device d was asked / is below the bandwidth bound. Two threads asking at once both
  // compute the same answer.
  static std::atomic<uint64_t> known{0}, pays{0};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
    cudaGetLastError();
    return true;
  }
  const uint64_t bit = uint64_t{1} << device;
  if ((known.load(std::memory_order_acquire) & bit) == 0) {
    int khz = 0, bus_bits = 0;
    const bool asked =
        cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess;
    if (!asked) cudaGetLastError();
    const double bytes_per_s = 2.0 * 1e3 * khz * (bus_bits / 8.0);  // double data rate
    if (!asked || bytes_per_s < AttentionOptions::kL2PrefetchMaxDramBytesPerS) {
      pays.fetch_or(bit, std::memory_order_relaxed);
    }
    known.fetch_or(bit, std::memory_order_release);
  }
  return (pays.load(std::memory_order_relaxed) & bit) != 0;
}

Status paged_attention(const AttentionParams& p, void* workspace, int64_t workspace_bytes,
                       int num_sms, cudaStream_t stream, const AttentionOptions& options) {
  if (p.num_seqs <= 0 || p.num_tokens <= 0 || p.num_q_heads <= 0 || p.num_kv_heads <= 0 ||
      p.head_dim <= 0) {
    return {};
  }
  if (p.num_q_heads % p.num_kv_heads != 0) {
    return invalid_argument("attention: {} query heads for {} kv heads", p.num_q_heads,
                            p.num_kv_heads);
  }
  if (!p.q || !p.out || !p.q_indptr || !p.kv_lens || !p.head_mode || !p.head_slot) {
    return invalid_argument("attention: null array in params");
  }
  if (p.q_dtype != DType::kBF16 && p.q_dtype != DType::kF16) {
    return invalid_argument("attention: q dtype {} (bf16 or f16 on CUDA)", dtype_name(p.q_dtype));
  }
  if (!pool_matches(p.retrieval, p) || !pool_matches(p.streaming, p)) {
    return invalid_argument("attention: KV pools must have q's dtype {} and be 16-byte aligned",
                            dtype_name(p.q_dtype));
  }
  const KvQuant quant = pools_quant(p);
  if ((p.retrieval.k && p.retrieval.quant != quant) || (p.streaming.k && p.streaming.quant != quant)) {
    return invalid_argument("attention: the retrieval and streaming pools hold different formats");
  }
  // Decode, and the ws prefill kernel's quantized producer, index pool rows in 32 bits.
  if ((!options.prefill_only || quant != KvQuant::kNone) &&
      (!pool_rows_fit(p.retrieval) || !pool_rows_fit(p.streaming))) {
    return invalid_argument(
        "attention: a KV pool of more than 2^31 - 1 rows (blocks x heads x page tokens)");
  }
  if (!aligned16(p.q) || !aligned16(p.out)) {
    return invalid_argument("attention: q and out must be 16-byte aligned");
  }
  if (p.num_sink_pages > kMaxListedPages ||
      (p.selected && p.num_selected && p.max_selected > kMaxListedPages)) {
    return invalid_argument("attention: {} sink pages / {} selected pages (at most {})",
                            p.num_sink_pages, p.max_selected, kMaxListedPages);
  }
  const Layout L = layout_for(p, num_sms, options);
  if (quant != KvQuant::kNone && p.head_dim != 64 && p.head_dim != 128) {
    return invalid_argument("attention: no kernel reads {} pages of head_dim {} (64 or 128)",
                            kv_quant_name(quant), p.head_dim);
  }
  if (quant == KvQuant::kNone && L.wgmma && L.run_prefill && !wgmma_covers(p)) {
    return invalid_argument("attention: the wgmma prefill kernel has no head_dim {}", p.head_dim);
  }
  if (options.wgmma_key_block != 64 && options.wgmma_key_block != 128) {
    return invalid_argument("attention: wgmma_key_block {} (64 or 128)", options.wgmma_key_block);
  }
  if (L.max_tiles > 65535) {
    return invalid_argument("attention: {} query tiles in one call (at most 65535)", L.max_tiles);
  }
  if (workspace_bytes < L.bytes || !workspace) {
    return invalid_argument("attention: workspace of {} bytes, {} needed", workspace_bytes,
                            L.bytes);
  }
  const int warps = L.bm / 16;
  char* ws = static_cast<char*>(workspace);
  if (p.q_dtype == DType::kBF16) return run_typed<__nv_bfloat16>(p, L, ws, warps, stream, options);
  return run_typed<__half>(p, L, ws, warps, stream, options);
}

}  // namespace ls::kernels::cuda
