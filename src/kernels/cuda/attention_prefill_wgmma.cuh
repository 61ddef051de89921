#pragma once
// Internal to kernels/cuda: the Hopper (sm_90a) prefill attention kernel, FlashAttention-3 style
// on wgmma with fp32 accumulation, instantiated in attention_prefill_wgmma_d*.cu. It computes
// exactly what prefill_attention_kernel (attention_prefill.cuh) computes: the same tiles, spans,
// masks, scale, online softmax and P rounded to the input dtype before P V.
//
// A block owns a 128-row query tile (PrefillTile) of one query head with two warpgroups; warpgroup
// wg owns rows 64 wg .. 64 wg + 63. It walks the visible key rows of its kv head (the span)
// kBN at a time. Per key block:
//   S[64 x kBN] = Q K^T       wgmma m64nkBNk16, Q and K K-major in shared memory (descriptors)
//   mask, online softmax on the accumulator fragments (two rows per thread)
//   O[64 x kD] += P V         wgmma m64nkDk16, P from registers (rounded to T), V MN-major in
//                             shared memory (transposed-B descriptor)
// S of block j is issued before P V of block j - 1, so the softmax of block j runs while the
// tensor cores do P V (FlashAttention-3's intra-warpgroup overlap). K and V blocks are
// double-buffered: every thread copies its share of K_{j+1} and V_j with cp.async (row by row
// from the pages, so any page size works; invalid rows zero-filled) while iteration j computes.
// One barrier per iteration (see the loop).
//
// Shared memory (dynamic, base rounded up to 1024 bytes), every tile 128B-swizzled (wgmma.cuh):
//   sQ        [kD / 64 panels][128 rows][64 cols] T        panel = 128 * 128 B
//   sK[2]     [kD / 64 panels][kBN rows][64 cols] T        panel = kBN * 128 B
//   sV[2]     [kD / 64 panels][kBN rows][64 cols] T
//   kpos[2]   [kBN] int32     absolute key position per row of the block, -1: no key
//   span      Span
//   listed    [listed_cap] int32
// Element (r, c) of a tile with R rows lives at byte
//   (c / 64) * R * 128 + r * 128 + (((c % 64) / 8) ^ (r % 8)) * 16 + (c % 8) * 2.
// Descriptors (wgmma.cuh): Q as A and K as B are K-major (k-step kk: panel kk / 4, + 32 (kk % 4)
// bytes; SBO 1024); V as B is MN-major (k-step kk: + 16 kk rows = 2048 kk bytes; SBO 1024 between
// 8-key groups, LBO = R * 128 between 64-column panels of head_dim).
//
// Every key block of the span is computed by both warpgroups (so the wgmma sequence never
// diverges); a warp skips the masking of a block whose keys are all visible to all its queries.

#include <cstdint>

#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/attention_span.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

template <int kD, int kBN>
struct WgmmaPrefillShape {
  static_assert(kD == 64 || kD == 128, "head_dim 64 or 128");
  static_assert(kBN == 64 || kBN == 128, "key blocks of 64 or 128 rows");
  static constexpr int kThreads = 256;    // two warpgroups
  static constexpr int kBM = 128;         // query rows per tile
  static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static constexpr int kQBytes = kBM * kD * 2;
  static constexpr int kKVBytes = kBN * kD * 2;        // one K or V block
  static constexpr int kRowThreads = kThreads / kBN;   // threads copying one K/V row
  static constexpr int kQRowThreads = kThreads / kBM;  // threads copying one Q row
  static constexpr int kOffK = kQBytes;
  static constexpr int kOffV = kOffK + 2 * kKVBytes;
  static constexpr int kOffPos = kOffV + 2 * kKVBytes;
  static constexpr int kOffSpan = kOffPos + 2 * kBN * 4;
  static constexpr int kOffListed = kOffSpan + 16;
  static constexpr int smem_bytes(int listed_cap) { return 1024 + kOffListed + 4 * listed_cap; }
};

