#pragma once
// Internal to kernels/cuda's page selection (page_select.cu): the bounds of logical pages on the
// tensor cores, for bf16 / f16 summaries scored by queries of the same type.
//
// With kmax >= kmin element-wise (the summaries' definition),
//   max(q kmax, q kmin) = q+ kmax + q- kmin,   q+ = max(q, 0), q- = min(q, 0),
// so a logical page's bound for head h is one dot product of length 2 head_dim:
//   bound_h(lp) = [q+_h, q-_h] . [kmax(lp), kmin(lp)],
// with q+ and q- exact in the queries' type. A warp computes 16 logical pages x 8 query heads at
// once as mma.sync m16n8k16 (the summaries as A, rows = logical pages; the queries as B, columns
// = heads; f32 accumulation): one MMA per 16 x 16 x 8 instead of four f32 instructions per
// element and head, so the kernel is bound by the summaries' bytes, not by its arithmetic.
// The reduction order is free: thread t of a row reads the row's 16-byte chunks t, t + 4, ... of
// both summaries, k-step kk takes 4 of its elements, and the queries take the same
// permutation. Exact on integer data like bounds_kernel (products and
// sums of small integers are exact in f32 either way); on continuous data the two differ by f32
// rounding only. Differences on non-finite data: where a summary holds an infinity or NaN,
// 0 x inf makes the bound NaN here (ranked last by choose_kernel), where bounds_kernel's fmaxf may
// keep the finite product; and a NaN query element becomes 0 in q+ and q- (fmaxf / fminf return
// the other operand), so it adds nothing here where it makes bounds_kernel's bound NaN (an
// infinite one gives inf x 0 = NaN here, a finite product there). Finite queries and summaries
// give the same pages.

#include <cstdint>

#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/page_select_common.cuh"
#include "kernels/cuda/pdl_launch.cuh"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda::select_detail {

inline constexpr int kMmaBoundsWarps = 4;
inline constexpr int kMmaBoundsThreads = 32 * kMmaBoundsWarps;
inline constexpr int kMmaBoundsRows = 16;  // logical pages per warp tile (the MMA's rows)

// Whether bounds_mma_kernel serves a call: summaries and queries of one 16-bit type, head_dim 64
// or 128 (instantiated; a row's quarter is whole 16-byte loads), at most 8 query heads per kv
// head (the MMA's columns), and logical pages per physical page dividing a 16-row tile.
inline bool bounds_mma_covers(const PageSelectParams& p, int32_t group) {
  const PageSummaries& sm = p.summaries;
  const bool same16 =
      (sm.dtype == DType::kBF16 || sm.dtype == DType::kF16) && p.q_dtype == sm.dtype;
  const int32_t lpp = sm.logical_per_page;
  return same16 && (p.head_dim == 64 || p.head_dim == 128) && group >= 1 && group <= 8 &&
         lpp >= 1 && lpp <= kMmaBoundsRows && kMmaBoundsRows % lpp == 0;
}

// The pages of an item in visiting order: all of them (list null) or those of the listed groups
// (two levels), as bounds_kernel's PageList.
struct MmaPageList {
  const int32_t* list = nullptr;   // [items, stride] group indices
  const int32_t* count = nullptr;  // [items]
  int32_t stride = 0;
  int32_t group_pages = 0;
};

