#pragma once
// Internal to kernels/cuda: the decode attention kernel over quantized pages (fp8 / int8 / int4,
// kernels/kv_quant.h), instantiated per head_dim in attention_decode_d64.cu / _d128.cu.
//
// Same work split, output and partial-state layout as decode_attention_kernel
// (attention_decode.cuh: a block serves one query token, up to 16 query heads of one kv head and
// one fixed split of the span's 64-key blocks; with several splits attention.cu's reduction
// combines the partials), so everything around it is shared. What differs is how a key block
// reaches the tensor cores: a thread pair owns one key row, one thread its K row and the other its
// V row; each loads the row's codes (16-byte vectors) and its scale / zero point from global
// memory into registers, dequantizes them in registers (fp8 by exponent rebias, int8 / int4 by one
// fma) into the q dtype, and stores the row into the block's shared K / V tile, which the 4 warps
// read with ldmatrix for mma.sync exactly as the bf16 kernel does (fp32 accumulation). The next
// block's codes are loaded into registers before the current block is computed, so their DRAM
// latency overlaps the MMAs. Only the quantized bytes cross DRAM; the dequantized values are
// rounded once to the q dtype (bf16 / f16) as the MMA's operands.
//
// Simpler than the bf16 kernel (no cp.async stage ring, no ticketed splits, no L2 prefetch, no
// pre-wait metadata loads): it waits for the previous kernel first.

#include <cstdint>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/kv_dequant.cuh"
#include "kernels/kv_quant.h"

