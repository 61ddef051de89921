#pragma once
// Internal to kernels/cuda: the decode attention kernel (flash-decoding), instantiated per
// head_dim / dtype in attention_decode_d*.cu.
//
// A block serves one query token and up to 16 query heads of one kv head (the GQA group, so every
// page is read once for the whole group), over one split of the span's key rows. The number of
// splits is decided on the device from the span length (at most gridDim.z, at least
// min_blocks_per_split 64-row blocks each), so the grid is sized once from host-known batch
// dimensions and decode steps can be captured in a CUDA graph. Blocks stream K and V through a
// kStages-deep cp.async pipeline (16-byte copies, kStages - 1 blocks in flight while one computes,
// the block-table entries fetched two blocks ahead and the rows prefetched into L2 one block
// ahead); each of the 4 warps takes 16 of every 64 keys with its own online softmax (mma.sync with
// the query rows padded to 16), and the warps merge through shared memory at the end. A split's key
// blocks are a fixed share of the row, or (ticketed splits) a few fixed blocks and then chunks
// drawn from a per-row ticket counter. With one split the block writes the output; with several
// it writes an unnormalised partial (o, m, l) that attention.cu's reduction kernel combines. Both
// are programmatic dependent launches: the block's step metadata loads while the previous kernel
// drains (see pdl_launch.cuh).

#include <cstdint>

#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/attention_span.cuh"
#include "kernels/cuda/batch_index.cuh"
#include "kernels/cuda/decode_trace.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/kv_dequant.cuh"
#include "kernels/cuda/kv_fragments.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/kv_quant.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

struct DecodeArgs {
  int32_t items_are_tokens = 1;  // 1: item i is token i; 0: item i is sequence i (if q_len == 1)
  int32_t min_blocks_per_split = 2;
  int32_t head_chunks = 1;  // ceil(group / head_rows)
  int32_t head_rows = 16;   // query heads per block: decode_rows_per_block(the pages' format)
  int32_t listed_cap = 32;
  int32_t l2_prefetch = 1;       // 1: prefetch each block's rows into L2 one block before its copy
  int32_t prewait_prefetch = 1;  // blocks prefetched into L2 before the wait (at most 4)
  // Ticketed splits (see the kernel): per-row ticket counters, zero when the kernel starts
  // (attention.cu's decode_prologue_kernel clears them); null: every split takes a fixed share.
  int32_t* row_tickets = nullptr;  // [items, kv_heads * head_chunks]
  int32_t chunk_blocks = 1;        // 64-key blocks per ticket
  int32_t* num_splits = nullptr;   // [items, kv_heads * head_chunks] splits used (0: not served)
  float* partial_o = nullptr;      // [items, q_heads, max_splits, head_dim]
  float2* partial_ml = nullptr;    // [items, q_heads, max_splits] (row max of raw scores, sum)
  DecodeTraceRecord* trace = nullptr;  // [decode blocks + reduce blocks] profiling; null: off
};

inline constexpr int kDecodeWarps = 4;
inline constexpr int kDecodeThreads = 32 * kDecodeWarps;
inline constexpr int kDecodeStages = 3;
inline constexpr int kDecodeRows = 16;  // query heads per block (float pages)
// Query heads per block over quantized pages: their products are swapped (keys and head_dim are
// the MMA rows, the block's query heads its 8 columns; kv_fragments.cuh), so a GQA group of up
// to 8 heads takes one block and a larger one ceil(group / 8).
inline constexpr int kDecodeQuantRows = 8;
__host__ __device__ constexpr int decode_rows_per_block(KvQuant q) {
  return q == KvQuant::kNone ? kDecodeRows : kDecodeQuantRows;
}
// Keys per loop iteration (one pipeline stage) of a decode block over quantized pages:
// kDecodeQuantKeys (float pages: always kKeyBlock = 64; the template still takes 64 for
// quantized pages, the earlier shape, which measured slower on every case:
// docs/kv-quantization.md). The packed code rows take a half (8-bit) or a quarter (int4) of a
// q-dtype row, so a 128-key stage is no larger than a float 64-key one, and the iteration's work
// that does not grow with its keys (table fetches, pipeline wait and barrier, visibility votes,
// the softmax's row reductions and rescaling, the V-scale exponent, loop control) is paid once per
// 128 keys: static SASS per key at head_dim 128 in docs/kv-quantization.md.
inline constexpr int kDecodeQuantKeys = 128;
// Pipeline stages of a decode block over quantized pages: two for the 8-bit formats at 128
// keys per iteration, three otherwise. Three 128-key stages of 8-bit K and V take 96 KB, room
// for two blocks per SM; with two stages three blocks fit (69 KB each at head_dim 128), and the
// ~100 KB their next stages keep in flight per SM is still several times what the copy
// bandwidth's latency needs (H200: up to 4% faster at dense batch 8-32, 64K-256K;
// docs/kv-quantization.md).
__host__ __device__ constexpr int decode_quant_stages(KvQuant q, int block_keys) {
  return block_keys == 128 && (q == KvQuant::kFp8 || q == KvQuant::kInt8) ? 2 : 3;
}
// Quantized pages: blocks per SM the registers are bounded for, every format: three (168
// registers; the loop is bound by instruction latency, and with two warps per scheduler its chain
// was not hidden). With 128 keys int4's three stages take 60 KB at head_dim 128 and the 8-bit
// formats' two stages 69 KB; with the swapped products every loop fits the 168 registers without
// spills inside it (nvcc 13.0; int8 spills 84 bytes around it).
inline constexpr int kDecodeQuantBlocksPerSm = 3;

// The shared-memory plan of a decode block over pages of format kQ (kNone: q-dtype elements).
// Float pages land in the stages as padded q-dtype rows that ldmatrix reads directly. Quantized
// pages land as packed (chunk-swizzled) code rows plus each row's f32 parameters (only the
// quantized bytes cross DRAM); each warp reads its 16 rows' codes straight into mma fragments
// (kv_fragments.cuh).
// kQuantKeys: keys per iteration over quantized pages (64 or 128; float pages take 64).
template <int kD, KvQuant kQ = KvQuant::kNone, int kQuantKeys = kDecodeQuantKeys>
struct DecodeShape {
  static constexpr bool kQuantized = kQ != KvQuant::kNone;
  static_assert(kQuantKeys == 64 || kQuantKeys == 128, "64 or 128 keys per iteration");
  // Keys per stage (loop iteration) and per warp (each warp takes kWarpKeys of them).
  static constexpr int kBlockKeys = kQuantized ? kQuantKeys : kKeyBlock;
  static constexpr int kWarpKeys = kBlockKeys / kDecodeWarps;
  static constexpr int kRows = decode_rows_per_block(kQ);  // query heads per block
  // K/V pipeline stages.
  static constexpr int kStages = kQuantized ? decode_quant_stages(kQ, kQuantKeys) : kDecodeStages;
  static constexpr int kStride = kD + 8;  // elements per row of sQ and of the q-dtype K/V tiles
  static constexpr int kChunks = kD / 8;  // 16-byte chunks of a q-dtype row
  static constexpr int kSmemQ = kRows * kStride;
  static constexpr int kSmemKV = kKeyBlock * kStride;  // one q-dtype K (or V) block
  // Quantized: bytes of a row's codes (packed rows in a stage), their 16-byte chunks, and the
  // f32 parameters per row (fp8: scale; int8 / int4: scale, zero).
  static constexpr int kCodeBytes = kQuantized ? kQuantCodeBytes<kD, kQ> : 0;
  static constexpr int kCodeChunks = kCodeBytes / 16;
  static constexpr int kParams = kQ == KvQuant::kFp8 ? 1 : (kQuantized ? 2 : 0);
  // Bytes of one K (or V) stage.
  template <typename T>
  static constexpr int stage_bytes() {
    return kQuantized ? kBlockKeys * kCodeBytes : kSmemKV * static_cast<int>(sizeof(T));
  }
  // The warps' partial outputs of the final merge ([warps][kRows][kOwStride] f32), laid over the
  // stages (and, quantized, the parameters and a pad after them where those are smaller). Rows
  // padded so that the fragment stores hit distinct banks (float: 8-byte stores of lanes
  // l / 4 = row, l % 4 = column pair; quantized: 16-byte stores of query rows 2 (l % 4) and
  // 2 (l % 4) + 1 at column kD / 8 (l / 4), at most two lanes of a quarter warp per bank).
  static constexpr int kOwStride = kQuantized ? kD + 12 : kD + 8;
  static constexpr int kMergeBytes = kDecodeWarps * kRows * kOwStride * 4;
  // Quantized only: the stages' parameters, then the pad the merge needs.
  template <typename T>
  static constexpr int quant_bytes() {
    if constexpr (!kQuantized) {
      return 0;
    } else {
      constexpr int params = 2 * kStages * kBlockKeys * kParams * 4;
      constexpr int below = 2 * kStages * stage_bytes<T>() + params;
      return params + (kMergeBytes > below ? (kMergeBytes - below + 15) / 16 * 16 : 0);
    }
  }
  template <typename T>
  static constexpr int smem_bytes(int listed_cap) {
    return static_cast<int>(sizeof(T)) * kSmemQ + 2 * kStages * stage_bytes<T>() +
           quant_bytes<T>() + 4 * kStages * kBlockKeys + 4 * listed_cap;
  }
};

