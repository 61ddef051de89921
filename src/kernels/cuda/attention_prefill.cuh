#pragma once
// Internal to kernels/cuda: the prefill attention kernel (FlashAttention-2 style on mma.sync
// m16n8k16, fp32 accumulation), instantiated per head_dim / dtype / tile shape in
// attention_prefill_d*.cu.
//
// A block owns a tile of kBM = 16 * kWarps query rows (consecutive tokens of one sequence) of one
// query head; each warp owns 16 rows. It walks the visible key rows of its kv head (the span,
// attention_span.cuh) 64 at a time: the block copies 64 K rows and 64 V rows from their pages
// into shared memory with cp.async (invalid rows zero-filled), every warp computes
// S = Q K^T (ldmatrix + mma), masks only where needed, updates its online softmax and
// accumulates O += P V with P rounded to the input dtype, exactly FA2's scheme. K of the next
// block loads while P V runs, V of this block while Q K^T runs. Shared rows are padded by 16
// bytes, which makes every ldmatrix phase conflict-free for head_dim 64, 96 and 128.
//
// Per warp and per 64-key block: skipped when no key is visible to any of its queries (the
// causal diagonal, keys outside every window), unmasked when every key is visible to all of them.

#include <cstdint>

#include "kernels/cuda/attention_span.cuh"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/kv_dequant.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

// One query tile of the prefill kernel: rows [token0, token0 + num_q) of q / out, all of `seq`,
// at absolute positions first_pos ...
struct PrefillTile {
  int32_t seq = 0;
  int32_t token0 = 0;
  int32_t num_q = 0;
  int32_t first_pos = 0;
};

inline constexpr int kKeyBlock = 64;

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Writes zeros to a tile's output rows for query head h (a tile whose head has no usable keys,
// as kernels/cpu): 16 bytes per thread and step, kThreads threads.
template <int kD, int kThreads, typename T>
__device__ __forceinline__ void zero_tile_rows(T* out, const PrefillTile& tile, int32_t h,
                                               int32_t num_q_heads, int tid) {
  constexpr int kChunks = kD / 8;
  for (int i = tid; i < tile.num_q * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(out + (static_cast<int64_t>(tile.token0 + r) * num_q_heads + h) * kD +
                              c * 8) = make_uint4(0, 0, 0, 0);
  }
}

template <int kD, int kWarps>
struct PrefillShape {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBM = 16 * kWarps;
  static constexpr int kStride = kD + 8;                    // shared row stride in elements
  static constexpr int kChunks = kD / 8;                    // 16-byte chunks per row
  static constexpr int kRowThreads = kThreads / kKeyBlock;  // threads copying one K/V row
  static constexpr int kQRowThreads = kThreads / kBM;       // threads copying one Q row (2)
  // shared memory: Q tile, K block, V block (T elements), key positions, listed pages
  static constexpr int kSmemQ = kBM * kStride;
  static constexpr int kSmemKV = kKeyBlock * kStride;
  template <typename T>
  static constexpr int smem_bytes(int listed_cap) {
    return static_cast<int>(sizeof(T)) * (kSmemQ + 2 * kSmemKV) + 4 * kKeyBlock + 4 * listed_cap;
  }
};