// Byte offset of 16-byte chunk `c` (0 .. kD/8 - 1) of row `r` in a 128B-swizzled tile of kRows.
template <int kRows>
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * kRows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// The per-thread tile math both wgmma prefill kernels (this one and the warp-specialised one,
// attention_prefill_wgmma_ws.cuh) run on a warpgroup's 64 query rows: issuing S = Q K_j^T and
// O += P V_j, the masked online softmax of S, the rescale of O and the rounding of P into the A
// fragments of P V. Layouts: the 128B-swizzled panels and descriptors described above.
template <int kD, int kBN, typename T>
struct WgmmaTileMath {
  static constexpr int kQKSteps = kD / 16;  // k-steps of Q K^T
  static constexpr int kPVSteps = kBN / 16;  // k-steps of P V
  static constexpr int kSRegs = kBN / 2;     // S accumulator registers per thread
  static constexpr int kORegs = kD / 2;      // O accumulator registers per thread

  // This thread's two query rows (fragment rows g and g + 8) and its warp's row range.
  struct Rows {
    int64_t q_pos0, q_pos1, wq_min, wq_max;
    float scale_log2;
  };

  // S = Q K^T of the key block at k_stage; the warpgroup's Q rows start at row wg_row0 of the
  // kTileRows-row Q tile at q_tile.
  template <int kTileRows>
  static __device__ __forceinline__ void issue_s(float (&s)[kSRegs], uint32_t q_tile, int wg_row0,
                                                 uint32_t k_stage) {
#pragma unroll
    for (int kk = 0; kk < kQKSteps; ++kk) {
      const uint32_t qa = q_tile + (kk / 4) * (kTileRows * 128) + wg_row0 * 128 + (kk % 4) * 32;
      const uint32_t ka = k_stage + (kk / 4) * (kBN * 128) + (kk % 4) * 32;
      const uint64_t da = wgmma_desc_sw128(qa, 16, 1024), db = wgmma_desc_sw128(ka, 16, 1024);
      if (kk == 0) {
        wgmma_ss_init<kBN, T>(s, da, db);
      } else {
        wgmma_ss<kBN, T>(s, da, db);
      }
    }
    wgmma_commit();
  }