// Max of a and b each over the lanes that differ in the bits kFirstXor .. kLastXor of the lane
// index (the lanes holding one query row's keys: 1..2 for float pages, 4..16 for quantized).
template <int kFirstXor, int kLastXor>
__device__ __forceinline__ void warp_max2(float& a, float& b) {
#pragma unroll
  for (int o = kFirstXor; o <= kLastXor; o <<= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, o));
  }
}

// One online-softmax step of two query rows whose block maxima are mx0 / mx1 (raw scores, in the
// rows' units; sl: the rows' factors to log2 units): the new maxima replace m0 / m1, base is the
// new maximum in log2 units (0 for a row still all -inf) and alpha = 2^(m_old sl - base) the
// factor of everything accumulated so far.
struct OnlineMaxStep {
  float base0, base1, alpha0, alpha1;
};
__device__ __forceinline__ OnlineMaxStep online_max_step(float mx0, float mx1, float& m0,
                                                         float& m1, float sl0, float sl1) {
  const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
  OnlineMaxStep r;
  r.base0 = mn0 == -INFINITY ? 0.0f : mn0 * sl0;
  r.base1 = mn1 == -INFINITY ? 0.0f : mn1 * sl1;
  r.alpha0 = fast_exp2(m0 * sl0 - r.base0);
  r.alpha1 = fast_exp2(m1 * sl1 - r.base1);
  m0 = mn0;
  m1 = mn1;
  return r;
}

// Where item `item` of a decode launch sits: its token row, sequence and query position.
struct DecodeItem {
  bool served = false;  // false: another kernel (prefill) owns it
  int32_t seq = -1;     // -1: served, but the token's lengths are unusable (zero rows)
  int32_t token = 0;
  int64_t position = 0;
};

// `qb`, `qe`: q_indptr[item], q_indptr[item + 1]; `kv_len_item`: kv_lens[item] (item < num_seqs
// in both launch modes), loaded by the caller together with the other scalars of the item.
// Items that are tokens take place_token's binary search only when the token is not the only
// query of sequence `item` (mixed or uneven batches); the fast case gives the same answer for a
// well-formed (non-decreasing) q_indptr.
__device__ inline DecodeItem decode_item(const AttentionParams& p, int32_t items_are_tokens,
                                         int32_t item, int32_t qb, int32_t qe,
                                         int32_t kv_len_item) {
  DecodeItem it;
  if (items_are_tokens) {
    it.served = true;
    it.token = item;
    if (qb == item && qe == item + 1) {
      const int64_t first = static_cast<int64_t>(kv_len_item) - 1;
      it.seq = first >= 0 ? item : -1;
      it.position = first >= 0 ? first : 0;
      return it;
    }
    const TokenPlace tp = place_token(p.q_indptr, p.kv_lens, p.num_seqs, item);
    it.seq = tp.seq;
    it.position = tp.position;
    return it;
  }
  const int32_t begin = qb, end = qe;
  if (end - begin != 1) return it;
  it.served = true;
  it.token = begin;
  if (begin < 0 || begin >= p.num_tokens) {
    it.served = false;
    return it;
  }
  it.position = static_cast<int64_t>(kv_len_item) - 1;
  it.seq = it.position >= 0 ? item : -1;
  return it;
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// base + row * row_bytes in one wide multiply-add (the loop's copies and prefetches take every
// row's address this way).
__device__ __forceinline__ const char* row_address(const char* base, uint32_t row,
                                                   uint32_t row_bytes) {
  uint64_t a;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(a) : "r"(row), "r"(row_bytes), "l"(base));
  return reinterpret_cast<const char*>(a);
}

// cp.async of 16 bytes, or 16 zero bytes (nothing read) when row < 0.
__device__ __forceinline__ void cp_async_16_or_zero(void* smem, const void* gmem, int32_t row) {
  asm volatile(
      "{\n .reg .pred z;\n setp.lt.s32 z, %2, 0;\n"
      " cp.async.cg.shared.global [%0], [%1], 16, z;\n}\n" ::"r"(smem_addr(smem)),
      "l"(gmem), "r"(row));
}

// locate_row (attention_span.cuh) in two halves, so a kernel can start the block-table load of a
// row early and use it later: fetch_row does the span arithmetic and issues the table load;
// resolve_row checks the loaded entry and computes the row's index in the pool (32-bit: the host
// bounds a pool below 2^31 rows). resolve_row(fetch_row(r)) is locate_row(r), with the pool
// offset divided by head_dim.
//
// Every instruction here runs once per key row per 64-key block, and a decode block's iteration
// is bound by its instruction latency, not by the tensor cores: on an H100 a block alone on its
// SM took 1.34 us per 64-key block at ~585 instructions per warp (3.9 cycles each), and half the
// MMAs removed changed nothing. So the loop keeps its integer work small: a shift for the page of
// a row when pages are a power of two, 32-bit pool rows passed by one shuffle, and no rescaling of
// the output while no row's maximum moves (docs/history/cuda-decode.md has the measurements).
struct PendingRow {
  int32_t position = -1;  // -1: no key here
  int32_t in_page = 0;    // row within its page
  int32_t block = -1;     // loaded block-table entry (checked by resolve_row)
};

struct PoolRow {
  int32_t position = -1;  // -1: no key here (the row is zero-filled and masked)
  int32_t row = -1;       // row of the pool: its K (V) starts row * head_dim elements in
};

// The same row as (head-page, row within it): a quantized page is page_bytes bytes of codes and
// parameters, so its rows are addressed through their page.
struct PoolPage {
  int32_t position = -1;  // -1: no key here (the row is zero-filled and masked)
  int32_t page = -1;      // head-page (tiered: cache slot) of the pool
  int32_t in_page = 0;    // row within it
};

// page_shift: log2(hv.page_tokens) when that is a power of two, else -1 (a division).
__device__ __forceinline__ PendingRow fetch_row(const HeadView& hv, const Span& sp,
                                                const int32_t* listed, int32_t r,
                                                int32_t page_shift) {
  PendingRow pr;
  const int32_t pt = hv.page_tokens;
  const int32_t li = page_shift >= 0 ? r >> page_shift : r / pt;
  const int32_t off = r - li * pt;
  if (li >= sp.num_pages()) return pr;
  const int32_t j = li < sp.num_listed ? listed[li] : sp.range_begin + (li - sp.num_listed);
  const int64_t pos = static_cast<int64_t>(j) * pt + off;
  if (pos >= hv.kv_len) return pr;
  const int32_t t = hv.streaming ? ring_table_index(j, hv.num_sink_pages, hv.ring) : j;
  if (t < 0 || t >= hv.table_len) return pr;
  pr.position = static_cast<int32_t>(pos);
  pr.in_page = off;
  pr.block = hv.table_row[t];
  return pr;
}

// kTiered (the retrieval pool has a residency table): a retrieval head reads cache slots, the
// head-page's slot looked up here (-1: not resident, not read); a streaming head of the same call
// reads its own untiered pool (hv.page_slot null). The untiered kernel is a separate
// instantiation and has no branch or register for it.
template <bool kTiered>
__device__ __forceinline__ PoolPage resolve_page(const HeadView& hv, const PendingRow& pr) {
  PoolPage kp;
  if (pr.position < 0 || pr.block < 0 || pr.block >= hv.num_blocks) return kp;
  int32_t page = pr.block * hv.heads_per_block + hv.slot;
  if constexpr (kTiered) {
    if (hv.page_slot != nullptr) {  // uniform per (sequence, kv head); null: a streaming head
      page = hv.page_slot[page];  // the host bounds home and cache pages below 2^31 rows alike
      if (page < 0) return kp;
    }
  }
  kp.position = pr.position;
  kp.page = page;
  kp.in_page = pr.in_page;
  return kp;
}

