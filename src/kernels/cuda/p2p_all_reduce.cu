// One-shot all-reduce over peer-to-peer memory (p2p_all_reduce.h, docs/p2p-all-reduce.md).
//
// Work split. The message is cut into 16-byte units (kVecElems<T> elements; the last one may be
// partial). Unit u belongs to thread (u mod (blocks * threads)) of the grid. The split depends only
// on n, the dtype and the grid, which every rank shares, so block b of every rank stages and reads
// exactly the same units: block b waits only for the peers' blocks b (no grid-wide barrier).
//
// One call of block b on rank r:
//   1. c = ++counters[b] (device memory: a graph replay advances it like an eager call);
//   2. stage: its units of buf -> staging[r] half (c & 1);
//   3. __syncthreads(); thread q (q != r) does st.release.sys flags_q[b][r] = c. The barrier
//      orders every thread's staging stores before thread q's release (causality order through
//      bar.sync), and the release at system scope makes them visible to peer q before the flag;
//   4. thread q spins with ld.acquire.sys on its own flags[b][q] until it is >= c, then
//      __syncthreads(): peer q's staged units happen-before every thread's reads below;
//   5. every thread reads its units from all N staging halves (c & 1), sums them in f32 in rank
//      order 0..N-1 and writes the rounded sum over buf (its own input, already staged).
//
// Why one barrier is enough (no barrier after the reads). Rank r's call c + 2 writes the same
// staging half as call c, which peer q's block b may still be reading. But rank r's block b only
// gets past call c + 1 after seeing flags[b][q] >= c + 1, which peer q's block b stores after its
// call c ended (kernels of one stream run in order, and its release covers the earlier kernel's
// reads); rank r's call c + 2 starts after its call c + 1 ended. So peer q's reads of call c
// happen-before rank r's staging of call c + 2. The same chain bounds how far a peer runs ahead:
// peer q cannot store c + 2 into rank r's flags before rank r has stored c + 1 into peer q's,
// which it does only after its wait for c. So a flag is c or c + 1 while rank r waits for c, and
// the wait is "flag - c >= 0" in wrapping u32 arithmetic.
//
// Bounded waits: every 256 polls a waiting thread reads the group's abort word (host-mapped) and
// the global timer; either ends the block's call without reading the peers and records a code.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/p2p_all_reduce.h"

namespace ls::kernels::cuda {

namespace {

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Host-mapped words: relaxed system-scope accesses (no ordering is needed with them).
__device__ __forceinline__ uint32_t load_relaxed_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_relaxed_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits until *flag >= call (wrapping); false when the group was aborted or the peer timed out
// (the code is then in *p.error).
__device__ bool wait_for_peer(const P2pAllReduceParams& p, const uint32_t* flag, uint32_t call,
                              int peer) {
  const uint64_t start = global_timer_ns();
  for (uint32_t polls = 1;; ++polls) {
    if (static_cast<int32_t>(load_acquire_sys(flag) - call) >= 0) return true;
    if ((polls & 255u) != 0) continue;
    // The abort word says why: kP2pErrorAborted from the host, kP2pErrorTimedOut from a rank
    // whose wait timed out; that is the code this rank records too.
    if (const uint32_t why = load_relaxed_sys(p.abort); why != 0) {
      store_relaxed_sys(p.error, (why << 8) | static_cast<uint32_t>(peer));
      return false;
    }
    if (global_timer_ns() - start > p.timeout_ns) {
      store_relaxed_sys(p.error, (kP2pErrorTimedOut << 8) | static_cast<uint32_t>(peer));
      store_relaxed_sys(p.abort, kP2pErrorTimedOut);  // the peers stop waiting for this rank
      return false;
    }
  }
}

// One 16-byte unit of buf: kVecElems<T> elements at e, of which the first `valid` are in the
// message (the others read as zeros); aligned or not.
template <typename T, bool kAligned>
__device__ __forceinline__ uint4 load_unit(const T* e, int64_t valid) {
  if (kAligned && valid >= kVecElems<T>) return *reinterpret_cast<const uint4*>(e);
  union {
    uint4 u;
    T t[kVecElems<T>];
  } w;
  w.u = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < kVecElems<T>; ++i) {
    if (i < valid) w.t[i] = e[i];
  }
  return w.u;
}

// Stores the first `valid` of kVecElems<T> values rounded to T at e.
template <typename T, bool kAligned>
__device__ __forceinline__ void store_unit(T* e, const float (&v)[kVecElems<T>], int64_t valid) {
  if (kAligned && valid >= kVecElems<T>) {
    store_vec(e, v);
    return;
  }
#pragma unroll
  for (int i = 0; i < kVecElems<T>; ++i) {
    if (i < valid) e[i] = from_f32<T>(v[i]);
  }
}

template <typename T, int N, bool kAligned>
__global__ void __launch_bounds__(kP2pThreads)
    p2p_all_reduce_kernel(const P2pAllReduceParams p, T* buf, int64_t n) {
  constexpr int V = kVecElems<T>;
  __shared__ uint32_t s_call;
  __shared__ int s_failed;
  const int b = static_cast<int>(blockIdx.x);
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    s_call = p.counters[b] + 1;
    p.counters[b] = s_call;
    s_failed = 0;
  }
  __syncthreads();
  const uint32_t call = s_call;
  const int64_t half = (call & 1u) ? p.half_bytes : 0;
  const int64_t units = (n + V - 1) / V;  // the last one may be partial
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(b) * blockDim.x + t;