namespace ls::kernels::cuda {

template <int kD>
struct DecodeQuantShape {
  static constexpr int kStride = kD + 8;
  template <typename T>
  static constexpr int smem_bytes(int listed_cap) {
    return static_cast<int>(sizeof(T)) * (kDecodeRows * kStride + 2 * kKeyBlock * kStride) +
           4 * kKeyBlock + 4 * listed_cap;
  }
};

// One key row's codes and parameters, in registers.
template <int kD, KvQuant kQ>
struct QuantRow {
  static constexpr int kCodeBytes = kQuantCodeBytes<kD, kQ>;
  static constexpr int kVecs = kCodeBytes / 16;
  uint4 c[kVecs];
  float scale = 0.0f;
  float zero = 0.0f;
  int32_t position = -1;  // -1: no key here (the row is zero and masked)
};

template <int kD, KvQuant kQ>
__device__ __forceinline__ QuantRow<kD, kQ> load_quant_row(const HeadView& hv, const Span& sp,
                                                           const int32_t* listed, int32_t r,
                                                           int32_t page_shift, const char* pool,
                                                           int64_t page_bytes,
                                                           int64_t params_offset) {
  using Row = QuantRow<kD, kQ>;
  Row q;
  const PendingRow pr = fetch_row(hv, sp, listed, r, page_shift);
  if (pr.position < 0 || pr.block < 0 || pr.block >= hv.num_blocks) return q;
  int64_t page = static_cast<int64_t>(pr.block) * hv.heads_per_block + hv.slot;
  if (hv.page_slot != nullptr) {
    page = hv.page_slot[page];
    if (page < 0) return q;
  }
  const char* base = pool + page * page_bytes;
  const auto* codes = reinterpret_cast<const uint4*>(base + static_cast<int64_t>(pr.in_page) *
                                                                Row::kCodeBytes);
#pragma unroll
  for (int i = 0; i < Row::kVecs; ++i) q.c[i] = codes[i];
  const float2 sz = load_quant_params<kQ>(base, params_offset, pr.in_page);
  q.scale = sz.x;
  q.zero = sz.y;
  q.position = pr.position;
  return q;
}

// Dequantizes a row into dst[0, kD) (shared memory, q dtype); a missing row becomes zeros.
template <int kD, KvQuant kQ, typename T>
__device__ __forceinline__ void store_dequantized(const QuantRow<kD, kQ>& q, T* dst) {
#pragma unroll
  for (int i = 0; i < QuantRow<kD, kQ>::kVecs; ++i) {
    dequant_vec16<kQ, T>(q.c[i], q.scale, q.zero, q.position >= 0, dst + i * kQuantVecElems<kQ>);
  }
}

template <int kD, typename T, KvQuant kQ>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    decode_attention_quant_kernel(const AttentionParams p, const DecodeArgs a) {
  static_assert(QuantRow<kD, kQ>::kCodeBytes % 16 == 0, "rows of whole 16-byte vectors");
  constexpr int kStride = DecodeQuantShape<kD>::kStride;
  constexpr int kKSteps = kD / 16;
  constexpr int kDTiles = kD / 8;

  const int32_t item = static_cast<int32_t>(blockIdx.x);
  const int32_t g = static_cast<int32_t>(blockIdx.y) / a.head_chunks;
  const int32_t chunk = static_cast<int32_t>(blockIdx.y) % a.head_chunks;
  const int32_t z = static_cast<int32_t>(blockIdx.z);
  const int32_t max_splits = static_cast<int32_t>(gridDim.z);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t h0 = g * group + chunk * kDecodeRows;
  const int32_t nh = min(kDecodeRows, group - chunk * kDecodeRows);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  int32_t* num_splits_out =
      a.num_splits + static_cast<int64_t>(item) * p.num_kv_heads * a.head_chunks + blockIdx.y;

  pdl_wait();
  pdl_launch_dependents();

  const int32_t qb = p.q_indptr[item], qe = p.q_indptr[item + 1];
  HeadScalars hs = load_head_scalars(p, item, g);
  int32_t sel_row = load_selection_row(p, item);
  const DecodeItem it = decode_item(p, a.items_are_tokens, item, qb, qe, hs.kv_len);
  if (!it.served) {
    if (z == 0 && tid == 0) *num_splits_out = 0;
    return;
  }
  if (it.seq >= 0 && it.seq != item) {
    hs = load_head_scalars(p, it.seq, g);
    sel_row = load_selection_row(p, it.seq);
  }
  T* out_rows = static_cast<T*>(p.out) + (static_cast<int64_t>(it.token) * p.num_q_heads + h0) * kD;
  auto write_zeros = [&]() {
    for (int i = tid; i < nh * kD; i += kDecodeThreads) out_rows[i] = from_f32<T>(0.0f);
    if (tid == 0) *num_splits_out = 0;
  };
  HeadView hv;
  if (it.seq < 0 || !resolve_head(p, it.seq, g, it.position, it.position, hs, hv)) {
    if (z == 0) write_zeros();
    return;
  }

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kDecodeRows * kStride;  // [64][stride]
  T* sV = sK + kKeyBlock * kStride;    // [64][stride]
  int32_t* kpos = reinterpret_cast<int32_t*>(sV + kKeyBlock * kStride);  // [64]
  int32_t* listed = kpos + kKeyBlock;
  __shared__ Span span_s;
  __shared__ float ml_s[kDecodeWarps][kDecodeRows][2];

  if (warp == 0) {
    const Span sp =
        build_span(p, hv, it.seq, g, it.position, it.position, listed, a.listed_cap, lane, sel_row);
    if (lane == 0) span_s = sp;
  }
  __syncthreads();
  const Span sp = span_s;
  const int64_t num_rows = static_cast<int64_t>(sp.num_pages()) * hv.page_tokens;
  const int32_t nb = static_cast<int32_t>(
      min((num_rows + kKeyBlock - 1) / kKeyBlock, static_cast<int64_t>(INT32_MAX / kKeyBlock - 1)));
  const int32_t min_blocks = max(1, a.min_blocks_per_split);
  const int32_t want = (nb + min_blocks - 1) / min_blocks;
  const int32_t splits = nb == 0 ? 1 : max(1, min(max_splits, want));
  if (z >= splits) return;
  if (nb == 0) {
    write_zeros();
    return;
  }
  const int32_t b_begin = static_cast<int32_t>(static_cast<int64_t>(nb) * z / splits);
  const int32_t b_end = static_cast<int32_t>(static_cast<int64_t>(nb) * (z + 1) / splits);
  if (z == 0 && tid == 0) *num_splits_out = splits;

  // Q rows (heads h0 .. h0 + nh - 1 of the token), rows past nh zero: 8 threads per row.
  {
    const int r = tid / 8;
    const bool valid = r < nh;
    const T* src = static_cast<const T*>(p.q) +
                   (static_cast<int64_t>(it.token) * p.num_q_heads + h0 + (valid ? r : 0)) * kD;
    for (int c = tid % 8; c < kD / 8; c += 8) {
      *reinterpret_cast<uint4*>(sQ + r * kStride + c * 8) =
          valid ? *reinterpret_cast<const uint4*>(src + c * 8) : make_uint4(0, 0, 0, 0);
    }
  }

  const PagedKvPool& pool = hv.streaming ? p.streaming : p.retrieval;
  const int64_t page_bytes = kv_quant_page_bytes(kQ, pool.page_tokens, kD);
  const int64_t params_offset = kv_quant_params_offset(kQ, pool.page_tokens, kD);
  const int my_row = tid / 2;
  const bool is_v = (tid % 2) != 0;
  const char* my_pool = static_cast<const char*>(is_v ? hv.v : hv.k);
  T* my_dst = (is_v ? sV : sK) + my_row * kStride;
  const int32_t page_shift =
      (hv.page_tokens & (hv.page_tokens - 1)) == 0 ? __ffs(hv.page_tokens) - 1 : -1;
  auto load = [&](int32_t block) {
    return load_quant_row<kD, kQ>(hv, sp, listed, block * kKeyBlock + my_row, page_shift, my_pool,
                                  page_bytes, params_offset);
  };

  const float scale_log2 = p.scale * 1.4426950408889634f;
  uint32_t qf[kKSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int key0 = warp * 16;

  QuantRow<kD, kQ> next = load(b_begin);
  for (int32_t b = b_begin; b < b_end; ++b) {
    const QuantRow<kD, kQ> cur = next;
    __syncthreads();  // every warp is done with the previous block's tiles
    store_dequantized<kD, kQ, T>(cur, my_dst);
    if (!is_v) kpos[my_row] = cur.position;
    __syncthreads();
    if (b == b_begin) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        ldmatrix_x4(qf[kk], sQ + (lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
      }
    }
    if (b + 1 < b_end) next = load(b + 1);  // in flight while this block is computed

    const int32_t* kp = kpos + key0;
    const bool vis = key_visible(hv, it.position, kp[lane % 16]);
    if (!__any_sync(0xffffffffu, vis)) continue;
    const bool all = __all_sync(0xffffffffu, vis);
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t kf[4];
      ldmatrix_x4(kf, sK + (key0 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 +
                          ((lane / 8) % 2) * 8);
      mma_16816<T>(s[0], qf[kk], kf[0], kf[1]);
      mma_16816<T>(s[1], qf[kk], kf[2], kf[3]);
    }
    if (!all) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (!key_visible(hv, it.position, kp[nt * 8 + 2 * (lane % 4) + e])) {
            s[nt][e] = -INFINITY;
            s[nt][2 + e] = -INFINITY;
          }
        }
      }
    }
    float mx0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
    float mx1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0 * scale_log2;
    const float base1 = mn1 == -INFINITY ? 0.0f : mn1 * scale_log2;
    const float alpha0 = fast_exp2(m0 * scale_log2 - base0);
    const float alpha1 = fast_exp2(m1 * scale_log2 - base1);
    m0 = mn0;
    m1 = mn1;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = fast_exp2(fmaf(s[nt][0], scale_log2, -base0));
      s[nt][1] = fast_exp2(fmaf(s[nt][1], scale_log2, -base0));
      s[nt][2] = fast_exp2(fmaf(s[nt][2], scale_log2, -base1));
      s[nt][3] = fast_exp2(fmaf(s[nt][3], scale_log2, -base1));
    }
    l0 = l0 * alpha0 + (s[0][0] + s[0][1] + s[1][0] + s[1][1]);
    l1 = l1 * alpha1 + (s[0][2] + s[0][3] + s[1][2] + s[1][3]);
