// FP8 linear helpers (kernels/cuda/fp8_linear.h).
//
// fp8_gemv: up to 8 activation rows per pass; one warp per pair of weight rows, 4 warps per block,
// as gemv.cu, but lane l reads 16 e4m3 weights (16 bytes) of each row at k = 16 * (l + 32 * i), two
// batches in flight, and the 16 matching activations (32 bytes) through the read-only path. e4m3
// pairs widen to f16 pairs (exact: every e4m3 value is an f16 value) and then to f32; the row scale
// multiplies the reduced sum once. Launched as a programmatic dependent launch: the first weight
// loads overlap the previous kernel's tail.
//
// quantize_rows_e4m3: one block per row: max|x| over the row, then e4m3(x / scale). Rows of whole
// 16-byte vectors of up to 16384 bf16 / f16 (8192 f32) elements keep their vectors in registers
// between the two passes; other rows (unsharded Llama-3-70B's down_proj input, 28672) are read
// twice, an element per thread at a time.
//
// scale_rows_cols: the elementwise epilogue of the unscaled FP8 GEMM; where rows are whole 16-byte
// vectors, a block per row and 256 vectors, one vector per thread.

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace ls::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 2;

// 16 e4m3 values (one int4) widened to f32.
__device__ __forceinline__ void widen_e4m3(const int4& v, float (&f)[16]) {
  const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3);
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&h));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// 16 consecutive activations (two 16-byte loads) widened to f32.
template <typename T>
__device__ __forceinline__ void load_x16(const T* x, int64_t v, float (&f)[16]) {
  const int4* p = reinterpret_cast<const int4*>(x) + 2 * v;
  const int4 lo = __ldg(p), hi = __ldg(p + 1);
  const T* a = reinterpret_cast<const T*>(&lo);
  const T* b = reinterpret_cast<const T*>(&hi);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    f[i] = to_f32(a[i]);
    f[8 + i] = to_f32(b[i]);
  }
}

template <typename T, int M>
__global__ void __launch_bounds__(32 * kWarps) fp8_gemv_kernel(const T* __restrict__ x,
                                                              const uint8_t* __restrict__ w,
                                                              const float* __restrict__ w_scale,
                                                              const float* __restrict__ bias,
                                                              T* __restrict__ out, int64_t n,
                                                              int64_t k) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32) * 2;
  if (row0 >= n) return;
  const bool has_row1 = row0 + 1 < n;
  const int64_t row1 = has_row1 ? row0 + 1 : row0;
  const int4* w0 = reinterpret_cast<const int4*>(w + row0 * k);
  const int4* w1 = reinterpret_cast<const int4*>(w + row1 * k);
  const int64_t vecs = k / 16;  // 16-byte weight vectors per row

  float acc[M][2];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = 0.0f;
  const auto step = [&](int4 a, int4 b, int64_t v) {
    float fa[16], fb[16];
    widen_e4m3(a, fa);
    widen_e4m3(b, fb);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float fx[16];
      load_x16<T>(x + m * k, v, fx);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        acc[m][0] = fmaf(fa[i], fx[i], acc[m][0]);
        acc[m][1] = fmaf(fb[i], fx[i], acc[m][1]);
      }
    }
  };
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
    acc[m][0] = warp_sum(acc[m][0]);
    acc[m][1] = warp_sum(acc[m][1]);
  }
  if (lane == 0) {
    const float s0 = w_scale[row0], s1 = w_scale[row1];
    const float b0 = bias ? bias[row0] : 0.0f, b1 = bias ? bias[row1] : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      out[m * n + row0] = from_f32<T>(fmaf(acc[m][0], s0, b0));
      if (has_row1) out[m * n + row1] = from_f32<T>(fmaf(acc[m][1], s1, b1));
    }
  }
}

template <typename T, int M>
Status launch_gemv(const void* x, const void* w, const float* w_scale, const float* bias,
                   void* out, int64_t n, int64_t k, cudaStream_t stream) {
  const int64_t pairs = (n + 1) / 2;
  const int64_t blocks = (pairs + kWarps - 1) / kWarps;
  return launch_pdl(fp8_gemv_kernel<T, M>, dim3(static_cast<unsigned>(blocks)), 32 * kWarps, 0,
                    stream, "fp8_gemv", static_cast<const T*>(x), static_cast<const uint8_t*>(w),
                    w_scale, bias, static_cast<T*>(out), n, k);
}

constexpr int kQuantThreads = 256;

// The scale of the block's row (one row per block of kQuantThreads) from each thread's max|x|
// over its elements: max|row| / 448, 1 for a zero row; thread 0 stores it to scales[row].
__device__ __forceinline__ float block_row_scale(float amax, float* warp_max_smem,
                                                 float* __restrict__ scales) {
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) warp_max_smem[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = warp_max_smem[0];
#pragma unroll
  for (int i = 1; i < kQuantThreads / 32; ++i) amax = fmaxf(amax, warp_max_smem[i]);
  const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  return scale;
}