  // O += P V of the block at v_stage: k-step kk covers keys 16 kk .. 16 kk + 15.
  static __device__ __forceinline__ void issue_pv(float (&o)[kORegs],
                                                  const uint32_t (&pf)[kPVSteps][4],
                                                  uint32_t v_stage) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      wgmma_rs_tb<kD, T>(o, pf[kk], wgmma_desc_sw128(v_stage + kk * 2048, kBN * 128, 1024));
    }
    wgmma_commit();
  }

  // Masks S (key positions bpos; unless every key is visible to all of this warp's queries) and
  // runs the online softmax on it in place (two rows per thread; a row spans the 4 lanes of a
  // quad). Sets the rescale factors of the two rows' earlier O.
  static __device__ __forceinline__ void softmax(float (&s)[kSRegs], const int32_t* bpos,
                                                 const HeadView& hv, int lane, const Rows& r,
                                                 float& m0, float& m1, float& l0, float& l1,
                                                 float& alpha0, float& alpha1) {
    bool every_k = true;
#pragma unroll
    for (int i = 0; i < kBN / 32; ++i) {
      const int32_t k = bpos[lane + 32 * i];
      every_k = every_k && (k >= 0 && k <= r.wq_min &&
                            (!hv.streaming || k < hv.sink_tokens || r.wq_max - k < hv.local));
    }
    if (!__all_sync(0xffffffffu, every_k)) {
#pragma unroll
      for (int jj = 0; jj < kBN / 8; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int32_t k = bpos[jj * 8 + 2 * (lane % 4) + e];
          if (!key_visible(hv, r.q_pos0, k)) s[4 * jj + e] = -INFINITY;
          if (!key_visible(hv, r.q_pos1, k)) s[4 * jj + 2 + e] = -INFINITY;
        }
      }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kBN / 8; ++jj) {
      mx0 = fmaxf(mx0, fmaxf(s[4 * jj], s[4 * jj + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[4 * jj + 2], s[4 * jj + 3]));
    }
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0 * r.scale_log2;
    const float base1 = mn1 == -INFINITY ? 0.0f : mn1 * r.scale_log2;
    // An unchanged max (including a row with nothing visible yet) keeps O as it is: alpha
    // exactly 1, so rescale can skip it.
    alpha0 = mn0 == m0 ? 1.0f : fast_exp2(m0 * r.scale_log2 - base0);  // -inf -> finite: 0
    alpha1 = mn1 == m1 ? 1.0f : fast_exp2(m1 * r.scale_log2 - base1);
    m0 = mn0;
    m1 = mn1;
    float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kBN / 8; ++jj) {
      s[4 * jj + 0] = fast_exp2(fmaf(s[4 * jj + 0], r.scale_log2, -base0));
      s[4 * jj + 1] = fast_exp2(fmaf(s[4 * jj + 1], r.scale_log2, -base0));
      s[4 * jj + 2] = fast_exp2(fmaf(s[4 * jj + 2], r.scale_log2, -base1));
      s[4 * jj + 3] = fast_exp2(fmaf(s[4 * jj + 3], r.scale_log2, -base1));
      rs0 += s[4 * jj + 0] + s[4 * jj + 1];
      rs1 += s[4 * jj + 2] + s[4 * jj + 3];
    }
    l0 = l0 * alpha0 + rs0;
    l1 = l1 * alpha1 + rs1;
  }

  // O *= alpha (per row): brings O to the running max of the last softmax. Skipped when no row
  // of the warp changed its max (alpha 1 everywhere), which is most blocks of a long span: the 64
  // multiplications are a quarter of a consumer's instructions per 64-key block.
  static __device__ __forceinline__ void rescale(float (&o)[kORegs], float alpha0, float alpha1) {
    if (!__any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) return;
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) {
      o[4 * i + 0] *= alpha0;
      o[4 * i + 1] *= alpha0;
      o[4 * i + 2] *= alpha1;
      o[4 * i + 3] *= alpha1;
    }
  }

  // Rounds P to T as the A fragments of P V: k-step kk covers S column tiles 2 kk (a[0], a[1])
  // and 2 kk + 1 (a[2], a[3]).
  static __device__ __forceinline__ void pack(uint32_t (&pf)[kPVSteps][4],
                                              const float (&s)[kSRegs]) {
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      pf[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      pf[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      pf[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      pf[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
};

template <int kD, typename T, int kBN>
__global__ void __launch_bounds__(256, 1)
    prefill_wgmma_kernel(const AttentionParams p, const PrefillTile* tiles,
                         const int32_t* num_tiles, int32_t listed_cap) {
  using Shape = WgmmaPrefillShape<kD, kBN>;
  constexpr int kChunks = Shape::kChunks;
  constexpr int kPVSteps = WgmmaTileMath<kD, kBN, T>::kPVSteps;
  constexpr int kSRegs = WgmmaTileMath<kD, kBN, T>::kSRegs;
  constexpr int kORegs = WgmmaTileMath<kD, kBN, T>::kORegs;

  const int tile_index = static_cast<int>(blockIdx.y);
  if (tile_index >= *num_tiles) return;
  const PrefillTile tile = tiles[tile_index];
  const int32_t h = static_cast<int32_t>(blockIdx.x);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t g = h / group;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4;  // warpgroup

  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Swizzle atoms need 1024-byte aligned shared addresses (smem_bytes reserves the slack).
  unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sQ = smem;
  unsigned char* sK = smem + Shape::kOffK;
  unsigned char* sV = smem + Shape::kOffV;
  int32_t* kpos = reinterpret_cast<int32_t*>(smem + Shape::kOffPos);
  Span* span_s = reinterpret_cast<Span*>(smem + Shape::kOffSpan);
  int32_t* listed = reinterpret_cast<int32_t*>(smem + Shape::kOffListed);
  const uint32_t sQ_addr = smem_addr(sQ), sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);

  const int64_t q_first = tile.first_pos;
  const int64_t q_last = q_first + tile.num_q - 1;
  const T* q_base = static_cast<const T*>(p.q);
  T* out_base = static_cast<T*>(p.out);

  HeadView hv;
  const bool usable = resolve_head(p, tile.seq, g, q_first, q_last, hv);
  if (!usable) {  // zero rows, as kernels/cpu
    zero_tile_rows<kD, Shape::kThreads>(out_base, tile, h, p.num_q_heads, tid);
    return;
  }
  if (warp == 0) {
    const Span sp = build_span(p, hv, tile.seq, g, q_first, q_last, listed, listed_cap, lane);
    if (lane == 0) *span_s = sp;
  }

  // Q tile: rows past num_q are zero.
  {
    const int r = tid / Shape::kQRowThreads;
    const bool valid = r < tile.num_q;
    const T* src =
        q_base + (static_cast<int64_t>(tile.token0 + (valid ? r : 0)) * p.num_q_heads + h) * kD;
    for (int c = tid % Shape::kQRowThreads; c < kChunks; c += Shape::kQRowThreads) {
      cp_async_16(sQ + sw128_offset<Shape::kBM>(r, c), src + c * 8, valid);
    }
  }
  cp_async_commit();
  __syncthreads();  // span and listed
  const Span sp = *span_s;
  const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
  const int32_t num_blocks = static_cast<int32_t>(
      min((num_rows + kBN - 1) / kBN, static_cast<int64_t>(INT32_MAX / kBN - 1)));

  // This thread copies chunks of key row `my_row` of every block. V of a block is copied one
  // iteration after its K, from the row located when K was issued (`pending`).
  const int my_row = tid / Shape::kRowThreads;
  const T* k_pool = static_cast<const T*>(hv.k);
  const T* v_pool = static_cast<const T*>(hv.v);
  KeyRow pending;
  auto issue_k = [&](int32_t b) {
    const int stage = b & 1;
    pending = locate_row(hv, sp, listed, b * kBN + my_row, kD);
    const bool valid = pending.position >= 0;
    const T* src = k_pool + (valid ? pending.offset : 0);
    unsigned char* dst = sK + stage * Shape::kKVBytes;
    for (int c = tid % Shape::kRowThreads; c < kChunks; c += Shape::kRowThreads) {
      cp_async_16(dst + sw128_offset<kBN>(my_row, c), src + c * 8, valid);
    }
    if (tid % Shape::kRowThreads == 0) kpos[stage * kBN + my_row] = pending.position;
  };
  auto issue_v = [&](int32_t b) {
    const bool valid = pending.position >= 0;
    const T* src = v_pool + (valid ? pending.offset : 0);
    unsigned char* dst = sV + (b & 1) * Shape::kKVBytes;
    for (int c = tid % Shape::kRowThreads; c < kChunks; c += Shape::kRowThreads) {
      cp_async_16(dst + sw128_offset<kBN>(my_row, c), src + c * 8, valid);
    }
  };
  if (num_blocks > 0) issue_k(0);
  cp_async_commit();

  // This warpgroup's and this warp's query rows; this thread's two rows (fragment rows g, g + 8).
  const int wg_row0 = 64 * wg;
  const int warp_row0 = wg_row0 + 16 * (warp % 4);
  const int64_t wq_min = q_first + warp_row0;
  const int64_t wq_max = q_first + min(warp_row0 + 15, tile.num_q - 1);
  const int row_a = warp_row0 + lane / 4;
  const int64_t q_pos0 = q_first + row_a;
  const int64_t q_pos1 = q_pos0 + 8;
  const float scale_log2 = p.scale * 1.4426950408889634f;

  float o[kORegs];
#pragma unroll
  for (int i = 0; i < kORegs; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float s[kSRegs];
  uint32_t pf[kPVSteps][4];  // P of the previous block rounded to T, the A fragments of P V

  // Start of iteration j (sync_blocks): K_j and V_{j-1} (copied during iteration j - 1) have
  // landed and are visible to wgmma; every warpgroup is done with K_{j-1} and V_{j-2}, so
  // K_{j+1} and V_j go into those stages (K_j in K stage j % 2, V_j in V stage j % 2), which the
  // wgmmas of iteration j do not read.
  // The copies are issued right after this iteration's wgmmas, so they overlap them.
  auto sync_blocks = [&]() {
    cp_async_wait<0>();
    fence_proxy_async();  // this thread's cp.async writes -> visible to the async proxy
    __syncthreads();
  };
  auto issue_copies = [&](int32_t j) {
    if (j < num_blocks) issue_v(j);  // uses `pending`, the rows of K_j
    if (j + 1 < num_blocks) issue_k(j + 1);
    cp_async_commit();
  };
  using Math = WgmmaTileMath<kD, kBN, T>;
  const typename Math::Rows rows{q_pos0, q_pos1, wq_min, wq_max, scale_log2};
  auto issue_s = [&](int32_t j) {
    Math::template issue_s<Shape::kBM>(s, sQ_addr, wg_row0, sK_addr + (j & 1) * Shape::kKVBytes);
  };
  auto issue_pv = [&](int32_t j) { Math::issue_pv(o, pf, sV_addr + (j & 1) * Shape::kKVBytes); };
  auto softmax = [&](int32_t j, float& alpha0, float& alpha1) {
    Math::softmax(s, kpos + (j & 1) * kBN, hv, lane, rows, m0, m1, l0, l1, alpha0, alpha1);
  };
  auto rescale = [&](float alpha0, float alpha1) { Math::rescale(o, alpha0, alpha1); };
  auto pack = [&]() { Math::pack(pf, s); };

  // Every block is computed by both warpgroups (a block no query of a warpgroup sees is fully
  // masked, which leaves its O, m and l unchanged), so the wgmma sequence is the same in every
  // thread and never sits on a divergent path.
  // O holds the blocks before j - 1 relative to the running max after block j - 2; alpha (from
  // the softmax of block j - 1) brings it to the max after block j - 1, the max P_{j-1} is
  // relative to, before P_{j-1} V_{j-1} is added.
  if (num_blocks > 0) {
    float alpha0, alpha1;
    sync_blocks();
    wgmma_fence();
    issue_s(0);
    issue_copies(0);
    wgmma_wait<0>();
    wgmma_hold(s);
    softmax(0, alpha0, alpha1);
    pack();
    // Iteration j: S_j is issued; O is rescaled while it runs; P_{j-1} V_{j-1} is issued. ptxas
    // puts the softmax's exponentials after the second wait (scripts/gpu/prefill_sass_order.py),
    // so they overlap the other warpgroup's wgmmas, not this one's P V; forcing them before the
    // wait was slower (docs/cuda-prefill-wgmma.md).
    for (int32_t j = 1; j < num_blocks; ++j) {
      sync_blocks();
      wgmma_fence();  // pf was written by ordinary instructions
      issue_s(j);
      rescale(alpha0, alpha1);
      wgmma_fence();  // o was written by ordinary instructions
      issue_pv(j - 1);
      issue_copies(j);
      wgmma_wait<1>();  // S_j done (groups complete in order; P V may still run)
      wgmma_hold(s);
      softmax(j, alpha0, alpha1);
      wgmma_wait<0>();  // P_{j-1} V_{j-1} done: o and pf are free
      wgmma_hold(o);
      pack();
    }
    sync_blocks();  // V of the last block landed
    rescale(alpha0, alpha1);
    wgmma_fence();
    issue_pv(num_blocks - 1);
    wgmma_wait<0>();
    wgmma_hold(o);
  }
  cp_async_wait<0>();

  // Normalise; stage this warp's 16 rows in its own rows of sQ (no other warp reads them once the
  // warpgroup's wgmmas are done), then store 16 bytes per lane.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  // Every warp of the warpgroup is past its last wgmma reading sQ (named barrier 1 + wg).
  // (Immediate barrier ids: a register id makes ptxas reserve all 16 barriers.)
  if (wg == 0) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  }
  const int valid_rows = min(16, tile.num_q - warp_row0);
  if (valid_rows <= 0) return;
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) {
    const int c = j;  // 16-byte chunk of columns 8j .. 8j + 7
    const uint32_t in_chunk = 4 * (lane % 4);
    *reinterpret_cast<uint32_t*>(sQ + sw128_offset<Shape::kBM>(row_a, c) + in_chunk) =
        pack2<T>(o[4 * j] * inv0, o[4 * j + 1] * inv0);
    *reinterpret_cast<uint32_t*>(sQ + sw128_offset<Shape::kBM>(row_a + 8, c) + in_chunk) =
        pack2<T>(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
  }
  __syncwarp();
  for (int i = lane; i < valid_rows * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(
        out_base + (static_cast<int64_t>(tile.token0 + warp_row0 + r) * p.num_q_heads + h) * kD +
        c * 8) = *reinterpret_cast<const uint4*>(sQ + sw128_offset<Shape::kBM>(warp_row0 + r, c));
  }
}

}  // namespace ls::kernels::cuda
