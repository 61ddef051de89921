#include "kernels/cuda/shared_prefix_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/mma.cuh"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // query rows per block (== kSharedPrefixMaxRows)
constexpr int kKeys = 64;           // keys per block step
constexpr int kMergeRowsPerBlock = 4;
static_assert(kRows == kSharedPrefixMaxRows);

template <int kD>
struct Shape {
  static constexpr int kStride = kD + 8;  // shared row stride in elements (16-byte padding)
  static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static constexpr int kRowThreads = kThreads / kKeys;  // threads copying one row (2)
  static constexpr int kTile = kRows * kStride;         // elements of one tile (Q, K or V)
  template <typename T>
  static constexpr int smem_bytes() {
    return static_cast<int>(sizeof(T)) * 3 * kTile + 4 * kKeys;
  }
};
static_assert(kRows == kKeys, "Q, K and V tiles share one shape");

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Partial slot of (seq, q_head, part): o at [slot * kD], lse at [slot].
__device__ __forceinline__ int64_t slot_of(const AttentionParams& p, int32_t max_parts, int32_t seq,
                                           int32_t h, int32_t part) {
  return (static_cast<int64_t>(seq) * p.num_q_heads + h) * max_parts + part;
}

// One block per (item, kv head): rows r < rows of the item are (sequence item_seqs[seq_begin +
// r / group], query head kv_head * group + r % group); each warp owns 16 rows. The block copies
// 64 key rows and 64 value rows of the item's range at a time into shared memory (cp.async,
// absent rows zero-filled and masked), every warp computes S = Q K^T, its online softmax and
// O += P V (P rounded to T, as the paged attention kernels do); K of the next step loads while
// P V runs, V of this step while Q K^T runs. Rows of the padding are computed and dropped.
template <int kD, typename T>
__global__ void __launch_bounds__(kThreads, 2)
    shared_prefix_items_kernel(const SharedPrefixParams sp, float* part_o, float* part_lse) {
  using Sh = Shape<kD>;
  constexpr int kStride = Sh::kStride;
  constexpr int kChunks = Sh::kChunks;
  constexpr int kKSteps = kD / 16;
  constexpr int kDTiles = kD / 8;
  const AttentionParams& p = sp.attn;
  const SharedPrefixItem it = sp.items[blockIdx.x];
  const int32_t g = static_cast<int32_t>(blockIdx.y);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int32_t rows = min(it.num_seqs * group, kRows);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + Sh::kTile;
  T* sV = sK + Sh::kTile;
  int32_t* kvalid = reinterpret_cast<int32_t*>(sV + Sh::kTile);

  const PagedKvPool& kv = p.retrieval;
  const int32_t pt = kv.page_tokens;
  const int32_t slot = p.head_slot[g];
  const bool table_ok =
      it.table_seq >= 0 && it.table_seq < p.num_seqs && slot >= 0 && slot < kv.heads_per_block;
  const int32_t* table = p.retrieval_blocks + static_cast<int64_t>(table_ok ? it.table_seq : 0) *
                                                  p.retrieval_blocks_stride;

  // Row r's sequence, or -1 when r is padding or names no sequence of the step.
  auto row_seq = [&](int r) -> int32_t {
    if (r >= rows) return -1;
    const int32_t s = sp.item_seqs[it.seq_begin + r / group];
    return s >= 0 && s < p.num_seqs ? s : -1;
  };

  // Q tile: 2 threads per row; padding rows are zero.
  {
    const int r = tid / Sh::kRowThreads;
    const int32_t s = row_seq(r);
    const int32_t h = g * group + r % group;
    const T* src =
        static_cast<const T*>(p.q) +
        (static_cast<int64_t>(s >= 0 ? p.q_indptr[s] : 0) * p.num_q_heads + (s >= 0 ? h : 0)) * kD;
    for (int c = tid % Sh::kRowThreads; c < kChunks; c += Sh::kRowThreads) {
      cp_async_16(sQ + r * kStride + c * 8, src + c * 8, s >= 0);
    }
  }

  const int32_t num_keys = table_ok ? max(0, it.key_end - it.key_begin) : 0;
  const int32_t num_steps = (num_keys + kKeys - 1) / kKeys;
  const int my_row = tid / Sh::kRowThreads;
  const T* k_pool = static_cast<const T*>(kv.k);
  const T* v_pool = static_cast<const T*>(kv.v);
  int64_t cur_offset = -1;  // element offset of this thread's key row in the pool, -1: absent
  auto locate = [&](int32_t step) -> int64_t {
    const int32_t i = step * kKeys + my_row;
    if (i >= num_keys) return -1;
    const int32_t pos = it.key_begin + i;
    const int32_t lp = pos / pt;
    if (lp >= p.retrieval_blocks_stride) return -1;
    const int32_t block = table[lp];
    if (block < 0 || block >= kv.num_blocks) return -1;
    const int64_t head_page = static_cast<int64_t>(block) * kv.heads_per_block + slot;
    const int64_t page = kv.page_slot ? kv.page_slot[head_page] : head_page;
    if (page < 0) return -1;
    return (page * pt + (pos - lp * pt)) * kD;
  };
  auto issue_k = [&](int32_t step) {
    cur_offset = locate(step);
    const bool valid = cur_offset >= 0;
    const T* src = k_pool + (valid ? cur_offset : 0);
    for (int c = tid % Sh::kRowThreads; c < kChunks; c += Sh::kRowThreads) {
      cp_async_16(sK + my_row * kStride + c * 8, src + c * 8, valid);
    }
    if (tid % Sh::kRowThreads == 0) kvalid[my_row] = valid ? 1 : 0;
  };
  auto issue_v = [&]() {
    const bool valid = cur_offset >= 0;
    const T* src = v_pool + (valid ? cur_offset : 0);
    for (int c = tid % Sh::kRowThreads; c < kChunks; c += Sh::kRowThreads) {
      cp_async_16(sV + my_row * kStride + c * 8, src + c * 8, valid);
    }
  };
  if (num_steps > 0) issue_k(0);
  cp_async_commit();

  const int row0 = warp * 16;
  const bool warp_rows = row0 < rows;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  uint32_t qf[kKSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int32_t step = 0; step < num_steps; ++step) {
    cp_async_wait<0>();
    __syncthreads();  // K_step (and Q) landed; every warp is done with V_{step-1}
    if (step == 0 && warp_rows) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        ldmatrix_x4(qf[kk], sQ + (row0 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
      }
    }
    issue_v();
    cp_async_commit();

    const bool a0 = kvalid[lane] != 0, a1 = kvalid[lane + 32] != 0;
    const bool any = warp_rows && __any_sync(0xffffffffu, a0 || a1);
    const bool all = __all_sync(0xffffffffu, a0 && a1);
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
            if (kvalid[nt * 8 + 2 * (lane % 4) + e] == 0) {
              s[nt][e] = -INFINITY;
              s[nt][2 + e] = -INFINITY;
            }
          }
        }
      }
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
      const float alpha0 = exp2_approx(m0 * scale_log2 - base0);  // m0 = -inf -> 0
      const float alpha1 = exp2_approx(m1 * scale_log2 - base1);
      m0 = mn0;
      m1 = mn1;
      float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        s[nt][0] = exp2_approx(fmaf(s[nt][0], scale_log2, -base0));
        s[nt][1] = exp2_approx(fmaf(s[nt][1], scale_log2, -base0));
        s[nt][2] = exp2_approx(fmaf(s[nt][2], scale_log2, -base1));
        s[nt][3] = exp2_approx(fmaf(s[nt][3], scale_log2, -base1));
        rs0 += s[nt][0] + s[nt][1];
        rs1 += s[nt][2] + s[nt][3];
      }
      l0 = l0 * alpha0 + rs0;
      l1 = l1 * alpha1 + rs1;