template <typename T>
__global__ void __launch_bounds__(kQuantThreads) quantize_rows_kernel(const T* __restrict__ x,
                                                                     int64_t k,
                                                                     __nv_fp8_storage_t* __restrict__ q,
                                                                     float* __restrict__ scales) {
  __shared__ float warp_max_smem[kQuantThreads / 32];  // [warps of the block]
  const T* row = x + static_cast<int64_t>(blockIdx.x) * k;
  __nv_fp8_storage_t* qrow = q + static_cast<int64_t>(blockIdx.x) * k;
  pdl_wait();
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kQuantThreads) amax = fmaxf(amax, fabsf(to_f32(row[i])));
  const float scale = block_row_scale(amax, warp_max_smem, scales);
  for (int64_t i = threadIdx.x; i < k; i += kQuantThreads) {
    qrow[i] = __nv_cvt_float_to_fp8(__fdiv_rn(to_f32(row[i]), scale), __NV_SATFINITE, __NV_E4M3);
  }
}

// Up to kChunks 16-byte vectors of the row per thread, loaded once: the max, then the codes (the
// same per-element arithmetic as quantize_rows_kernel, so the same bits).
template <typename T, int kChunks>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_vec_kernel(const T* __restrict__ x, int64_t k, __nv_fp8_storage_t* __restrict__ q,
                             float* __restrict__ scales) {
  constexpr int V = kVecElems<T>;
  __shared__ float warp_max_smem[kQuantThreads / 32];  // [warps of the block]
  const T* row = x + static_cast<int64_t>(blockIdx.x) * k;
  __nv_fp8_storage_t* qrow = q + static_cast<int64_t>(blockIdx.x) * k;
  pdl_wait();
  float v[kChunks][V];
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = (static_cast<int64_t>(c) * kQuantThreads + threadIdx.x) * V;
    if (i < k) {
      load_vec(row + i, v[c]);
#pragma unroll
      for (int e = 0; e < V; ++e) amax = fmaxf(amax, fabsf(v[c][e]));
    }
  }
  const float scale = block_row_scale(amax, warp_max_smem, scales);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = (static_cast<int64_t>(c) * kQuantThreads + threadIdx.x) * V;
    if (i < k) {
      alignas(8) uint8_t codes[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        codes[e] = __nv_cvt_float_to_fp8(__fdiv_rn(v[c][e], scale), __NV_SATFINITE, __NV_E4M3);
      }
      if constexpr (V == 8) {
        *reinterpret_cast<uint2*>(qrow + i) = *reinterpret_cast<const uint2*>(codes);
      } else {
        *reinterpret_cast<uint32_t*>(qrow + i) = *reinterpret_cast<const uint32_t*>(codes);
      }
    }
  }
}

template <typename T>
__global__ void scale_rows_cols_vec_kernel(T* __restrict__ out, int64_t n, float factor,
                                           const float* __restrict__ row_scale,
                                           const float* __restrict__ col_scale,
                                           const float* __restrict__ bias) {
  constexpr int V = kVecElems<T>;
  pdl_wait();
  const int64_t r = blockIdx.x;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * V;
  if (c >= n) return;
  T* p = out + r * n + c;
  float v[V];
  load_vec(p, v);
  const float rs = row_scale[r];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float y = v[e] * factor * (rs * col_scale[c + e]);
    v[e] = bias ? y + bias[c + e] : y;
  }
  store_vec(p, v);
}

template <typename T>
__global__ void scale_rows_cols_kernel(T* __restrict__ out, int64_t m, int64_t n, float factor,
                                       const float* __restrict__ row_scale,
                                       const float* __restrict__ col_scale,
                                       const float* __restrict__ bias) {
  pdl_wait();
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    const float v = to_f32(out[i]) * factor * (row_scale[r] * col_scale[c]);
    out[i] = from_f32<T>(bias ? v + bias[c] : v);
  }
}

}  // namespace

bool fp8_gemv_supports(const void* x, const void* w, int64_t m, int64_t k, DType dtype) {
  return m >= 1 && k > 0 && k % 16 == 0 && (dtype == DType::kBF16 || dtype == DType::kF16) &&
         aligned16(x) && aligned16(w);
}