// kQ != kNone: the pools hold quantized pages (kernels/kv_quant.h). A row's codes and scale are
// then read with plain loads and dequantized in registers into the K / V tile (the q dtype, one
// rounding; fp32 accumulation as ever) instead of the cp.async copies; the barriers that order
// the copies order these stores as well. Only the mma.sync kernel reads quantized pages.
template <int kD, typename T, int kWarps, KvQuant kQ = KvQuant::kNone>
__global__ void __launch_bounds__(32 * kWarps, kWarps >= 8 ? 1 : 2)
    prefill_attention_kernel(const AttentionParams p, const PrefillTile* tiles,
                             const int32_t* num_tiles, int32_t listed_cap) {
  using Shape = PrefillShape<kD, kWarps>;
  constexpr int kStride = Shape::kStride;
  constexpr int kChunks = Shape::kChunks;
  constexpr int kKSteps = kD / 16;  // k-steps of Q K^T
  constexpr int kDTiles = kD / 8;   // n-tiles of P V

  const int tile_index = static_cast<int>(blockIdx.y);
  if (tile_index >= *num_tiles) return;
  const PrefillTile tile = tiles[tile_index];
  const int32_t h = static_cast<int32_t>(blockIdx.x);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t g = h / group;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + Shape::kSmemQ;
  T* sV = sK + Shape::kSmemKV;
  int32_t* kpos = reinterpret_cast<int32_t*>(sV + Shape::kSmemKV);
  int32_t* listed = kpos + kKeyBlock;
  __shared__ Span span_s;

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
    if (lane == 0) span_s = sp;
  }

  // Q tile: rows past num_q are zero.
  {
    const int r = tid / Shape::kQRowThreads;
    const bool valid = r < tile.num_q;
    const T* src =
        q_base + (static_cast<int64_t>(tile.token0 + (valid ? r : 0)) * p.num_q_heads + h) * kD;
    for (int c = tid % Shape::kQRowThreads; c < kChunks; c += Shape::kQRowThreads) {
      cp_async_16(sQ + r * kStride + c * 8, src + c * 8, valid);
    }
  }
  __syncthreads();  // span_s and listed
  const Span sp = span_s;
  const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
  // Row indices stay 32-bit (a span over 2^31 rows only arises from corrupt lengths).
  const int32_t num_blocks = static_cast<int32_t>(
      min((num_rows + kKeyBlock - 1) / kKeyBlock, static_cast<int64_t>(INT32_MAX / kKeyBlock - 1)));

  // This thread copies chunks of key row `my_row` of every block; the row's source is found
  // when K is issued and reused for V.
  const int my_row = tid / Shape::kRowThreads;
  const T* k_pool = static_cast<const T*>(hv.k);
  const T* v_pool = static_cast<const T*>(hv.v);
  (void)k_pool;  // unused by the quantized instantiations
  (void)v_pool;
  KeyRow cur;
  // Quantized pages: this thread's share of row `cur`'s 16-byte code vectors, dequantized into
  // dst (the row of the K or V tile).
  auto dequant_row = [&](const void* pool_base, T* dst) {
    if constexpr (kQ != KvQuant::kNone) {
      constexpr int kCodeBytes = kQuantCodeBytes<kD, kQ>;
      const bool valid = cur.position >= 0;
      const int32_t pt = hv.page_tokens;
      const int64_t row = valid ? cur.offset / kD : 0;  // page * pt + row in page
      const int64_t page = row / pt;
      const int32_t in_page = static_cast<int32_t>(row - page * pt);
      const char* base =
          static_cast<const char*>(pool_base) + page * kv_quant_page_bytes(kQ, pt, kD);
      const float2 sz = valid ? load_quant_params<kQ>(base, kv_quant_params_offset(kQ, pt, kD),
                                                      in_page)
                              : make_float2(0.0f, 0.0f);
      const auto* codes =
          reinterpret_cast<const uint4*>(base + static_cast<int64_t>(in_page) * kCodeBytes);
      for (int c = tid % Shape::kRowThreads; c < kCodeBytes / 16; c += Shape::kRowThreads) {
        const uint4 w = valid ? codes[c] : make_uint4(0, 0, 0, 0);
        dequant_vec16<kQ, T>(w, sz.x, sz.y, valid, dst + c * kQuantVecElems<kQ>);
      }
    } else {
      (void)pool_base;
      (void)dst;
    }
  };
  auto issue_k = [&](int32_t b) {
    cur = locate_row(hv, sp, listed, b * kKeyBlock + my_row, kD);
    if constexpr (kQ != KvQuant::kNone) {
      dequant_row(hv.k, sK + my_row * kStride);
    } else {
      const bool valid = cur.position >= 0;
      const T* src = k_pool + (valid ? cur.offset : 0);
      for (int c = tid % Shape::kRowThreads; c < kChunks; c += Shape::kRowThreads) {
        cp_async_16(sK + my_row * kStride + c * 8, src + c * 8, valid);
      }
    }
    if (tid % Shape::kRowThreads == 0) kpos[my_row] = cur.position;
  };
  auto issue_v = [&]() {
    if constexpr (kQ != KvQuant::kNone) {
      dequant_row(hv.v, sV + my_row * kStride);
    } else {
      const bool valid = cur.position >= 0;
      const T* src = v_pool + (valid ? cur.offset : 0);
      for (int c = tid % Shape::kRowThreads; c < kChunks; c += Shape::kRowThreads) {
        cp_async_16(sV + my_row * kStride + c * 8, src + c * 8, valid);
      }
    }
  };
  if (num_blocks > 0) issue_k(0);
  cp_async_commit();

  // This warp's query rows and positions.
  const int row0 = warp * 16;
  const int valid_rows = min(16, tile.num_q - row0);
  const int64_t wq_min = q_first + row0;
  const int64_t wq_max = q_first + row0 + valid_rows - 1;
  const int64_t q_pos0 = q_first + row0 + lane / 4;  // rows g and g + 8 of the fragments
  const int64_t q_pos1 = q_pos0 + 8;
  const float scale_log2 = p.scale * 1.4426950408889634f;

  uint32_t qf[kKSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int32_t b = 0; b < num_blocks; ++b) {
    cp_async_wait<0>();
    __syncthreads();  // K_b (and Q) landed; every warp is done with V_{b-1}
    if (b == 0 && valid_rows > 0) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        ldmatrix_x4(qf[kk], sQ + (row0 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
      }
    }
    issue_v();
    cp_async_commit();

    // Which of this block's keys this warp's queries see.
    bool any = false, all = false;
    if (valid_rows > 0) {
      const int32_t ka = kpos[lane], kb = kpos[lane + 32];
      auto some = [&](int32_t k) {
        return k >= 0 && k <= wq_max &&
               (!hv.streaming || k < hv.sink_tokens || wq_min - k < hv.local);
      };
      auto every = [&](int32_t k) {
        return k >= 0 && k <= wq_min &&
               (!hv.streaming || k < hv.sink_tokens || wq_max - k < hv.local);
      };
      any = __any_sync(0xffffffffu, some(ka) || some(kb));
      all = __all_sync(0xffffffffu, every(ka) && every(kb));
    }

    float s[8][4];
    if (any) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
      for (int np = 0; np < 4; ++np) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          uint32_t kf[4];
          ldmatrix_x4(kf, sK + (np * 16 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 +
                              ((lane / 8) % 2) * 8);
          mma_16816<T>(s[2 * np], qf[kk], kf[0], kf[1]);
          mma_16816<T>(s[2 * np + 1], qf[kk], kf[2], kf[3]);
        }
      }
      if (!all) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int32_t k = kpos[nt * 8 + 2 * (lane % 4) + e];
            if (!key_visible(hv, q_pos0, k)) s[nt][e] = -INFINITY;
            if (!key_visible(hv, q_pos1, k)) s[nt][2 + e] = -INFINITY;
          }
        }
      }
      // Online softmax over the two rows this thread holds.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
      }
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float base0 = mn0 == -INFINITY ? 0.0f : mn0 * scale_log2;
      const float base1 = mn1 == -INFINITY ? 0.0f : mn1 * scale_log2;
      // An unchanged max keeps O as it is (alpha exactly 1), so the rescale below can be skipped.
      const float alpha0 = mn0 == m0 ? 1.0f : fast_exp2(m0 * scale_log2 - base0);  // -inf -> finite: 0
      const float alpha1 = mn1 == m1 ? 1.0f : fast_exp2(m1 * scale_log2 - base1);
      m0 = mn0;
      m1 = mn1;
      float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        s[nt][0] = fast_exp2(fmaf(s[nt][0], scale_log2, -base0));
        s[nt][1] = fast_exp2(fmaf(s[nt][1], scale_log2, -base0));
        s[nt][2] = fast_exp2(fmaf(s[nt][2], scale_log2, -base1));
        s[nt][3] = fast_exp2(fmaf(s[nt][3], scale_log2, -base1));
        rs0 += s[nt][0] + s[nt][1];
        rs1 += s[nt][2] + s[nt][3];
      }
      l0 = l0 * alpha0 + rs0;
      l1 = l1 * alpha1 + rs1;
      // Skipped when no row of the warp changed its max (most blocks of a long span).
      if (__any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
        for (int i = 0; i < kDTiles; ++i) {
          o[i][0] *= alpha0;
          o[i][1] *= alpha0;
          o[i][2] *= alpha1;
          o[i][3] *= alpha1;
        }
      }
    }

    cp_async_wait<0>();
    __syncthreads();  // V_b landed; every warp is done reading K_b and kpos_b
    if (b + 1 < num_blocks) issue_k(b + 1);
    cp_async_commit();

    if (any) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // 16 keys per k-step
        uint32_t pf[4];
        pf[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        pf[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        pf[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pf[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dn = 0; dn < kD / 16; ++dn) {
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, sV + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride +
                                    dn * 16 + (lane / 16) * 8);
          mma_16816<T>(o[2 * dn], pf, vf[0], vf[1]);
          mma_16816<T>(o[2 * dn + 1], pf, vf[2], vf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Normalise, stage this warp's 16 rows in its own rows of sQ, store 16 bytes per lane.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  if (valid_rows <= 0) return;
  // A warp's Q rows were copied by its own lanes and read only by it: its rows of sQ are free.
  T* stage = sQ + row0 * kStride;
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) {
    const int col = i * 8 + 2 * (lane % 4);
    *reinterpret_cast<uint32_t*>(stage + (lane / 4) * kStride + col) =
        pack2<T>(o[i][0] * inv0, o[i][1] * inv0);
    *reinterpret_cast<uint32_t*>(stage + (lane / 4 + 8) * kStride + col) =
        pack2<T>(o[i][2] * inv1, o[i][3] * inv1);
  }
  __syncwarp();
  for (int i = lane; i < valid_rows * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(
        out_base + (static_cast<int64_t>(tile.token0 + row0 + r) * p.num_q_heads + h) * kD +
        c * 8) = *reinterpret_cast<const uint4*>(stage + r * kStride + c * 8);
  }
}

}  // namespace ls::kernels::cuda