#pragma unroll
      for (int i = 0; i < kDTiles; ++i) {
        o[i][0] *= alpha0;
        o[i][1] *= alpha0;
        o[i][2] *= alpha1;
        o[i][3] *= alpha1;
      }
    }

    cp_async_wait<0>();
    __syncthreads();  // V_step landed; every warp is done reading K_step and kvalid
    if (step + 1 < num_steps) issue_k(step + 1);
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

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (!warp_rows) return;
    // This thread holds rows row0 + lane / 4 (o[.][0..1]) and row0 + lane / 4 + 8 (o[.][2..3]).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + lane / 4 + 8 * half;
    const int32_t s = row_seq(r);
    if (s < 0 || it.part < 0 || it.part >= sp.max_parts) continue;
    const int32_t h = g * group + r % group;
    const int64_t slot_index = slot_of(p, sp.max_parts, s, h, it.part);
    const float l = half == 0 ? l0 : l1;
    const float m = half == 0 ? m0 : m1;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* dst = part_o + slot_index * kD;
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
      const int col = i * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(dst + col) =
          make_float2(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
    }
    if (lane % 4 == 0) part_lse[slot_index] = l > 0.0f ? m * p.scale + logf(l) : -INFINITY;
  }
}

// A warp per (sequence, query head): out = sum_j e^(lse_j - M) o_j / sum_j e^(lse_j - M) over
// the sequence's parts (0 when it has none or none saw a key).
template <int kD, typename T>
__global__ void __launch_bounds__(32 * kMergeRowsPerBlock)
    shared_prefix_merge_kernel(const SharedPrefixParams sp, const float* part_o,
                               const float* part_lse) {
  constexpr int kPerLane = kD / 32;
  const AttentionParams& p = sp.attn;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeRowsPerBlock + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(p.num_seqs) * p.num_q_heads) return;
  const int32_t seq = static_cast<int32_t>(row / p.num_q_heads);
  const int32_t h = static_cast<int32_t>(row % p.num_q_heads);
  const int32_t n = min(max(sp.num_parts[seq], 0), sp.max_parts);
  const int64_t base = row * sp.max_parts;
  float mx = -INFINITY;
  for (int j = lane; j < n; j += 32) mx = fmaxf(mx, part_lse[base + j]);