Status fp8_gemv(const void* x, const void* w, const float* w_scale, const float* bias, void* out,
                int64_t m, int64_t n, int64_t k, DType dtype, cudaStream_t stream) {
  if (n <= 0) return {};
  if (!fp8_gemv_supports(x, w, m, k, dtype) || !out || !w_scale) {
    return invalid_argument("fp8_gemv: unsupported call (m {}, k {}, {})", m, k, dtype_name(dtype));
  }
  if (n > (int64_t{1} << 36)) return invalid_argument("fp8_gemv: n {} too large", n);
  return dispatch_float(dtype, "fp8_gemv", [&]<typename T>() -> Status {
    if constexpr (sizeof(T) != 2) {
      return invalid_argument("fp8_gemv: f32 activations are not supported");
    } else {
      static_assert(kFp8GemvMaxRows == 8);
      const auto* xb = static_cast<const T*>(x);
      auto* ob = static_cast<T*>(out);
      // Rows past kFp8GemvMaxRows (a GEMM that cuBLASLt would not take) go in chunks of eight.
      for (int64_t r = 0; r < m; r += kFp8GemvMaxRows) {
        const int64_t rows = std::min<int64_t>(kFp8GemvMaxRows, m - r);
        const void* xr = xb + r * k;
        void* outr = ob + r * n;
        const auto launch_rows = [&]() -> Status {
          switch (rows) {
            case 1: return launch_gemv<T, 1>(xr, w, w_scale, bias, outr, n, k, stream);
            case 2: return launch_gemv<T, 2>(xr, w, w_scale, bias, outr, n, k, stream);
            case 3: return launch_gemv<T, 3>(xr, w, w_scale, bias, outr, n, k, stream);
            case 4: return launch_gemv<T, 4>(xr, w, w_scale, bias, outr, n, k, stream);
            case 5: return launch_gemv<T, 5>(xr, w, w_scale, bias, outr, n, k, stream);
            case 6: return launch_gemv<T, 6>(xr, w, w_scale, bias, outr, n, k, stream);
            case 7: return launch_gemv<T, 7>(xr, w, w_scale, bias, outr, n, k, stream);
            default: return launch_gemv<T, 8>(xr, w, w_scale, bias, outr, n, k, stream);
          }
        };
        LS_RETURN_IF_ERROR(launch_rows());
      }
      return Status{};
    }
  });
}

Status quantize_rows_e4m3(const void* x, int64_t m, int64_t k, DType dtype, void* q,
                          float* scales, cudaStream_t stream) {
  if (m <= 0) return {};
  if (k <= 0 || !x || !q || !scales || m > (int64_t{1} << 31) - 1) {
    return invalid_argument("quantize_rows_e4m3: bad arguments (m {}, k {})", m, k);
  }
  return dispatch_float(dtype, "quantize_rows_e4m3", [&]<typename T>() -> Status {
    constexpr int V = kVecElems<T>;
    const auto vec = [&]<int kChunks>() {
      return launch_pdl(quantize_rows_vec_kernel<T, kChunks>, dim3(static_cast<unsigned>(m)),
                        kQuantThreads, 0, stream, "quantize_rows_e4m3", static_cast<const T*>(x), k,
                        static_cast<__nv_fp8_storage_t*>(q), scales);
    };
    if (k % V == 0 && aligned16(x) && reinterpret_cast<uintptr_t>(q) % V == 0) {
      const int64_t chunks = (k / V + kQuantThreads - 1) / kQuantThreads;
      if (chunks <= 2) return vec.template operator()<2>();
      if (chunks <= 4) return vec.template operator()<4>();
      if (chunks <= 8) return vec.template operator()<8>();
    }
    return launch_pdl(quantize_rows_kernel<T>, dim3(static_cast<unsigned>(m)), kQuantThreads, 0,
                      stream, "quantize_rows_e4m3", static_cast<const T*>(x), k,
                      static_cast<__nv_fp8_storage_t*>(q), scales);
  });
}

Status scale_rows_cols(void* out, int64_t m, int64_t n, float factor, const float* row_scale,
                       const float* col_scale, const float* bias, DType dtype,
                       cudaStream_t stream) {
  if (m <= 0 || n <= 0) return {};
  if (!out || !row_scale || !col_scale) return invalid_argument("scale_rows_cols: null pointer");
  return dispatch_float(dtype, "scale_rows_cols", [&]<typename T>() -> Status {
    constexpr int kThreads = 256;
    constexpr int V = kVecElems<T>;
    const int64_t col_blocks = (n / V + kThreads - 1) / kThreads;
    if (n % V == 0 && aligned16(out) && m <= INT32_MAX && col_blocks <= 65535) {
      return launch_pdl(scale_rows_cols_vec_kernel<T>,
                        dim3(static_cast<unsigned>(m), static_cast<unsigned>(col_blocks)), kThreads,
                        0, stream, "scale_rows_cols", static_cast<T*>(out), n, factor, row_scale,
                        col_scale, bias);
    }
    return launch_pdl(scale_rows_cols_kernel<T>, dim3(grid_for(m * n, kThreads)), kThreads, 0,
                      stream, "scale_rows_cols", static_cast<T*>(out), m, n, factor, row_scale,
                      col_scale, bias);
  });
}

}  // namespace ls::kernels::cuda