template <bool kTiered>
__device__ __forceinline__ PoolRow resolve_row(const HeadView& hv, const PendingRow& pr) {
  const PoolPage kp = resolve_page<kTiered>(hv, pr);
  PoolRow kr;
  if (kp.position < 0) return kr;
  kr.position = kp.position;
  kr.row = kp.page * hv.page_tokens + kp.in_page;
  return kr;
}

// kTicketed: the kernel of ticketed splits (a.row_tickets set; launch_decode picks it). A
// compile-time switch because code a call never runs still slows the kernel (registers, longer
// scoreboard stalls): with the ticket code compiled in but unused, the fixed-splits kernel ran
// lserve batch 8 at 128K in 39.7 us per call instead of 37.8 on an H100, and an unused early-copy
// path cost 13% the same way (docs/history/cuda-decode.md). Keep rarely used paths in their own
// instantiation. kTiered: the retrieval pool is the tier's page cache (pool.page_slot set; see
// resolve_row), picked by launch_decode the same way. kQ: the page format of both pools (the
// page-format policy is DecodeShape plus the `if constexpr (kQuantized)` branches of the copy,
// prefetch and compute steps); everything else (span, splits, pipeline, tickets, merge) is the
// same code for every format.
template <int kD, typename T, bool kTicketed, bool kTiered, KvQuant kQ = KvQuant::kNone,
          int kQuantKeys = kDecodeQuantKeys>
