// qkv_split_rope. Two kernels for one job, picked per call from the shapes:
// - qkv_split_vec_kernel (head_dim and rotary_dim / 2 multiples of one 16-byte vector, at most
//   32 vectors per head, 16-byte aligned buffers; every model family's heads): a group of
//   head_dim / V lanes holds one (token, head), one 16-byte load and store per lane; a warp holds
//   as many whole groups as fit, so q, k and v heads of neighbouring tokens share a warp. The
//   per-head norm sums its group by shuffles (shared memory when the group is not a power of
//   two); the rotation's partner vector comes by one shuffle per element.
// - qkv_split_kernel (everything else): one warp per (token, head), up to 16 elements per lane,
//   the rotation through shared memory.
// Both normalise if asked (same f32 order as rmsnorm.cu within a lane: fmaf sum of squares,
// w * (x * inv) with explicit _rn products), round, rotate with rope.cu's exact arithmetic and
// round again; v heads are copied.

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/qkv_split.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 16;  // head_dim <= 32 * 16

template <typename T>
__global__ void __launch_bounds__(32 * kWarps) qkv_split_kernel(const QkvSplitParams p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int heads = p.q_heads + 2 * p.kv_heads;
  const int head = static_cast<int>(blockIdx.y) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int64_t t = blockIdx.x;
  if (head >= heads) return;
  const int d = p.head_dim;
  const T* src = static_cast<const T*>(p.qkv) + (t * heads + head) * d;
  if (head >= p.q_heads + p.kv_heads) {  // v: copy
    T* dst = static_cast<T*>(p.v) + (t * p.kv_heads + (head - p.q_heads - p.kv_heads)) * d;
    for (int i = lane; i < d; i += 32) dst[i] = src[i];
    return;
  }
  const bool is_q = head < p.q_heads;
  T* dst = is_q ? static_cast<T*>(p.q) + (t * p.q_heads + head) * d
                : static_cast<T*>(p.k) + (t * p.kv_heads + (head - p.q_heads)) * d;
  const float* w = is_q ? p.q_norm : p.k_norm;
  // Element i of the head lives in x[i / 32] of lane i % 32.
  float x[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int i = j * 32 + lane;
    x[j] = i < d ? to_f32(src[i]) : 0.0f;
  }
  if (w) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) ss = fmaf(x[j], x[j], ss);
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + p.eps);
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = j * 32 + lane;
      if (i < d) x[j] = to_f32(from_f32<T>(__fmul_rn(w[i], __fmul_rn(x[j], inv))));
    }
  }
  // Rotated pairs (i, i + half) sit in different lanes/registers: go through shared memory.
  __shared__ float row[kWarps][32 * kMaxPerLane];
  float* r = row[threadIdx.x / 32];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int i = j * 32 + lane;
    if (i < d) r[i] = x[j];
  }
  __syncwarp();
  const int half = p.rotary_dim / 2;
  const float* cs = p.cos + t * half;
  const float* sn = p.sin + t * half;
  for (int i = lane; i < d; i += 32) {
    float y = r[i];
    if (i < half) {
      y = __fsub_rn(__fmul_rn(r[i], cs[i]), __fmul_rn(r[i + half], sn[i]));
    } else if (i < 2 * half) {
      const int j = i - half;
      y = __fadd_rn(__fmul_rn(r[i], cs[j]), __fmul_rn(r[j], sn[j]));
    }
    dst[i] = from_f32<T>(y);
  }
}

constexpr int kVecWarps = 8;  // warps per block of qkv_split_vec_kernel

// Lanes of a group: head_dim / V (V = 16-byte vector elements); groups per warp: 32 / that.
template <typename T>
__global__ void __launch_bounds__(32 * kVecWarps)
    qkv_split_vec_kernel(const QkvSplitParams p, int group, int64_t units) {
  constexpr int V = kVecElems<T>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int per_warp = 32 / group;
  const int gi = lane / group;      // group of this lane in the warp
  const int c = lane - gi * group;  // this lane's vector of the head
  const int heads = p.q_heads + 2 * p.kv_heads;
  const int64_t unit = (static_cast<int64_t>(blockIdx.x) * kVecWarps + warp) * per_warp + gi;
  // Lanes past the last whole group, and groups past the last unit, still take part in the
  // shuffles (with zeros) but store nothing.
  const bool active = gi < per_warp && unit < units;
  const int64_t t = active ? unit / heads : 0;
  const int head = active ? static_cast<int>(unit - t * heads) : 0;
  const int d = p.head_dim;
  float x[V];
  if (active) {
    load_vec(static_cast<const T*>(p.qkv) + (t * heads + head) * d + c * V, x);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) x[e] = 0.0f;
  }
  const bool is_q = head < p.q_heads, is_v = head >= p.q_heads + p.kv_heads;
  if (p.q_norm) {  // q_norm and k_norm come together
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) ss = fmaf(x[e], x[e], ss);
    if ((group & (group - 1)) == 0) {
      for (int o = group / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    } else {
      __shared__ float partial[kVecWarps][32];
      partial[warp][lane] = ss;
      __syncwarp();
      ss = 0.0f;
      const int first = min(gi, per_warp - 1) * group;
      for (int i = 0; i < group; ++i) ss += partial[warp][first + i];
      __syncwarp();
    }
    if (!is_v) {
      const float* w = (is_q ? p.q_norm : p.k_norm) + c * V;
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + p.eps);
#pragma unroll
      for (int e = 0; e < V; ++e) x[e] = to_f32(from_f32<T>(__fmul_rn(w[e], __fmul_rn(x[e], inv))));
    }
  }
  // Rotation: vector c < hv pairs with c + hv (hv = rotary_dim / 2 / V); vectors from 2 hv on
  // are not rotated.
  const int hv = p.rotary_dim / 2 / V;
  const bool first_half = c < hv, rotated = c < 2 * hv;
  const int src = first_half ? lane + hv : (rotated ? lane - hv : lane);
  float other[V];