#pragma unroll
  for (int o2 = 16; o2 >= 1; o2 >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  float sum = 0.0f;
  if (mx != -INFINITY) {
    for (int j = 0; j < n; ++j) {
      const float lse = part_lse[base + j];
      if (lse == -INFINITY) continue;
      const float w = expf(lse - mx);
      sum += w;
      const float* o = part_o + (base + j) * kD;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[c] = fmaf(w, o[lane + 32 * c], acc[c]);
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  T* out =
      static_cast<T*>(p.out) + (static_cast<int64_t>(p.q_indptr[seq]) * p.num_q_heads + h) * kD;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) out[lane + 32 * c] = from_f32<T>(acc[c] * inv);
}

int64_t align_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

int64_t partial_slots(const SharedPrefixParams& p) {
  return static_cast<int64_t>(p.attn.num_seqs) * p.attn.num_q_heads * p.max_parts;
}

template <int kD, typename T>
Status launch(const SharedPrefixParams& p, float* part_o, float* part_lse, cudaStream_t stream) {
  constexpr int kSmem = Shape<kD>::template smem_bytes<T>();
  // Per device: a function attribute belongs to one device (tensor parallelism runs the kernel
  // on several).
  static std::mutex mu;
  static uint64_t done = 0;  // bit d: device d has the attribute
  int device = 0;
  cudaError_t attr_err = cudaGetDevice(&device);
  if (attr_err == cudaSuccess && device >= 0 && device < 64) {
    std::lock_guard<std::mutex> lock(mu);
    if (((done >> device) & 1u) == 0) {
      attr_err = cudaFuncSetAttribute(shared_prefix_items_kernel<kD, T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      if (attr_err == cudaSuccess) done |= uint64_t{1} << device;
    }
  }
  LS_RETURN_IF_ERROR(cuda_status(attr_err, "cudaFuncSetAttribute(shared_prefix_items_kernel)"));
  if (p.num_items > 0) {
    const dim3 grid(static_cast<unsigned>(p.num_items), static_cast<unsigned>(p.attn.num_kv_heads));
    shared_prefix_items_kernel<kD, T><<<grid, kThreads, kSmem, stream>>>(p, part_o, part_lse);
    LS_RETURN_IF_ERROR(launch_status("shared_prefix_items_kernel"));
  }
  const int64_t rows = static_cast<int64_t>(p.attn.num_seqs) * p.attn.num_q_heads;
  const int64_t blocks = (rows + kMergeRowsPerBlock - 1) / kMergeRowsPerBlock;
  shared_prefix_merge_kernel<kD, T>
      <<<static_cast<unsigned>(blocks), 32 * kMergeRowsPerBlock, 0, stream>>>(p, part_o, part_lse);
  return launch_status("shared_prefix_merge_kernel");
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

}  // namespace

int64_t shared_prefix_workspace_bytes(const SharedPrefixParams& p) {
  const int64_t slots = partial_slots(p);
  return align_up(slots * p.attn.head_dim * 4, 256) + align_up(slots * 4, 256);
}

Status shared_prefix_attention(const SharedPrefixParams& p, void* workspace,
                               int64_t workspace_bytes, cudaStream_t stream) {
  const AttentionParams& a = p.attn;
  if (a.num_seqs < 0 || a.num_q_heads <= 0 || a.num_kv_heads <= 0 ||
      a.num_q_heads % a.num_kv_heads != 0 || a.num_kv_heads > 65535 || p.num_items < 0 ||
      p.max_parts <= 0) {
    return invalid_argument("shared-prefix attention: bad geometry");
  }
  if (a.num_seqs == 0) return Status::ok_status();
  if (a.head_dim != 64 && a.head_dim != 128) {
    return invalid_argument("shared-prefix attention: no kernel for head_dim {}", a.head_dim);
  }
  if (!a.q || !a.out || !a.q_indptr || !a.head_slot || !p.num_parts ||
      (p.num_items > 0 &&
       (!p.items || !p.item_seqs || !a.retrieval_blocks || !a.retrieval.k || !a.retrieval.v))) {
    return invalid_argument("shared-prefix attention: missing pointers");
  }
  if (a.q_dtype != DType::kBF16 && a.q_dtype != DType::kF16) {
    return invalid_argument("shared-prefix attention: q must be bf16 or f16");
  }
  if (p.num_items > 0 && (a.retrieval.quant != KvQuant::kNone || a.retrieval.dtype != a.q_dtype ||
                          a.retrieval.head_dim != a.head_dim || a.retrieval.page_tokens <= 0 ||
                          a.retrieval.heads_per_block <= 0)) {
    return invalid_argument(
        "shared-prefix attention: the retrieval pool must hold plain pages of q's dtype and "
        "head_dim");
  }
  if (p.max_item_rows > kSharedPrefixMaxRows || a.num_q_heads / a.num_kv_heads > kRows) {
    return invalid_argument("shared-prefix attention: items of {} rows exceed {}", p.max_item_rows,
                            kSharedPrefixMaxRows);
  }
  if (!aligned16(a.q) || !aligned16(a.out) || !aligned16(a.retrieval.k) ||
      !aligned16(a.retrieval.v) || !aligned16(workspace)) {
    return invalid_argument(
        "shared-prefix attention: q, out, pools and workspace must be 16-byte "
        "aligned");
  }
  if (workspace_bytes < shared_prefix_workspace_bytes(p)) {
    return invalid_argument("shared-prefix attention: workspace of {} bytes, {} needed",
                            workspace_bytes, shared_prefix_workspace_bytes(p));
  }
  const int64_t slots = partial_slots(p);
  auto* part_o = static_cast<float*>(workspace);
  auto* part_lse = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                            align_up(slots * a.head_dim * 4, 256));
  const bool bf16 = a.q_dtype == DType::kBF16;
  if (a.head_dim == 64) {
    return bf16 ? launch<64, __nv_bfloat16>(p, part_o, part_lse, stream)
                : launch<64, __half>(p, part_o, part_lse, stream);
  }
  return bf16 ? launch<128, __nv_bfloat16>(p, part_o, part_lse, stream)
              : launch<128, __half>(p, part_o, part_lse, stream);
}

}  // namespace ls::kernels::cuda