__global__ void __launch_bounds__(kDecodeThreads,
                                  kQ == KvQuant::kNone ? 2 : kDecodeQuantBlocksPerSm)
    decode_attention_kernel(const AttentionParams p, const DecodeArgs a) {
  using Shape = DecodeShape<kD, kQ, kQuantKeys>;
  constexpr int kStages = Shape::kStages;
  constexpr bool kQuantized = Shape::kQuantized;
  constexpr int kStride = Shape::kStride;
  constexpr int kChunks = Shape::kChunks;
  constexpr int kStageBytes = Shape::template stage_bytes<T>();
  constexpr int kKSteps = kD / 16;
  constexpr int kDTiles = kD / 8;
  // Keys per iteration (64 float, 128 quantized) and per warp.
  constexpr int kBlockKeys = Shape::kBlockKeys;
  constexpr int kWarpKeys = Shape::kWarpKeys;
  static_assert(
      kWarpKeys == 16 || (kQuantized && kWarpKeys == 32),
      "16 keys per warp (a thread pair per key row) or, quantized, 32 (a thread per row)");

  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t g = static_cast<int32_t>(blockIdx.y) / a.head_chunks;
  const int32_t chunk = static_cast<int32_t>(blockIdx.y) % a.head_chunks;
  const int32_t z = static_cast<int32_t>(blockIdx.z);
  const int32_t max_splits = static_cast<int32_t>(gridDim.z);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  constexpr int kRows = Shape::kRows;             // query heads per block (16 float, 8 quantized)
  const int32_t h0 = g * group + chunk * kRows;  // first query head of this block
  const int32_t nh = min(kRows, group - chunk * kRows);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  int32_t* num_splits_out =
      a.num_splits + static_cast<int64_t>(item) * p.num_kv_heads * a.head_chunks + blockIdx.y;

  // A programmatic dependent launch: the block may start while the previous kernel drains.
  // Step metadata (lengths, head scalars, block tables), which no kernel of the step writes,
  // is read before waiting for it; so is the selection unless p.selection_just_written, and the
  // first a.prewait_prefetch blocks' rows are prefetched into L2 (a hint, harmless if that kernel
  // writes them). Q, the K/V copies and every write come after the wait.
  bool waited = false;
  DecodeTraceRecord tr;  // filled only with a.trace (profiling)
  if (a.trace != nullptr) {
    tr.start = trace_now();
    tr.split = z;
  }
  auto wait_previous = [&]() {
    if (waited) return;
    pdl_wait();
    pdl_launch_dependents();  // the reduction kernel (or the next op) waits for this whole grid
    waited = true;
    if (a.trace != nullptr) tr.waited = trace_now();
  };
  auto record = [&](int32_t iterations) {
    if (a.trace == nullptr || tid != 0) return;
    tr.end = trace_now();
    tr.smid = trace_smid();
    tr.iterations = iterations;
    a.trace[(static_cast<int64_t>(z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = tr;
  };
  // Every scalar of the common case (item i is sequence i's only query) in one round trip:
  // the batch position, the head's scalars and the selection row; other batches reload them
  // for the sequence place_token finds.
  const int32_t qb = p.q_indptr[item], qe = p.q_indptr[item + 1];
  HeadScalars hs = load_head_scalars(p, item, g);
  int32_t sel_row = load_selection_row(p, item);
  const DecodeItem it = decode_item(p, a.items_are_tokens, item, qb, qe, hs.kv_len);
  if (!it.served) {
    wait_previous();
    if (z == 0 && tid == 0) *num_splits_out = 0;
    record(-1);
    return;
  }
  if (it.seq >= 0 && it.seq != item) {
    hs = load_head_scalars(p, it.seq, g);
    sel_row = load_selection_row(p, it.seq);
  }
  T* out_rows = static_cast<T*>(p.out) + (static_cast<int64_t>(it.token) * p.num_q_heads + h0) * kD;
  auto write_zeros = [&]() {
    wait_previous();
    for (int i = tid; i < nh * kD; i += kDecodeThreads) out_rows[i] = from_f32<T>(0.0f);
    if (tid == 0) *num_splits_out = 0;
  };
  HeadView hv;
  if (it.seq < 0 || !resolve_head(p, it.seq, g, it.position, it.position, hs, hv)) {
    if (z == 0) write_zeros();
    record(-1);
    return;
  }

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  // Float pages: [stages][64][stride] T. Quantized: [stages][64][code bytes] u8.
  unsigned char* sK = smem_raw + sizeof(T) * Shape::kSmemQ;
  unsigned char* sV = sK + kStages * kStageBytes;
  unsigned char* after_stages = sV + kStages * kStageBytes;
  // Quantized only: the stages' row parameters.
  float* pK = reinterpret_cast<float*>(after_stages);            // [stages][128][params] f32
  float* pV = pK + kStages * kBlockKeys * Shape::kParams;        // [stages][128][params] f32
  int32_t* kpos = reinterpret_cast<int32_t*>(after_stages + Shape::template quant_bytes<T>());
  int32_t* listed = kpos + kStages * kBlockKeys;  // kpos: [stages][kBlockKeys]
  __shared__ Span span_s;
  __shared__ float ml_s[kDecodeWarps][kRows][2];
  constexpr int kTicketRing = 8;
  __shared__ int32_t tickets_s[kTicketRing];  // ticketed splits: ticket k in slot k % kTicketRing
  __shared__ int32_t last_ticket_s;           // the first ticket past the row's end (none: max)

  if (p.selection_just_written && hv.mode == static_cast<int32_t>(HeadMode::kSelected)) {
    wait_previous();
  }
  if (warp == 0) {
    const Span sp =
        build_span(p, hv, it.seq, g, it.position, it.position, listed, a.listed_cap, lane, sel_row);
    if (lane == 0) span_s = sp;
  }
  __syncthreads();
  const Span sp = span_s;
  const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
  const int32_t nb = static_cast<int32_t>(min((num_rows + kBlockKeys - 1) / kBlockKeys,
                                              static_cast<int64_t>(INT32_MAX / kBlockKeys - 1)));
  // Ticketed splits: split z first takes the kFixed blocks [z kFixed, (z + 1) kFixed) (known
  // before the wait, so their rows are fetched and prefetched early); the row's remaining blocks,
  // from splits * kFixed on, go out chunk_blocks at a time to whichever split of the row asks
  // first (an atomic ticket per chunk), so a split whose loads are served slowly takes fewer
  // blocks instead of finishing last. Otherwise split z takes the fixed share
  // [nb z / splits, nb (z + 1) / splits).
  constexpr bool ticketed = kTicketed;           // then a.row_tickets is set (launch_decode)
  constexpr int32_t kFixed = kStages + 1;        // the blocks fetched before the loop (first[])
  const int32_t min_blocks =
      ticketed ? max(a.min_blocks_per_split, kFixed) : a.min_blocks_per_split;
  const int32_t want = (nb + min_blocks - 1) / min_blocks;
  const int32_t splits = nb == 0 ? 1 : max(1, min(max_splits, want));
  if (z >= splits) {
    record(-1);
    return;
  }
  if (nb == 0) {  // no visible key: the row is 0
    write_zeros();
    record(-1);
    return;
  }
  const int32_t b_begin =
      ticketed ? z * kFixed : static_cast<int32_t>(static_cast<int64_t>(nb) * z / splits);
  const int32_t b_end = ticketed
                            ? min(nb, b_begin + kFixed)
                            : static_cast<int32_t>(static_cast<int64_t>(nb) * (z + 1) / splits);
  const int32_t n = b_end - b_begin;  // the split's fixed blocks
  // Only a split whose fixed blocks all lie in the row takes tickets (otherwise the row ends
  // within them). Ticket t is the chunk [tickets_begin + t cb, + cb) of the row; a ticket at or
  // past the row's end ends the split (the tickets a split draws only grow).
  const bool takes_tickets = ticketed && n == kFixed;
  const int32_t tickets_begin = splits * kFixed;
  const int32_t cb = max(1, a.chunk_blocks);
  int32_t* ticket_counter =
      ticketed
          ? a.row_tickets + static_cast<int64_t>(item) * p.num_kv_heads * a.head_chunks + blockIdx.y
          : nullptr;
  // The row block of the split's v-th block, -1 past its end. Ticket k serves v in
  // [kFixed + k cb, kFixed + (k + 1) cb); tickets_s holds it from iteration k cb on.
  auto block_of = [&](int32_t v) -> int32_t {
    if (v < n) return b_begin + v;
    if (!takes_tickets) return -1;
    const int32_t k = (v - kFixed) / cb;
    if (k > last_ticket_s) return -1;  // never drawn: the split ends at ticket last_ticket_s
    const int64_t b =
        tickets_begin + static_cast<int64_t>(tickets_s[k % kTicketRing]) * cb + (v - kFixed) % cb;
    return b < nb ? static_cast<int32_t>(b) : -1;
  };
  // Each thread pair (float pages: 64 keys per block) or each thread (quantized: 128) resolves one
  // row of K and V per block, the rows of warp w being its own keys [kWarpKeys w, kWarpKeys (w +
  // 1)). The row's block-table entry is fetched two iterations before its copies are issued
  // (fetch_row's load is first used by resolve_row in a later iteration), so the table lookup's
  // latency overlaps blocks of compute instead of stalling the issue of the next stage.
  constexpr int kThreadsPerRow = kDecodeThreads / kBlockKeys;  // 2 (float) or 1 (quantized)
  static_assert(kThreadsPerRow * kBlockKeys == kDecodeThreads, "one or two threads per key row");
  const int my_row = tid / kThreadsPerRow;
  const T* k_pool = static_cast<const T*>(hv.k);
  const T* v_pool = static_cast<const T*>(hv.v);
  // The copies of a warp's 16 rows (lanes 2q and 2q + 1 of warp w own row 16 w + q: its table
  // entry and position) are spread so that one instruction covers kCopyRows whole rows (lane l:
  // row l / kRowChunks of the group, 16-byte chunk l % kRowChunks), the rows' addresses passed from
  // their owners by shuffles: whole 128-byte lines per request (each thread pair copying
  // its own row, 32 bytes of each of 16 rows per instruction, measured slower).
  constexpr int kRowChunks = kQuantized ? Shape::kCodeChunks : kChunks;  // 16 B chunks per row
  constexpr int kCopyRows = 32 / kRowChunks >= 1 ? 32 / kRowChunks : 1;  // rows per copy instr.
  static_assert(kRowChunks <= 32 && kRowChunks >= 1, "a row's chunks fit one warp instruction");
  static_assert(
      !kQuantized || (32 % kRowChunks == 0 && kCopyRows <= kWarpKeys && kWarpKeys % kCopyRows == 0),
      "quantized: whole code rows per copy instruction (no row past the warp's own)");
  constexpr uint32_t kRowBytes = kQuantized ? Shape::kCodeBytes : kD * sizeof(T);
  // The same from the params (p.head_dim == kD): a run-time factor, so that each address below is
  // one IMAD.WIDE.U32 (ptxas splits a multiplication by the constant into shifts and adds).
  const uint32_t row_bytes = static_cast<uint32_t>(p.head_dim) * static_cast<uint32_t>(sizeof(T));
  // Quantized pages: a row's codes sit at page * page_bytes + in_page * kCodeBytes, its
  // parameters at page * page_bytes + params_offset + in_page * 4 kParams (kernels/kv_quant.h;
  // page_bytes and params_offset are multiples of 16, so every code chunk is 16-byte aligned).
  // The streaming pool may have other page_tokens than the retrieval pool: hv's are this head's.
  const uint32_t page_bytes =
      kQuantized ? static_cast<uint32_t>(kv_quant_page_bytes(kQ, hv.page_tokens, kD)) : 0u;
  const uint32_t params_offset =
      kQuantized ? static_cast<uint32_t>(kv_quant_params_offset(kQ, hv.page_tokens, kD)) : 0u;
  // This lane's 16-byte chunk of row 0 of each pool (the issue loop adds the row's offset).
  const char* k_lane = reinterpret_cast<const char*>(k_pool) + (lane % kRowChunks) * 16;
  const char* v_lane = reinterpret_cast<const char*>(v_pool) + (lane % kRowChunks) * 16;
  auto issue = [&](int stage, const PendingRow& pr) {
    const int sub = lane / kRowChunks, c = lane % kRowChunks;
    if constexpr (kQuantized) {
      constexpr int kCodeBytes = Shape::kCodeBytes;
      // Lanes kThreadsPerRow r (and r + 1) of warp w own row kWarpKeys w + r (= my_row): its
      // position, page and row in it.
      const PoolPage kp = resolve_page<kTiered>(hv, pr);
      if (kThreadsPerRow == 1 || tid % 2 == 0) kpos[stage * kBlockKeys + my_row] = kp.position;
      const int32_t own_page = kp.position >= 0 ? kp.page : -1;  // -1: zero-fill
      unsigned char* dk0 = sK + stage * kStageBytes;
      unsigned char* dv0 = sV + stage * kStageBytes;
#pragma unroll
      for (int r0 = 0; r0 < kWarpKeys; r0 += kCopyRows) {
        const int rr = r0 + sub;  // row of the warp's kWarpKeys that this lane copies (its owner)
        const int32_t page = __shfl_sync(0xffffffffu, own_page, kThreadsPerRow * rr);
        const int32_t in_page = __shfl_sync(0xffffffffu, kp.in_page, kThreadsPerRow * rr);
        // Page -1 reads nothing (the 16 bytes are zero-filled); its address is page 0's.
        const uint32_t pg = static_cast<uint32_t>(max(page, 0));
        const uint32_t in_off = static_cast<uint32_t>(in_page) * kCodeBytes;
        const int dst = code_offset<kCodeBytes>(warp * kWarpKeys + rr, c);  // swizzled chunk
        cp_async_16_or_zero(dk0 + dst, row_address(k_lane + in_off, pg, page_bytes), page);
        cp_async_16_or_zero(dv0 + dst, row_address(v_lane + in_off, pg, page_bytes), page);
      }
      // The row's parameters, K's and V's (the same offset in either pool; zeros for a missing
      // row, so it dequantizes to zeros like its zero-filled codes): the row's thread copies both,
      // or, with a thread pair per row, the even thread K's and the odd one V's.
      constexpr int kParamBytes = 4 * Shape::kParams;
      const uint64_t param_off =
          static_cast<uint64_t>(static_cast<uint32_t>(max(own_page, 0))) * page_bytes +
          (params_offset + static_cast<uint32_t>(kp.in_page) * kParamBytes);
      const int pdst = (stage * kBlockKeys + my_row) * Shape::kParams;
      if constexpr (kThreadsPerRow == 1) {
        cp_async_params_or_zero<kParamBytes>(
            pK + pdst, reinterpret_cast<const char*>(k_pool) + param_off, own_page);
        cp_async_params_or_zero<kParamBytes>(
            pV + pdst, reinterpret_cast<const char*>(v_pool) + param_off, own_page);
      } else {
        const bool even = tid % 2 == 0;
        cp_async_params_or_zero<kParamBytes>(
            (even ? pK : pV) + pdst,
            reinterpret_cast<const char*>(even ? k_pool : v_pool) + param_off, own_page);
      }
    } else {
      const PoolRow kr = resolve_row<kTiered>(hv, pr);
      if (tid % 2 == 0) kpos[stage * kBlockKeys + my_row] = kr.position;
      const int32_t own_row = kr.position >= 0 ? kr.row : -1;  // -1: zero-fill
      T* dk0 = reinterpret_cast<T*>(sK + stage * kStageBytes) + (warp * 16) * kStride;
      T* dv0 = reinterpret_cast<T*>(sV + stage * kStageBytes) + (warp * 16) * kStride;
#pragma unroll
      for (int r0 = 0; r0 < 16; r0 += kCopyRows) {
        const int rr = r0 + sub;  // row of the warp's 16 that this lane copies
        const int32_t row = __shfl_sync(0xffffffffu, own_row, 2 * (rr < 16 ? rr : 0));
        if (sub < kCopyRows && rr < 16) {
          // Row -1 reads nothing (the 16 bytes are zero-filled); its address is row 0's.
          const uint32_t r = static_cast<uint32_t>(max(row, 0));
          cp_async_16_or_zero(dk0 + rr * kStride + c * 8, row_address(k_lane, r, row_bytes), row);
          cp_async_16_or_zero(dv0 + rr * kStride + c * 8, row_address(v_lane, r, row_bytes), row);
        }
      }
    }
  };
  // With l2_prefetch, a block's rows are also prefetched into L2 one iteration before their
  // copies are issued (the pair's two threads split the row's lines), so the DRAM reads of three
  // blocks are in flight while one is computed, without more shared memory. (Two to four blocks
  // ahead measured 5-45% slower on an H100: 264 blocks' prefetched rows overflow the L2.)
  auto prefetch_rows = [&](const PendingRow& pr) {
    if constexpr (kQuantized) {
      // Quantized pages never prefetch into L2 (l2_prefetch below is false for them).
      (void)pr;
    } else {
      const PoolRow kr = resolve_row<kTiered>(hv, pr);
      if (kr.position < 0) return;
      constexpr int kStep = kRowBytes % 128 == 0 ? 128 : 64;  // every line the row touches
      constexpr int kPairSteps = (kRowBytes + 2 * kStep - 1) / (2 * kStep);  // per thread
      const char* kb = row_address(reinterpret_cast<const char*>(k_pool), kr.row, row_bytes);
      const char* vb = row_address(reinterpret_cast<const char*>(v_pool), kr.row, row_bytes);
#pragma unroll
      for (int j = 0; j < kPairSteps; ++j) {
        const int o = (2 * j + tid % 2) * kStep;
        if (o < static_cast<int>(kRowBytes)) {
          prefetch_l2(kb + o);
          prefetch_l2(vb + o);
        }
      }
    }
  };
  // The first kStages + 1 blocks' table entries are fetched together (one round trip),
  // then the first kStages - 1 blocks are issued. Iteration i issues block i + kStages - 1
  // (fetched two iterations earlier) into the stage block i - 1 left, prefetches block
  // i + kStages into L2 (fetched one iteration earlier) and fetches the table entry of block
  // i + kStages + 1 (the rows qa / qb of the loop below).
  // Quantized pages never prefetch into L2 (compiled out): their stages and three blocks per SM
  // keep enough bytes in flight, and on an H200 the prefetch made every dense case slower (by
  // 1-19%: each byte crossed the L2 twice, Mem Busy 89% at 69% DRAM for fp8).
  const bool l2_prefetch = !kQuantized && a.l2_prefetch != 0;
  const int32_t page_shift =
      (hv.page_tokens & (hv.page_tokens - 1)) == 0 ? __ffs(hv.page_tokens) - 1 : -1;
  PendingRow first[kStages + 1];
#pragma unroll
  for (int s = 0; s <= kStages; ++s) {
    if (s < n)
      first[s] = fetch_row(hv, sp, listed, (b_begin + s) * kBlockKeys + my_row, page_shift);
  }
  if (!waited && l2_prefetch) {  // still overlapping the previous kernel: warm L2 for the copies
#pragma unroll
    for (int s = 0; s <= kStages; ++s) {
      if (s < n && s < a.prewait_prefetch) prefetch_rows(first[s]);
    }
  }
  wait_previous();
  if (z == 0 && tid == 0) *num_splits_out = splits;
  // Thread 0 draws ticket k one iteration before its first use (the row fetch of block
  // kFixed + k cb, at iteration k cb) and publishes it at the top of the next iteration, so the
  // atomic's round trip overlaps a block of compute. Ticket 0 is drawn here.
  int32_t ticket_reg = 0, ticket_k = -1;
  bool out_of_row = false;  // thread 0: a drawn ticket lies past the row's end; draw no more
  if (takes_tickets && tid == 0) {
    ticket_reg = atomicAdd(ticket_counter, 1);
    ticket_k = 0;
    last_ticket_s = INT32_MAX;
  }
  // Q rows (heads h0 .. h0 + nh - 1 of the token), rows past nh zero: 8 threads per row.
  if (tid / 8 < kRows) {
    const int r = tid / 8;
    const bool valid = r < nh;
    const T* src = static_cast<const T*>(p.q) +
                   (static_cast<int64_t>(it.token) * p.num_q_heads + h0 + (valid ? r : 0)) * kD;
    for (int c = tid % 8; c < kChunks; c += 8)
      cp_async_16(sQ + r * kStride + c * 8, src + c * 8, valid);
  }
  if constexpr (kQuantized) cp_async_commit();  // Q alone: the queries' conversion waits for it
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n) issue(s, first[s]);
    cp_async_commit();
  }
  PendingRow q0 = first[kStages - 1];  // block kStages - 1 (valid if below n)
  PendingRow q1 = first[kStages];      // block kStages (valid if below n)

  const float scale_log2 = p.scale * 1.4426950408889634f;
  // Float pages: Q's A fragments (rows = query heads). Quantized pages: Q^T's B fragments (the
  // swapped products below: column fg = query head fg).
  [[maybe_unused]] uint32_t qf[kKSteps][4];
  [[maybe_unused]] uint32_t qtf[kKSteps][2];
  // The output accumulators. Float pages: O, n-tile d of the head_dim, rows fg (0, 1) and
  // fg + 8 (2, 3), columns 2 ft and 2 ft + 1. Quantized pages: O^T, m-tile d of the head_dim,
  // rows = head_dim elements kD / 8 fg + 2 d (0, 1) and + 1 (2, 3), columns = query heads 2 ft
  // (0, 2) and 2 ft + 1 (1, 3).
  constexpr int kOTiles = kQuantized ? kD / 16 : kDTiles;
  float o[kOTiles][4];
#pragma unroll
  for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  // The softmax state of the thread's two query heads: float pages rows fg and fg + 8,
  // quantized pages 2 ft and 2 ft + 1 (below, "the thread's queries").
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int key0 = warp * kWarpKeys;  // this warp's 16 (quantized: 32) keys of each block
  // Quantized pages (kv_fragments.cuh): the MMAs run on the codes in f16, so the queries are
  // converted to f16 once, head h scaled by 2^eq_h (max |q'| in [2^14, 2^15): bf16 -> f16 is then
  // exact down to 2^-28 of the head's max, and f16 queries stay exact); scores are kept in the
  // head's units (raw score * 2^eq_h), so its softmax factor is scale_log2 * 2^-eq_h (sl0 / sl1
  // for the thread's queries) and m is put back into true units at the end. qsum: the head's
  // sum of q' (the zero points' term). P V accumulates (p_t s_t F) c_t with F = 2^(141 - veb),
  // veb the largest biased f32 exponent of the V scales seen so far (p_t s_t F < 2^15 in f16),
  // and zacc = sum_t p_t z_t in f32; the end adds them back: o = acc / F + zacc.
  float sl0 = scale_log2, sl1 = scale_log2;
  [[maybe_unused]] float rq0 = 1.0f, rq1 = 1.0f, qsum0 = 0.0f, qsum1 = 0.0f;
  [[maybe_unused]] float qoff0 = 0.0f, qoff1 = 0.0f;  // the K codes' offsets (k_fragment)
  [[maybe_unused]] float zacc0 = 0.0f, zacc1 = 0.0f;
  [[maybe_unused]] int veb = 15;
  [[maybe_unused]] const int fg = lane / 4, ft = lane % 4;  // fragments: group, thread in it

  if constexpr (kQuantized) {
    // The queries in f16 for the code MMAs, once, while the first key blocks load (Q is its own,
    // first, copy group). Thread ft of a quad holds the quarter [kD / 4 ft, kD / 4 (ft + 1)) of
    // query head fg (in the permuted order of the K fragments, k_local).
    cp_async_wait<kStages - 1>();
    __syncthreads();
    constexpr int kQuarter = kD / 4;
    T x0[kQuarter];
#pragma unroll
    for (int c = 0; c < kQuarter / 8; ++c) {
      *reinterpret_cast<uint4*>(x0 + 8 * c) =
          *reinterpret_cast<const uint4*>(sQ + fg * kStride + kQuarter * ft + 8 * c);
    }
    float amax = 0.0f, usum = 0.0f;
#pragma unroll
    for (int j = 0; j < kQuarter; ++j) {
      const float v = to_f32(x0[j]);
      amax = fmaxf(amax, fabsf(v));
      usum += v;
    }
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o2));
      usum += __shfl_xor_sync(0xffffffffu, usum, o2);
    }
    // NaN / inf (exponent 255) give 2^-114: the head stays NaN / inf, as it should.
    const int e = min(126, max(-126, 141 - static_cast<int>(__float_as_uint(amax) >> 23)));
    const float f = exp2_int(e);
    // The offset k_fragment leaves in the int codes, per head: kKOffset * sum(y)
    // (kv_fragments.cuh).
    float ysum = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float w = f * k_query_weight<kQ>(h);
        const float y0 = to_f32(x0[k_local<kQ>(kk, h, 0)]) * w;
        const float y1 = to_f32(x0[k_local<kQ>(kk, h, 1)]) * w;
        qtf[kk][h] = pack2<__half>(y0, y1);
        ysum += y0 + y1;
      }
    }
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) ysum += __shfl_xor_sync(0xffffffffu, ysum, o2);
    // Head fg's numbers sit in every lane of quad fg; the thread's queries are 2 ft and 2 ft + 1.
    const float rq = exp2_int(-e), qsum = usum * f, qoff = kKOffset<kQ> * ysum;
    const int src0 = 8 * ft, src1 = 8 * ft + 4;  // lanes of quads 2 ft and 2 ft + 1
    rq0 = __shfl_sync(0xffffffffu, rq, src0);
    rq1 = __shfl_sync(0xffffffffu, rq, src1);
    qsum0 = __shfl_sync(0xffffffffu, qsum, src0);
    qsum1 = __shfl_sync(0xffffffffu, qsum, src1);
    qoff0 = __shfl_sync(0xffffffffu, qoff, src0);
    qoff1 = __shfl_sync(0xffffffffu, qoff, src1);
    sl0 = scale_log2 * rq0;
    sl1 = scale_log2 * rq1;
  }

  // One key block over quantized pages (kv_fragments.cuh), products swapped: S^T = K Q^T with
  // the warp's 32 keys as two 16-row m-tiles and the block's 8 query heads as the columns, then
  // O^T += V^T P^T with the head_dim as the rows. With GQA groups of 4-8 heads this takes half
  // the MMAs of Q K^T and P V over 16 query rows, and every thread keeps the softmax of two
  // query heads over its four keys (key0 + 16 mt + fg and + 8) instead of two rows of 16 keys.
  // P^T's B fragments are the transposes of the score fragments' 8 x 8 halves (movmatrix).
  auto compute_quantized = [&](int stage, uint32_t vmask) {
    if constexpr (!kQuantized) {
      (void)stage;
      (void)vmask;
    } else {
      constexpr int kMT = kWarpKeys / 16;
      // s[mt]: keys key0 + 16 mt + fg (0, 1) and + 8 (2, 3), queries 2 ft (0, 2), 2 ft + 1 (1, 3).
      float s[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) s[mt][0] = s[mt][1] = s[mt][2] = s[mt][3] = 0.0f;
      const unsigned char* kst = sK + stage * kStageBytes;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t wlo[kKWords<kD, kQ>], whi[kKWords<kD, kQ>];
        load_k_words<kD, kQ>(kst, key0 + 16 * mt + fg, ft, wlo);
        load_k_words<kD, kQ>(kst, key0 + 16 * mt + fg + 8, ft, whi);
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          uint32_t af[4];  // A = (keys fg, fg + 8) x (k 2 ft.., 2 ft + 8..): k_fragment's halves
          k_fragment<kQ>(wlo, kk, af[0], af[2]);
          k_fragment<kQ>(whi, kk, af[1], af[3]);
          mma_16816<__half>(s[mt], af, qtf[kk][0], qtf[kk][1]);
        }
      }
      // The scale and zero point (fp8: scale, 0) of the thread's key 16 mt + 8 hi + fg among the
      // warp's rows of a stage's K or V parameters.
      auto key_params = [&](const float* rows, int mt, int hi) -> float2 {
        const int key = 16 * mt + 8 * hi + fg;
        if constexpr (Shape::kParams == 2) {
          return *reinterpret_cast<const float2*>(rows + 2 * key);
        } else {
          return make_float2(rows[key], 0.0f);
        }
      };
      // Scores in the heads' units: s_t (acc - offsets) + z_t qsum' (fp8: s_t acc).
      const float* kq = pK + (stage * kBlockKeys + key0) * Shape::kParams;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const float2 kp = key_params(kq, mt, hi);
          if constexpr (Shape::kParams == 2) {
            s[mt][2 * hi] = fmaf(s[mt][2 * hi] - qoff0, kp.x, kp.y * qsum0);
            s[mt][2 * hi + 1] = fmaf(s[mt][2 * hi + 1] - qoff1, kp.x, kp.y * qsum1);
          } else {
            s[mt][2 * hi] *= kp.x;
            s[mt][2 * hi + 1] *= kp.x;
          }
        }
      }
      // Only blocks with a masked key (row or window edges, missing rows).
      if (vmask != 0xffffffffu) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int hi = 0; hi < 2; ++hi) {
            if (((vmask >> (16 * mt + 8 * hi + fg)) & 1u) == 0u) {
              s[mt][2 * hi] = -INFINITY;
              s[mt][2 * hi + 1] = -INFINITY;
            }
          }
        }
      }
      // Each query's maximum over the warp's keys: the thread's four, then its column's 8 lanes.
      float mx0 = fmaxf(s[0][0], s[0][2]);
      float mx1 = fmaxf(s[0][1], s[0][3]);