// Grid: (blocks per item, items). Warp w of block b takes the 16-row tiles w + 4 b, w + 4 (b +
// gridDim.x), ... of its item's logical pages in visiting order (tile T: logical pages 16 T ..
// 16 T + 15, i.e. physical pages 16 T / lpp .. of the visiting order), writes each physical
// page's maximum over its logical pages into pmax [item][h][page] for h < group, as
// bounds_kernel does (-inf where no logical page holds a token or the page has no block).
//
// A warp's tiles are pipelined: tile t + stride's summaries are copied (cp.async, 8 KB per warp
// at head_dim 128, all in flight at once) into the warp's shared buffer while tile t is scored
// from registers, and the table entries of tile t + 2 stride load while those copies are issued.
// Plain register loads measured slower: ptxas kept only 4 of a tile's 16 loads in flight (90
// registers) and the warp waited about four round trips per tile (docs/two-level-summaries.md).
template <int kD, typename T, bool kListed>
__global__ void __launch_bounds__(kMmaBoundsThreads)
    bounds_mma_kernel(const PageSelectParams p, float* pmax, int32_t max_pages_ws, MmaPageList pl) {
  constexpr int kWords = kD / 8;     // 32-bit words of a row's quarter (2 elements each)
  constexpr int kVecs = kWords / 4;  // its 16-byte chunks
  constexpr int kLoads = 4 * kVecs;  // 16-byte copies per lane per tile (2 rows x kmax, kmin)
  __shared__ uint4 tiles_s[kMmaBoundsWarps * kLoads * 32];  // [warp][copy][lane]
  pdl_wait();  // pmax may be the previous kernel's scratch; q its output
  const int32_t item = static_cast<int32_t>(blockIdx.y);
  const int32_t s = item / p.num_kv_heads, g = item % p.num_kv_heads;
  const ItemInfo it = item_info(p, true, s, g);
  const int32_t* listed = kListed ? pl.list + static_cast<int64_t>(item) * pl.stride : nullptr;
  const int32_t span =
      !it.selected ? 0 : (kListed ? pl.count[item] * pl.group_pages : it.num_pages);
  const int32_t lpp = p.summaries.logical_per_page;
  const int32_t tiles = (span * lpp + kMmaBoundsRows - 1) / kMmaBoundsRows;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int fg = lane / 4, ft = lane % 4;
  int32_t tile = static_cast<int32_t>(blockIdx.x) * kMmaBoundsWarps + warp;
  const int32_t tile_stride = static_cast<int32_t>(gridDim.x) * kMmaBoundsWarps;
  if (tile >= tiles) {  // uniform over the warp
    pdl_launch_dependents();
    return;
  }
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  constexpr int d = kD;  // p.head_dim
  const int32_t* table = p.retrieval_blocks + static_cast<int64_t>(s) * p.retrieval_blocks_stride;
  const auto physical = [&](int32_t v) {  // the item's v-th page in visiting order
    if constexpr (kListed) {
      if (v >= span) return it.num_pages;
      const int32_t pg = listed[v / pl.group_pages] * pl.group_pages + v % pl.group_pages;
      return min(pg, it.num_pages);
    } else {
      return v < span ? v : it.num_pages;
    }
  };

  // Q^T's B fragments, once: head fg (zero past the group), k-step kk: the thread's words 2 kk
  // (b0) and 2 kk + 1 (b1); q+ with kmax, q- with kmin. Word w of thread ft holds the elements
  // e(w), e(w) + 1 of its rows' summaries and of the queries alike (the reduction order is
  // free): e(w) = 32 (w / 4) + 8 ft + 2 (w % 4), i.e. the row's 16-byte chunks ft, ft + 4, ...,
  // so that each copy instruction of a quad covers 64 contiguous bytes (two whole sectors) of
  // each of its 8 rows. (A contiguous quarter per thread touched every sector twice per
  // instruction pair: with copies that bypass L1, 1.8x slower.)
  uint32_t qp[kWords], qm[kWords];
  {
    const T* q = static_cast<const T*>(p.q) +
                 (it.q_token * p.num_q_heads + static_cast<int64_t>(g) * group + fg) * d;
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      qp[w] = 0u;
      qm[w] = 0u;
      const int e = 32 * (w / 4) + 8 * ft + 2 * (w % 4);
      if (fg < group) {
        const float x0 = to_f32(q[e]), x1 = to_f32(q[e + 1]);
        qp[w] = pack2<T>(fmaxf(x0, 0.0f), fmaxf(x1, 0.0f));
        qm[w] = pack2<T>(fminf(x0, 0.0f), fminf(x1, 0.0f));
      }
    }
  }
  float* out = pmax + static_cast<int64_t>(item) * group * max_pages_ws;
  const int32_t lpp_log2 = __ffs(lpp) - 1;  // lpp is a power of two dividing 16
  // This lane's copies: buf[32 j], j < kLoads.
  uint4* buf = tiles_s + warp * kLoads * 32 + lane;

  // Row fg + 8 hf of tile t: its logical page in visiting order, its physical page, that page's
  // block-table entry, and whether it is scored (else its bound is -inf and nothing is read).
  const auto row_v = [&](int32_t t, int hf) { return t * kMmaBoundsRows + fg + 8 * hf; };
  const auto row_page = [&](int32_t t, int hf) { return physical(row_v(t, hf) >> lpp_log2); };
  const auto entry = [&](int32_t t, int hf) {
    const int32_t pg = row_page(t, hf);
    return pg < it.num_pages ? table[pg] : -1;
  };
  const auto scored_row = [&](int32_t t, int hf, int32_t block) {
    const int32_t pg = row_page(t, hf);
    const int32_t lp = pg * lpp + (row_v(t, hf) & (lpp - 1));
    return pg < it.num_pages && lp < it.num_logical && block >= 0;
  };
  // The copies of tile t's summaries (blk: its rows' table entries) into this lane's buffer,
  // zeros for rows not scored: copy (2 hf) kVecs + c is kmax chunk 4 c + ft of row hf,
  // (2 hf + 1) kVecs + c the kmin one.
  const auto issue = [&](int32_t t, const int32_t (&blk)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int64_t lp_row =
          (static_cast<int64_t>(max(blk[hf], 0)) * p.heads_per_block + it.slot) * lpp +
          (row_v(t, hf) & (lpp - 1));
      const int64_t row = lp_row * d + 8 * ft;  // this lane's first chunk, in elements
      const T* kmax = static_cast<const T*>(p.summaries.kmax);
      const T* kmin = static_cast<const T*>(p.summaries.kmin);
      const uint4* kx = reinterpret_cast<const uint4*>(kmax + row);
      const uint4* kn = reinterpret_cast<const uint4*>(kmin + row);
      const bool ok = scored_row(t, hf, blk[hf]);
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        cp_async_16(buf + ((2 * hf) * kVecs + c) * 32, kx + 4 * c, ok);
        cp_async_16(buf + ((2 * hf + 1) * kVecs + c) * 32, kn + 4 * c, ok);
      }
    }
    cp_async_commit();
  };
  // Scores tile t from its summaries x / n and writes its physical pages' maxima.
  const auto score = [&](int32_t t, const int32_t (&blk)[2], const uint4 (&x)[2][kVecs],
                         const uint4 (&n)[2][kVecs]) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int kk = 0; kk < kWords / 2; ++kk) {
      const uint32_t* x0 = reinterpret_cast<const uint32_t*>(x[0]);
      const uint32_t* x1 = reinterpret_cast<const uint32_t*>(x[1]);
      const uint32_t* n0 = reinterpret_cast<const uint32_t*>(n[0]);
      const uint32_t* n1 = reinterpret_cast<const uint32_t*>(n[1]);
      const uint32_t ax[4] = {x0[2 * kk], x1[2 * kk], x0[2 * kk + 1], x1[2 * kk + 1]};
      const uint32_t an[4] = {n0[2 * kk], n1[2 * kk], n0[2 * kk + 1], n1[2 * kk + 1]};
      mma_16816<T>(acc, ax, qp[2 * kk], qp[2 * kk + 1]);
      mma_16816<T>(acc, an, qm[2 * kk], qm[2 * kk + 1]);
    }
    const bool s0 = scored_row(t, 0, blk[0]), s1 = scored_row(t, 1, blk[1]);
    // acc: (row fg, heads 2 ft, 2 ft + 1) and (row fg + 8, the same heads).
    float b[2][2] = {{s0 ? acc[0] : -INFINITY, s0 ? acc[1] : -INFINITY},
                     {s1 ? acc[2] : -INFINITY, s1 ? acc[3] : -INFINITY}};
    // Max over the lpp logical pages of each physical page: rows fg of a page are lanes whose
    // fg differ in the low lpp_log2 bits (lane bits 2..4); with lpp 16 the two halves too.
    for (int o = 1; o < lpp && o < 8; o <<= 1) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          b[hf][e] = fmaxf(b[hf][e], __shfl_xor_sync(0xffffffffu, b[hf][e], 4 * o));
        }
      }
    }
    if (lpp == 16) {
      b[0][0] = fmaxf(b[0][0], b[1][0]);
      b[0][1] = fmaxf(b[0][1], b[1][1]);
    }
    if ((fg & (lpp - 1)) == 0) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        if (hf == 1 && lpp == 16) break;
        const int32_t pg = row_page(t, hf);
        if (pg < it.num_pages) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int h = 2 * ft + e;
            if (h < group) out[static_cast<int64_t>(h) * max_pages_ws + pg] = b[hf][e];
          }
        }
      }
    }
  };

  int32_t cur[2] = {entry(tile, 0), entry(tile, 1)};  // table entries of tile t
  issue(tile, cur);
  int32_t next[2] = {-1, -1};  // of tile t + stride
  if (tile + tile_stride < tiles) {
    next[0] = entry(tile + tile_stride, 0);
    next[1] = entry(tile + tile_stride, 1);
  }
  for (; tile < tiles; tile += tile_stride) {  // uniform over the warp
    uint4 x[2][kVecs], n[2][kVecs];
    // Tile t's copies (this lane's own: no barrier needed to read them). A compiler barrier too:
    // the buffer's reads below must not move above the wait (cp_async_wait has no memory
    // clobber; the other kernels read after a __syncthreads).
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        x[hf][c] = buf[((2 * hf) * kVecs + c) * 32];
        n[hf][c] = buf[((2 * hf + 1) * kVecs + c) * 32];
      }
    }
    __syncwarp();  // the buffer's reads are done before the next tile's copies overwrite it
    int32_t after[2] = {-1, -1};  // of tile t + 2 stride
    if (tile + tile_stride < tiles) {
      issue(tile + tile_stride, next);
      if (tile + 2 * tile_stride < tiles) {
        after[0] = entry(tile + 2 * tile_stride, 0);
        after[1] = entry(tile + 2 * tile_stride, 1);
      }
    }
    score(tile, cur, x, n);
    cur[0] = next[0];
    cur[1] = next[1];
    next[0] = after[0];
    next[1] = after[1];
  }
  pdl_launch_dependents();  // choose_kernel may start; it waits for this grid to finish
}

}  // namespace ls::kernels::cuda::select_detail