#pragma unroll
    for (int d = 0; d < kDTiles; ++d) {
      o[d][0] *= alpha0;
      o[d][1] *= alpha0;
      o[d][2] *= alpha1;
      o[d][3] *= alpha1;
    }
    uint32_t pf[4];
    pf[0] = pack2<T>(s[0][0], s[0][1]);
    pf[1] = pack2<T>(s[0][2], s[0][3]);
    pf[2] = pack2<T>(s[1][0], s[1][1]);
    pf[3] = pack2<T>(s[1][2], s[1][3]);
#pragma unroll
    for (int dn = 0; dn < kD / 16; ++dn) {
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, sV + (key0 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride + dn * 16 +
                                (lane / 16) * 8);
      mma_16816<T>(o[2 * dn], pf, vf[0], vf[1]);
      mma_16816<T>(o[2 * dn + 1], pf, vf[2], vf[3]);
    }
  }
  __syncthreads();  // every warp is done with the tiles: reuse them for the merge

  // Merge the 4 warps' states, as decode_attention_kernel does.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  constexpr int kOwStride = kD + 8;
  static_assert(kDecodeWarps * kDecodeRows * kOwStride * 4 <=
                    2 * kKeyBlock * kStride * static_cast<int>(sizeof(T)),
                "the warps' partial outputs fit the K and V tiles");
  float* ow = reinterpret_cast<float*>(sK);  // [warps][16][kOwStride] f32 (over sK and sV)
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
      float* w0 = ow + (warp * kDecodeRows + r0) * kOwStride + d * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(w0) = make_float2(o[d][0], o[d][1]);
    }
  }
  if (r0 + 8 < nh) {
#pragma unroll
    for (int d = 0; d < kDTiles; ++d) {
      float* w1 = ow + (warp * kDecodeRows + r0 + 8) * kOwStride + d * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(w1) = make_float2(o[d][2], o[d][3]);
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
            *reinterpret_cast<const float4*>(ow + (w * kDecodeRows + r) * kOwStride + 4 * c);
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
}

}  // namespace ls::kernels::cuda