#pragma unroll
  for (int e = 0; e < V; ++e) other[e] = __shfl_sync(0xffffffffu, x[e], src);
  if (!active) return;
  T* dst;
  if (is_q) {
    dst = static_cast<T*>(p.q) + (t * p.q_heads + head) * d;
  } else if (!is_v) {
    dst = static_cast<T*>(p.k) + (t * p.kv_heads + (head - p.q_heads)) * d;
  } else {
    dst = static_cast<T*>(p.v) + (t * p.kv_heads + (head - p.q_heads - p.kv_heads)) * d;
  }
  if (!is_v && rotated) {
    const int half = p.rotary_dim / 2;
    const int j0 = (first_half ? c : c - hv) * V;
    float cs[V], sn[V];
#pragma unroll
    for (int e = 0; e < V; e += 4) {
      const float4 c4 = *reinterpret_cast<const float4*>(p.cos + t * half + j0 + e);
      const float4 s4 = *reinterpret_cast<const float4*>(p.sin + t * half + j0 + e);
      cs[e] = c4.x;
      cs[e + 1] = c4.y;
      cs[e + 2] = c4.z;
      cs[e + 3] = c4.w;
      sn[e] = s4.x;
      sn[e + 1] = s4.y;
      sn[e + 2] = s4.z;
      sn[e + 3] = s4.w;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      x[e] = first_half ? __fsub_rn(__fmul_rn(x[e], cs[e]), __fmul_rn(other[e], sn[e]))
                        : __fadd_rn(__fmul_rn(x[e], cs[e]), __fmul_rn(other[e], sn[e]));
    }
  }
  store_vec(dst + c * V, x);
}

}  // namespace

Status qkv_split_rope(const QkvSplitParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return {};
  if (!p.qkv || !p.q || !p.k || !p.v || !p.cos || !p.sin || p.q_heads <= 0 || p.kv_heads <= 0) {
    return invalid_argument("qkv_split_rope: null pointer or no heads");
  }
  if (p.head_dim <= 0 || p.head_dim > 32 * kMaxPerLane || p.rotary_dim < 2 ||
      p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_dim) {
    return invalid_argument("qkv_split_rope: head_dim {} / rotary_dim {} not supported",
                            p.head_dim, p.rotary_dim);
  }
  if (p.tokens > 0x7fffffff) return invalid_argument("qkv_split_rope: too many tokens");
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) {
    return invalid_argument("qkv_split_rope: q_norm and k_norm must both be given or both null");
  }
  return dispatch_float(p.dtype, "qkv_split_rope", [&]<typename T>() {
    constexpr int V = kVecElems<T>;
    const int heads = p.q_heads + 2 * p.kv_heads;
    const int group = p.head_dim / V;
    const bool aligned = aligned16(p.qkv) && aligned16(p.q) && aligned16(p.k) && aligned16(p.v) &&
                         aligned16(p.cos) && aligned16(p.sin);
    if (aligned && p.head_dim % V == 0 && (p.rotary_dim / 2) % V == 0 && group <= 32) {
      const int64_t units = p.tokens * heads;
      const int64_t warps = (units + 32 / group - 1) / (32 / group);
      const int64_t blocks = (warps + kVecWarps - 1) / kVecWarps;
      if (blocks > INT32_MAX) return invalid_argument("qkv_split_rope: too many heads");
      qkv_split_vec_kernel<T>
          <<<static_cast<unsigned>(blocks), 32 * kVecWarps, 0, stream>>>(p, group, units);
      return launch_status("qkv_split_rope");
    }
    const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((heads + kWarps - 1) / kWarps));
    qkv_split_kernel<T><<<grid, 32 * kWarps, 0, stream>>>(p);
    return launch_status("qkv_split_rope");
  });
}

}  // namespace ls::kernels::cuda