  // 2. Stage this block's units (a partial unit is padded with zeros; the buffer has room for
  // it: half_bytes is a multiple of 16).
  {
    auto* mine = reinterpret_cast<uint4*>(static_cast<char*>(p.staging[p.rank]) + half);
    for (int64_t u = first; u < units; u += stride) {
      mine[u] = load_unit<T, kAligned>(buf + u * V, n - u * V);
    }
  }

  // 3-4. Tell every peer this block's units are staged; wait for theirs.
  __syncthreads();
  if (t < N && t != p.rank) {
    store_release_sys(p.flags[t] + b * kP2pMaxRanks + p.rank, call);
    if (!wait_for_peer(p, p.flags[p.rank] + b * kP2pMaxRanks + t, call, t)) s_failed = 1;
  }
  __syncthreads();
  if (s_failed) return;

  // 5. Sum every rank's copy in rank order. The loads bypass L1 (ld.global.cg): the peers wrote
  // these lines during this kernel, and the compiler must not turn them into read-only loads.
  const uint4* src[N];
#pragma unroll
  for (int q = 0; q < N; ++q) {
    src[q] = reinterpret_cast<const uint4*>(static_cast<const char*>(p.staging[q]) + half);
  }
  for (int64_t u = first; u < units; u += stride) {
    uint4 w[N];
#pragma unroll
    for (int q = 0; q < N; ++q) w[q] = __ldcg(src[q] + u);  // all loads before the first use
    float acc[V];
    load_vec(reinterpret_cast<const T*>(&w[0]), acc);
#pragma unroll
    for (int q = 1; q < N; ++q) {
      float x[V];
      load_vec(reinterpret_cast<const T*>(&w[q]), x);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += x[i];
    }
    store_unit<T, kAligned>(buf + u * V, acc, n - u * V);
  }
}

template <typename T, int N>
void launch(const P2pAllReduceParams& p, T* buf, int64_t n, cudaStream_t stream) {
  if (aligned16(buf)) {
    p2p_all_reduce_kernel<T, N, true><<<p.blocks, kP2pThreads, 0, stream>>>(p, buf, n);
  } else {
    p2p_all_reduce_kernel<T, N, false><<<p.blocks, kP2pThreads, 0, stream>>>(p, buf, n);
  }
}

}  // namespace

Status p2p_all_reduce(const P2pAllReduceParams& p, void* buf, int64_t n, DType dtype,
                      cudaStream_t stream) {
  if (n <= 0) return {};
  if (buf == nullptr) return invalid_argument("p2p_all_reduce: null buffer");
  if (p.ranks != 2 && p.ranks != 4 && p.ranks != 8) {
    return invalid_argument("p2p_all_reduce: {} ranks (2, 4 or 8)", p.ranks);
  }
  if (p.rank < 0 || p.rank >= p.ranks || p.blocks < 1 || p.blocks > kP2pMaxBlocks) {
    return invalid_argument("p2p_all_reduce: rank {} of {}, {} blocks (1 .. {})", p.rank, p.ranks,
                            p.blocks, kP2pMaxBlocks);
  }
  if (p.half_bytes % 16 != 0) {
    return invalid_argument("p2p_all_reduce: the staging half ({} bytes) must be a multiple of 16",
                            p.half_bytes);
  }
  if (dtype_nbytes(dtype, n) > p.half_bytes) {
    return invalid_argument("p2p_all_reduce: {} bytes exceed the {}-byte staging buffer",
                            dtype_nbytes(dtype, n), p.half_bytes);
  }
  return dispatch_float(dtype, "p2p_all_reduce", [&]<typename T>() {
    T* b = static_cast<T*>(buf);
    switch (p.ranks) {
      case 2:
        launch<T, 2>(p, b, n, stream);
        break;
      case 4:
        launch<T, 4>(p, b, n, stream);
        break;
      default:
        launch<T, 8>(p, b, n, stream);
        break;
    }
    return launch_status("p2p_all_reduce");
  });
}

}  // namespace ls::kernels::cuda
