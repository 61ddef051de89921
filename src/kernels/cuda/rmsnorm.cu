// RMSNorm and the residual add fused with it. One warp per row for rows of up to 1024 elements
// (per-head q/k norms), one 256-thread block per row beyond. Two passes over the row: the first
// sums squares (and, fused, stores x + residual rounded to the dtype, so the norm sees exactly
// what an unfused add would have stored); the second rescales. Each thread re-reads only the
// elements it wrote, so out may alias x.
// Rows of up to kBlock * 4 vectors (e.g. hidden 4096 at decode) take rmsnorm_cached_kernel: the
// row's vectors and the weights are loaded once, all before the reduction, so a decode-size call
// costs about one memory round trip plus the block reduction; the sums run in the same order,
// so the result is bitwise the same as the two-pass kernel's.

#include "kernels/cuda/check.h"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/elementwise.h"

namespace ls::kernels::cuda {

namespace {

constexpr int kBlock = 256;

template <typename T, int kRowThreads, bool kAdd, bool kVec>
__global__ void __launch_bounds__(kBlock) rmsnorm_kernel(T* x, const T* residual, const float* w,
                                                         float eps, int64_t rows, int dim, T* out) {
  constexpr int kRowsPerBlock = kBlock / kRowThreads;
  constexpr int V = kVec ? kVecElems<T> : 1;
  const int t = static_cast<int>(threadIdx.x) % kRowThreads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock +
                      static_cast<int>(threadIdx.x) / kRowThreads;
  const bool active = row < rows;
  T* xr = x + row * dim;
  const T* rr = kAdd ? residual + row * dim : nullptr;
  T* orow = out + row * dim;

  float ss = 0.0f;
  if (active) {
    for (int i = t * V; i < dim; i += kRowThreads * V) {
      float v[V];
      if constexpr (kVec) {
        load_vec(xr + i, v);
      } else {
        v[0] = to_f32(xr[i]);
      }
      if constexpr (kAdd) {
        float r[V];
        if constexpr (kVec) {
          load_vec(rr + i, r);
        } else {
          r[0] = to_f32(rr[i]);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = to_f32(from_f32<T>(v[j] + r[j]));
        if constexpr (kVec) {
          store_vec(xr + i, v);
        } else {
          xr[i] = from_f32<T>(v[0]);
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) ss = fmaf(v[j], v[j], ss);
    }
  }
  ss = warp_sum(ss);
  if constexpr (kRowThreads > 32) {
    __shared__ float partial[kBlock / 32];
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlock / 32; ++i) ss += partial[i];
  }
  if (!active) return;
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = t * V; i < dim; i += kRowThreads * V) {
    float v[V];
    if constexpr (kVec) {
      load_vec(xr + i, v);
    } else {
      v[0] = to_f32(xr[i]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = __fmul_rn(w[i + j], __fmul_rn(v[j], inv));
    if constexpr (kVec) {
      store_vec(orow + i, v);
    } else {
      orow[i] = from_f32<T>(v[0]);
    }
  }
}

template <typename T, bool kAdd, int kChunks>
__global__ void __launch_bounds__(kBlock)
    rmsnorm_cached_kernel(T* x, const T* residual, const float* w, float eps, int dim, T* out) {
  constexpr int V = kVecElems<T>;
  const int t = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  T* xr = x + row * dim;
  const T* rr = kAdd ? residual + row * dim : nullptr;
  T* orow = out + row * dim;
  float v[kChunks][V], wv[kChunks][V];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = (t + c * kBlock) * V;
    if (i < dim) {
      load_vec(xr + i, v[c]);
#pragma unroll
      for (int j = 0; j < V; ++j) wv[c][j] = w[i + j];
    }
  }
  if constexpr (kAdd) {
    float r[kChunks][V];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int i = (t + c * kBlock) * V;
      if (i < dim) load_vec(rr + i, r[c]);
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int i = (t + c * kBlock) * V;
      if (i < dim) {
#pragma unroll
        for (int j = 0; j < V; ++j) v[c][j] = to_f32(from_f32<T>(v[c][j] + r[c][j]));
        store_vec(xr + i, v[c]);
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = (t + c * kBlock) * V;
    if (i < dim) {
#pragma unroll
      for (int j = 0; j < V; ++j) ss = fmaf(v[c][j], v[c][j], ss);
    }
  }
  ss = warp_sum(ss);
  __shared__ float partial[kBlock / 32];
  if (t % 32 == 0) partial[t / 32] = ss;
  __syncthreads();
  ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlock / 32; ++i) ss += partial[i];
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = (t + c * kBlock) * V;
    if (i < dim) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[c][j] = __fmul_rn(wv[c][j], __fmul_rn(v[c][j], inv));
      store_vec(orow + i, v[c]);
    }
  }
}

template <bool kAdd>
Status launch(void* x, const void* residual, const float* w, float eps, int64_t rows, int64_t dim,
              DType dtype, void* out, cudaStream_t stream) {
  if (rows <= 0) return {};
  if (dim <= 0 || dim > (int64_t{1} << 30) || !x || !w || !out || (kAdd && !residual)) {
    return invalid_argument("rmsnorm: bad arguments (rows {}, dim {})", rows, dim);
  }
  return dispatch_float(dtype, kAdd ? "add_rmsnorm" : "rmsnorm", [&]<typename T>() {
    const bool vec =
        dim % kVecElems<T> == 0 && aligned16(x) && aligned16(out) && (!kAdd || aligned16(residual));
    const auto run = [&]<int kRowThreads, bool kVec>() {
      const int64_t blocks = (rows + kBlock / kRowThreads - 1) / (kBlock / kRowThreads);
      rmsnorm_kernel<T, kRowThreads, kAdd, kVec>
          <<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
              static_cast<T*>(x), static_cast<const T*>(residual), w, eps, rows,
              static_cast<int>(dim), static_cast<T*>(out));
    };
    const bool narrow = dim <= 1024;
    if (!narrow && vec && dim <= int64_t{kBlock} * kVecElems<T> * 4 && rows <= INT32_MAX) {
      const auto cached = [&]<int kChunks>() {
        rmsnorm_cached_kernel<T, kAdd, kChunks><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(
            static_cast<T*>(x), static_cast<const T*>(residual), w, eps, static_cast<int>(dim),
            static_cast<T*>(out));
      };
      if (dim <= int64_t{kBlock} * kVecElems<T> * 2) {
        cached.template operator()<2>();
      } else {
        cached.template operator()<4>();
      }
      return launch_status(kAdd ? "add_rmsnorm" : "rmsnorm");
    }
    if (narrow && vec) run.template operator()<32, true>();
    if (narrow && !vec) run.template operator()<32, false>();
    if (!narrow && vec) run.template operator()<kBlock, true>();
    if (!narrow && !vec) run.template operator()<kBlock, false>();
    return launch_status(kAdd ? "add_rmsnorm" : "rmsnorm");
  });
}

}  // namespace

Status rmsnorm(const void* x, const float* w, float eps, int64_t rows, int64_t dim, DType dtype,
               void* out, cudaStream_t stream) {
  return launch<false>(const_cast<void*>(x), nullptr, w, eps, rows, dim, dtype, out, stream);
}

Status add_rmsnorm(void* x, const void* residual, const float* w, float eps, int64_t rows,
                   int64_t dim, DType dtype, void* out, cudaStream_t stream) {
  return launch<true>(x, residual, w, eps, rows, dim, dtype, out, stream);
}

}  // namespace ls::kernels::cuda