#pragma unroll
      for (int mt = 1; mt < kMT; ++mt) {
        mx0 = fmaxf(mx0, fmaxf(s[mt][0], s[mt][2]));
        mx1 = fmaxf(mx1, fmaxf(s[mt][1], s[mt][3]));
      }
      warp_max2<4, 16>(mx0, mx1);
      const OnlineMaxStep st = online_max_step(mx0, mx1, m0, m1, sl0, sl1);
      const float base0 = st.base0, base1 = st.base1;
      float alpha0 = st.alpha0, alpha1 = st.alpha1;  // times F_old / F_new below
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        s[mt][0] = fast_exp2(fmaf(s[mt][0], sl0, -base0));
        s[mt][2] = fast_exp2(fmaf(s[mt][2], sl0, -base0));
        s[mt][1] = fast_exp2(fmaf(s[mt][1], sl1, -base1));
        s[mt][3] = fast_exp2(fmaf(s[mt][3], sl1, -base1));
      }
      float ls0 = s[0][0] + s[0][2];
      float ls1 = s[0][1] + s[0][3];
#pragma unroll
      for (int mt = 1; mt < kMT; ++mt) {
        ls0 = ls0 + s[mt][0];
        ls0 = ls0 + s[mt][2];
        ls1 = ls1 + s[mt][1];
        ls1 = ls1 + s[mt][3];
      }
      l0 = l0 * alpha0 + ls0;  // the thread's keys only: the column's lanes are summed at the end
      l1 = l1 * alpha1 + ls1;
      // The V parameters of the thread's keys; P' = p_t s_t F in f16 (F from the largest V scale so
      // far; a larger one rescales o by the exact power of two F_new / F_old together with alpha),
      // and z's term in f32.
      const float* vq = pV + (stage * kBlockKeys + key0) * Shape::kParams;
      float vsc[kMT][2];
      [[maybe_unused]] float vzr[kMT][2];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const float2 vp = key_params(vq, mt, hi);
          vsc[mt][hi] = vp.x;
          vzr[mt][hi] = vp.y;
        }
      }
      if constexpr (Shape::kParams == 2) {
        float z0 = s[0][0] * vzr[0][0] + s[0][2] * vzr[0][1];
        float z1 = s[0][1] * vzr[0][0] + s[0][3] * vzr[0][1];
#pragma unroll
        for (int mt = 1; mt < kMT; ++mt) {
          z0 += s[mt][0] * vzr[mt][0] + s[mt][2] * vzr[mt][1];
          z1 += s[mt][1] * vzr[mt][0] + s[mt][3] * vzr[mt][1];
        }
        zacc0 = zacc0 * alpha0 + z0;
        zacc1 = zacc1 * alpha1 + z1;
      }
      float mxs = fmaxf(vsc[0][0], vsc[0][1]);
