// qkv_split_rope: one warp per (token, head). A q or k head is read once into registers (up to
// 16 elements per lane), normalised if asked (same f32 order as rmsnorm.cu: fmaf sum of squares,
// w * (x * inv) with explicit _rn products), rounded, rotated with rope.cu's exact arithmetic and
// rounded again; v heads are copied.

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
  return dispatch_float(p.dtype, "qkv_split_rope", [&]<typename T>() {
    const int heads = p.q_heads + 2 * p.kv_heads;
    const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((heads + kWarps - 1) / kWarps));
    qkv_split_kernel<T><<<grid, 32 * kWarps, 0, stream>>>(p);
    return launch_status("qkv_split_rope");
  });
}

}  // namespace ls::kernels::cuda
