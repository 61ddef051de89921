// gemv: one warp per pair of weight rows, 4 warps per block. Lane l reads 8 consecutive elements
// (16 bytes) of each of its two rows at k = 8 * (l + 32 * i), kUnroll iterations' loads issued
// before any is used; x's matching 16 bytes come through the read-only path (every warp of the SM
// reads the same x, so it stays in L1). Weight loads are marked streaming (evict first) so they do
// not push x out. Partial sums are reduced across the warp with shuffles; lane 0 adds the bias and
// stores. No shared memory, no second launch. Launched as a programmatic dependent launch (the
// first weight loads overlap the previous kernel's tail); LONGSERVE_NO_PDL=1 turns that off.


#include "kernels/cuda/check.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 2;
constexpr int kUnroll = 2;

// The 8 values of a 16-byte vector of T, widened to f32.
template <typename T>
__device__ __forceinline__ void widen(const int4& v, float (&f)[8]) {
  const auto* h = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f32(h[i]);
}

// silu(g) * u exactly as silu_mul.cu computes it.
__device__ __forceinline__ float silu_times(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u);
}

// kSilu: w is a fused [2 * half, k] gate/up weight; warp p takes rows p (gate) and p + half (up)
// and writes out[m, p] = silu(gate) * up of the two rounded results: [m, half]. Otherwise warp p
// takes rows 2p and 2p + 1 of w: [n, k] and writes out: [m, n].
template <typename T, int M, bool kSilu>
__global__ void __launch_bounds__(32 * kWarps) gemv_kernel(const T* __restrict__ x,
                                                          const T* __restrict__ w,
                                                          const float* __restrict__ bias,
                                                          T* __restrict__ out, int64_t n,
                                                          int64_t k) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t pair =
      static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int64_t half = n / 2;
  const int64_t row0 = kSilu ? pair : pair * kRowsPerWarp;
  if (kSilu ? pair >= half : row0 >= n) return;
  const bool has_row1 = kSilu || row0 + 1 < n;
  const int64_t row1 = kSilu ? pair + half : (has_row1 ? row0 + 1 : row0);
  const int4* w0 = reinterpret_cast<const int4*>(w + row0 * k);
  const int4* w1 = reinterpret_cast<const int4*>(w + row1 * k);
  const int64_t vecs = k / 8;  // 16-byte vectors per row

  float acc[M][kRowsPerWarp];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[m][r] = 0.0f;
  }
  const auto step = [&](int4 a, int4 b, int64_t v) {
    float fa[8], fb[8];
    widen<T>(a, fa);
    widen<T>(b, fb);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float fx[8];
      widen<T>(__ldg(reinterpret_cast<const int4*>(x + m * k) + v), fx);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[m][0] = fmaf(fa[i], fx[i], acc[m][0]);
        acc[m][1] = fmaf(fb[i], fx[i], acc[m][1]);
      }
    }
  };
  // Weight loads run one batch ahead of the math. The first batch is issued before waiting for
  // the previous kernel (programmatic dependent launch): weights never depend on it, x does.
  int64_t v = lane;
  bool have = v + 32 * (kUnroll - 1) < vecs;
  int4 a[kUnroll], b[kUnroll];
  if (have) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      a[u] = __ldcs(w0 + v + 32 * u);
      b[u] = __ldcs(w1 + v + 32 * u);
    }
  }
  pdl_wait();
  while (have) {
    const int64_t vn = v + 32 * kUnroll;
    const bool next = vn + 32 * (kUnroll - 1) < vecs;
    int4 an[kUnroll], bn[kUnroll];
    if (next) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        an[u] = __ldcs(w0 + vn + 32 * u);
        bn[u] = __ldcs(w1 + vn + 32 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) step(a[u], b[u], v + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      a[u] = an[u];
      b[u] = bn[u];
    }
    v = vn;
    have = next;
  }
  for (; v < vecs; v += 32) step(__ldcs(w0 + v), __ldcs(w1 + v), v);

#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[m][r] = warp_sum(acc[m][r]);
  }
  if (lane == 0) {
    const float b0 = bias ? bias[row0] : 0.0f, b1 = bias ? bias[row1] : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if constexpr (kSilu) {
        const float g = to_f32(from_f32<T>(acc[m][0] + b0));
        const float u = to_f32(from_f32<T>(acc[m][1] + b1));
        out[m * half + pair] = from_f32<T>(silu_times(g, u));
      } else {
        out[m * n + row0] = from_f32<T>(acc[m][0] + b0);
        if (has_row1) out[m * n + row0 + 1] = from_f32<T>(acc[m][1] + b1);
      }
    }
  }
}

template <typename T, int M, bool kSilu>
Status launch(const void* x, const void* w, const float* bias, void* out, int64_t n, int64_t k,
              cudaStream_t stream) {
  const int64_t pairs = (n + kRowsPerWarp - 1) / kRowsPerWarp;
  const int64_t blocks = (pairs + kWarps - 1) / kWarps;
  // Programmatic dependent launch: the kernel may start while the previous one drains; it
  // waits (griddepcontrol.wait) before reading anything that kernel wrote.
  return launch_pdl(gemv_kernel<T, M, kSilu>, dim3(static_cast<unsigned>(blocks)), 32 * kWarps, 0,
                    stream, kSilu ? "gemv_silu_mul" : "gemv", static_cast<const T*>(x),
                    static_cast<const T*>(w), bias, static_cast<T*>(out), n, k);
}

template <bool kSilu>
Status run(const void* x, const void* w, const float* bias, void* out, int64_t m, int64_t n,
           int64_t k, DType dtype, cudaStream_t stream) {
  if (n <= 0) return {};
  if (!gemv_supports(x, w, m, k, dtype) || !out) {
    return invalid_argument("gemv: unsupported call (m {}, k {}, {})", m, k, dtype_name(dtype));
  }
  if (n > (int64_t{1} << 36)) return invalid_argument("gemv: n {} too large", n);
  if (kSilu && n % 2 != 0) return invalid_argument("gemv_silu_mul: odd gate/up rows {}", n);
  return dispatch_float(dtype, "gemv", [&]<typename T>() -> Status {
    if constexpr (sizeof(T) != 2) {
      return invalid_argument("gemv: f32 is not supported");
    } else {
      static_assert(kGemvMaxRows == 2);
      if (m == 1) return launch<T, 1, kSilu>(x, w, bias, out, n, k, stream);
      return launch<T, 2, kSilu>(x, w, bias, out, n, k, stream);
    }
  });
}

}  // namespace

bool gemv_supports(const void* x, const void* w, int64_t m, int64_t k, DType dtype) {
  return m >= 1 && m <= kGemvMaxRows && k > 0 && k % 8 == 0 &&
         (dtype == DType::kBF16 || dtype == DType::kF16) &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

Status gemv(const void* x, const void* w, const float* bias, void* out, int64_t m, int64_t n,
            int64_t k, DType dtype, cudaStream_t stream) {
  return run<false>(x, w, bias, out, m, n, k, dtype, stream);
}

Status gemv_silu_mul(const void* x, const void* w, const float* bias, void* out, int64_t m,
                     int64_t n, int64_t k, DType dtype, cudaStream_t stream) {
  return run<true>(x, w, bias, out, m, n, k, dtype, stream);
}

}  // namespace ls::kernels::cuda