#pragma unroll
      for (int mt = 1; mt < kMT; ++mt) mxs = fmaxf(mxs, fmaxf(vsc[mt][0], vsc[mt][1]));
#pragma unroll
      for (int o2 = 4; o2 <= 16; o2 <<= 1) mxs = fmaxf(mxs, __shfl_xor_sync(0xffffffffu, mxs, o2));
      const int eb = min(254, max(veb, static_cast<int>((__float_as_uint(mxs) >> 23) & 0xffu)));
      if (eb != veb) {  // the same in every lane (the columns' lanes cover the warp's keys)
        const float ratio = exp2_int(max(-126, veb - eb));
        alpha0 *= ratio;
        alpha1 *= ratio;
        veb = eb;
      }
      const float big_f = exp2_int(141 - veb);
      // P^T's B fragments per 16 keys mt: b0 = keys 2 ft, 2 ft + 1 of query fg (the transposed
      // keys 0..7 half of s[mt]), b1 = keys 2 ft + 8, 2 ft + 9 (the + 8 half).
      uint32_t pb[kMT][2];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const float f0 = vsc[mt][0] * big_f, f1 = vsc[mt][1] * big_f;
        pb[mt][0] = movmatrix_trans(pack2<__half>(s[mt][0] * f0, s[mt][1] * f0));
        pb[mt][1] = movmatrix_trans(pack2<__half>(s[mt][2] * f1, s[mt][3] * f1));
      }
      // Once the maxima settle, alpha is exactly 1 (exp2 of 0) for the whole warp, and the
      // multiplications would leave o as it is: skip them (bit-identical either way).
      if (__any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
        for (int d = 0; d < kOTiles; ++d) {
          o[d][0] *= alpha0;
          o[d][1] *= alpha1;
          o[d][2] *= alpha0;
          o[d][3] *= alpha1;
        }
      }
      // V^T's A fragments per 16 keys mt: m-tile d of the head_dim is kv_fragments' n-tiles 2 d
      // (rows fg) and 2 d + 1 (rows fg + 8), over key rows 2 ft, 2 ft + 1 (a0, a1) and 2 ft + 8,
      // 2 ft + 9 (a2, a3); thread fg holds head_dim elements v_phys(j, fg) of n-tile j.
      constexpr int kW = kVWords<kD, kQ>;
      constexpr int kTilesPerWord = kQ == KvQuant::kInt4 ? 8 : 4;
      const unsigned char* vst = sV + stage * kStageBytes;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int kr = key0 + 16 * mt + 2 * ft;
        uint32_t va[kW], vb[kW], vc[kW], vd[kW];
        load_v_words<kD, kQ>(vst, kr, fg, va);
        load_v_words<kD, kQ>(vst, kr + 1, fg, vb);
        load_v_words<kD, kQ>(vst, kr + 8, fg, vc);
        load_v_words<kD, kQ>(vst, kr + 9, fg, vd);
#pragma unroll
        for (int m = 0; m < kW; ++m) {
          uint32_t f0[kTilesPerWord], f1[kTilesPerWord];
          v_fragments<kQ>(va[m], vb[m], f0);
          v_fragments<kQ>(vc[m], vd[m], f1);
#pragma unroll
          for (int jj = 0; jj < kTilesPerWord / 2; ++jj) {
            const int d = m * kTilesPerWord / 2 + jj;
            if (d < kOTiles) {
              const uint32_t af[4] = {f0[2 * jj], f0[2 * jj + 1], f1[2 * jj], f1[2 * jj + 1]};
              mma_16816<__half>(o[d], af, pb[mt][0], pb[mt][1]);
            }
          }
        }
      }
    }
  };

  // One iteration per key block. qa holds block i + kStages - 1's table entry (issued now) and
  // is then refilled with block i + kStages + 1's; qb holds block i + kStages's (prefetched
  // now). The loop below runs the
  // iteration twice per round with the two rows swapped, so a fresh table load is first read one
  // iteration later: with a rotating q0 = q1 the compiler moved each just-loaded entry into the
  // loop-carried register at the back edge, and that move waited for the load every iteration
  // (12% of lserve batch 8's stall samples on an H100, ncu).
  auto step = [&](const int32_t i, PendingRow& qa, PendingRow& qb) -> bool {
    if (ticket_k >= 0) {  // thread 0: publish the ticket drawn last iteration
      tickets_s[ticket_k % kTicketRing] = ticket_reg;
      if (tickets_begin + static_cast<int64_t>(ticket_reg) * cb >= nb) {
        out_of_row = true;
        last_ticket_s = ticket_k;
      }
      ticket_k = -1;
    }
    cp_async_wait<kStages - 2>();
    __syncthreads();  // block i landed; every warp is done with block i - 1's stage
    if (block_of(i) < 0) return false;  // the same in every thread (tickets_s is published)
#ifdef LS_DECODE_TRACE_LANDINGS
    // Profiling builds only (decode_trace.h): when each of the block's first 32 key blocks was
    // ready to compute, after the trace records.
    if (a.trace != nullptr && tid == 0 && i < kDecodeTraceLandings) {
      const int64_t records = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z +
                              (gridDim.z > 1 ? static_cast<int64_t>(gridDim.x) * p.num_q_heads : 0);
      const int64_t block =
          (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
      reinterpret_cast<uint64_t*>(a.trace + records)[block * kDecodeTraceLandings + i] =
          trace_now();
    }
#endif
    if (takes_tickets && tid == 0 && !out_of_row && (i + 1) % cb == 0) {
      ticket_reg = atomicAdd(ticket_counter, 1);
      ticket_k = (i + 1) / cb;
    }
    if (i == 0) {
      if (a.trace != nullptr) tr.first_data = trace_now();
      if constexpr (!kQuantized) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          ldmatrix_x4(qf[kk], sQ + (lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
        }
      }
    }
    const int nxt = i + kStages - 1;
    if (block_of(nxt) >= 0) issue(nxt % kStages, qa);
    cp_async_commit();
    if (l2_prefetch && block_of(nxt + 1) >= 0) prefetch_rows(qb);
    const int32_t bf = block_of(nxt + 2);
    qa = bf >= 0 ? fetch_row(hv, sp, listed, bf * kBlockKeys + my_row, page_shift) : PendingRow{};

    const int stage = i % kStages;
    const int32_t* kp = kpos + stage * kBlockKeys + key0;
    const bool vis = key_visible(hv, it.position, kp[lane % kWarpKeys]);
    if constexpr (kQuantized) {
      // Lane l's vote is key l's visibility, so the ballot is the warp's key mask and the
      // masking needs no second look at the keys.
      const uint32_t vmask = __ballot_sync(0xffffffffu, vis);
      if (vmask != 0u) compute_quantized(stage, vmask);
      return true;
    } else {
      if (!__any_sync(0xffffffffu, vis)) return true;
      const bool all = __all_sync(0xffffffffu, vis);
      // Score fragments: s[nt] holds keys key0 + 8 nt + 2 ft + e of rows fg (e) and fg + 8 (2 + e).
      float s[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const T* k_st = reinterpret_cast<const T*>(sK + stage * kStageBytes);
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t kf[4];
        ldmatrix_x4(kf, k_st + (key0 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 +
                            ((lane / 8) % 2) * 8);
        mma_16816<T>(s[0], qf[kk], kf[0], kf[1]);
        mma_16816<T>(s[1], qf[kk], kf[2], kf[3]);
      }
      if (!all) {  // only blocks with a masked key (row or window edges, missing rows)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = nt * 8 + 2 * (lane % 4) + e;
            if (!key_visible(hv, it.position, kp[key])) {
              s[nt][e] = -INFINITY;
              s[nt][2 + e] = -INFINITY;
            }
          }
        }
      }
      float mx0 = fmaxf(s[0][0], s[0][1]);
      float mx1 = fmaxf(s[0][2], s[0][3]);
      mx0 = fmaxf(mx0, fmaxf(s[1][0], s[1][1]));
      mx1 = fmaxf(mx1, fmaxf(s[1][2], s[1][3]));
      warp_max2<1, 2>(mx0, mx1);
      const OnlineMaxStep st = online_max_step(mx0, mx1, m0, m1, sl0, sl1);
      const float base0 = st.base0, base1 = st.base1, alpha0 = st.alpha0, alpha1 = st.alpha1;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        s[nt][0] = fast_exp2(fmaf(s[nt][0], sl0, -base0));
        s[nt][1] = fast_exp2(fmaf(s[nt][1], sl0, -base0));
        s[nt][2] = fast_exp2(fmaf(s[nt][2], sl1, -base1));
        s[nt][3] = fast_exp2(fmaf(s[nt][3], sl1, -base1));
      }
      float ls0 = s[0][0] + s[0][1];
      float ls1 = s[0][2] + s[0][3];
      ls0 = ls0 + s[1][0];
      ls0 = ls0 + s[1][1];
      ls1 = ls1 + s[1][2];
      ls1 = ls1 + s[1][3];
      l0 = l0 * alpha0 + ls0;
      l1 = l1 * alpha1 + ls1;
      // Once the row maxima settle, alpha is exactly 1 (exp2 of 0) for the whole warp, and the
      // 64 multiplications would leave o as it is: skip them (bit-identical either way).
      if (__any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
        for (int d = 0; d < kDTiles; ++d) {
          o[d][0] *= alpha0;
          o[d][1] *= alpha0;
          o[d][2] *= alpha1;
          o[d][3] *= alpha1;
        }
      }
      uint32_t pf[4];
      pf[0] = pack2<T>(s[0][0], s[0][1]);
      pf[1] = pack2<T>(s[0][2], s[0][3]);
      pf[2] = pack2<T>(s[1][0], s[1][1]);
      pf[3] = pack2<T>(s[1][2], s[1][3]);
      const T* v_st = reinterpret_cast<const T*>(sV + stage * kStageBytes);
#pragma unroll
      for (int dn = 0; dn < kD / 16; ++dn) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, v_st + (key0 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride +
                                  dn * 16 + (lane / 16) * 8);
        mma_16816<T>(o[2 * dn], pf, vf[0], vf[1]);
        mma_16816<T>(o[2 * dn + 1], pf, vf[2], vf[3]);
      }
      return true;
    }
  };
  int32_t i = 0;  // after the loop: the blocks computed
  for (;;) {
    if (!step(i, q0, q1)) break;
    ++i;
    if (!step(i, q1, q0)) break;
    ++i;
  }
  if (a.trace != nullptr) tr.loop_end = trace_now();
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: reuse them for the merge

  // Merge the 4 warps' states: o (unnormalised), m (raw score max) and l per query head.
  // [warps][kRows][kOwStride] f32, from the K stages on
  constexpr int kOwStride = Shape::kOwStride;
  static_assert(Shape::kMergeBytes <=
                    (kQuantized ? 2 * kStages * kStageBytes + Shape::template quant_bytes<T>()
                                : kStages * kStageBytes),
                "the warps' partial outputs fit the K stages (quantized: K and V stages, "
                "parameters and pad)");
  float* ow = reinterpret_cast<float*>(sK);
  // Only the block's nh query heads are merged: the padding heads' accumulators stay in
  // registers. Then one thread per 4 columns of a head: the warps' weights once, float4 loads and
  // stores. Every block runs this epilogue, so it sits on the critical path of every split: on an
  // H100 a scalar merge of all 16 rows through unpadded (8-way bank-conflicting) rows made lserve
  // batch 8 at 128K take 36.91 us per call against 34.44, batch 1 11.10 against 9.73
  // (docs/history/cuda-decode.md).
  if constexpr (kQuantized) {
    // Each query's l and sum_t p_t z_t over its column's 8 lanes (lanes ft, ft + 4, ...).
#pragma unroll
    for (int o2 = 4; o2 <= 16; o2 <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
      zacc0 += __shfl_xor_sync(0xffffffffu, zacc0, o2);
      zacc1 += __shfl_xor_sync(0xffffffffu, zacc1, o2);
    }
    // Back to true units: o = acc / F + sum_t p_t z_t, m = m' 2^-eq.
    const float inv_f = exp2_int(veb - 141);
    m0 *= rq0;
    m1 *= rq1;
    const int q0 = 2 * ft, q1 = 2 * ft + 1;
    if (fg == 0) {
      ml_s[warp][q0][0] = m0;
      ml_s[warp][q0][1] = l0;
      ml_s[warp][q1][0] = m1;
      ml_s[warp][q1][1] = l1;
    }
    // Thread fg holds head_dim elements kD / 8 fg .. kD / 8 fg + kD / 8 - 1 of its two queries
    // (o[d][0 / 2]: query q0, elements + 2 d and + 2 d + 1; o[d][1 / 3]: query q1), in order.
    float* w0 = ow + (warp * kRows + q0) * kOwStride + kD / 8 * fg;
    float* w1 = ow + (warp * kRows + q1) * kOwStride + kD / 8 * fg;
#pragma unroll
    for (int d = 0; d < kOTiles; d += 2) {
      if (q0 < nh) {
        *reinterpret_cast<float4*>(w0 + 2 * d) =
            make_float4(fmaf(o[d][0], inv_f, zacc0), fmaf(o[d][2], inv_f, zacc0),
                        fmaf(o[d + 1][0], inv_f, zacc0), fmaf(o[d + 1][2], inv_f, zacc0));
      }
      if (q1 < nh) {
        *reinterpret_cast<float4*>(w1 + 2 * d) =
            make_float4(fmaf(o[d][1], inv_f, zacc1), fmaf(o[d][3], inv_f, zacc1),
                        fmaf(o[d + 1][1], inv_f, zacc1), fmaf(o[d + 1][3], inv_f, zacc1));
      }
    }
  } else {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const int r0 = lane / 4;
    if (lane % 4 == 0) {
      ml_s[warp][r0][0] = m0;
      ml_s[warp][r0][1] = l0;
      ml_s[warp][r0 + 8][0] = m1;
      ml_s[warp][r0 + 8][1] = l1;
    }
    if (r0 < nh) {
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        float* w0 = ow + (warp * kRows + r0) * kOwStride + d * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(w0) = make_float2(o[d][0], o[d][1]);
      }
    }
    if (r0 + 8 < nh) {
#pragma unroll
      for (int d = 0; d < kDTiles; ++d) {
        float* w1 = ow + (warp * kRows + r0 + 8) * kOwStride + d * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(w1) = make_float2(o[d][2], o[d][3]);
      }
    }
  }
  __syncthreads();
  const int64_t partial_base = (static_cast<int64_t>(item) * p.num_q_heads + h0) * max_splits + z;
  constexpr int kD4 = kD / 4;
  for (int idx = tid; idx < nh * kD4; idx += kDecodeThreads) {
    const int r = idx / kD4, c = idx % kD4;
    float mw[kDecodeWarps];
    float mstar = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      mw[w] = ml_s[w][r][0];
      mstar = fmaxf(mstar, mw[w]);
    }
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float lsum = 0.0f;
    if (mstar != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        if (mw[w] == -INFINITY) continue;
        const float wt = fast_exp2((mw[w] - mstar) * scale_log2);
        const float4 v =
            *reinterpret_cast<const float4*>(ow + (w * kRows + r) * kOwStride + 4 * c);
        acc.x += wt * v.x;
        acc.y += wt * v.y;
        acc.z += wt * v.z;
        acc.w += wt * v.w;
        lsum += wt * ml_s[w][r][1];
      }
    }
    if (splits == 1) {
      const bool any = lsum > 0.0f;
      uint2 u;
      u.x = pack2<T>(any ? acc.x / lsum : 0.0f, any ? acc.y / lsum : 0.0f);
      u.y = pack2<T>(any ? acc.z / lsum : 0.0f, any ? acc.w / lsum : 0.0f);
      *reinterpret_cast<uint2*>(out_rows + static_cast<int64_t>(r) * kD + 4 * c) = u;
    } else {
      const int64_t slot = partial_base + static_cast<int64_t>(r) * max_splits;
      *reinterpret_cast<float4*>(a.partial_o + slot * kD + 4 * c) = acc;
      if (c == 0) a.partial_ml[slot] = make_float2(mstar, lsum);
    }
  }
  record(i);
}

}  // namespace ls::kernels::cuda
