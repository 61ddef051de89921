#pragma once
// Internal to kernels/cuda: typed launchers of the attention kernels. attention.cu calls them;
// attention_prefill_d*.cu / attention_decode_d*.cu instantiate them, one head_dim per file so the
// heavy instantiations compile in parallel.

#include <cuda_runtime_api.h>

#include <mutex>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/attention_prefill_wgmma.cuh"
#include "kernels/cuda/attention_prefill_wgmma_ws.cuh"
#include "kernels/cuda/check.h"

namespace ls::kernels::cuda {

template <int kD, typename T, int kWarps>
Status launch_prefill(const AttentionParams& p, const PrefillTile* tiles, const int32_t* num_tiles,
                      int32_t max_tiles, int32_t listed_cap, cudaStream_t stream);

// The sm_90a wgmma prefill kernel: 128-row tiles, key blocks of kBN rows.
template <int kD, typename T, int kBN>
Status launch_prefill_wgmma(const AttentionParams& p, const PrefillTile* tiles,
                            const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                            cudaStream_t stream);

// Its warp-specialised variant (head_dim 128; kAuto's choice there).
template <int kD, typename T, int kBN>
Status launch_prefill_wgmma_ws(const AttentionParams& p, const PrefillTile* tiles,
                               const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                               cudaStream_t stream);

// args.cluster_merge: launched in clusters of max_splits blocks along z (the caller checked
// decode_cluster_fits).
template <int kD, typename T>
Status launch_decode(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                     int32_t max_splits, cudaStream_t stream);

// Whether clusters of `cluster` decode blocks (up to kDecodeMaxCluster) can be resident on this
// GPU with the call's shared memory (cudaOccupancyMaxActiveClusters > 0); asked once per size.
template <int kD, typename T>
bool decode_cluster_fits(int32_t cluster);

#ifdef LS_ATTENTION_INSTANTIATE

// Raises the kernel's dynamic shared-memory limit once (to the largest listed_cap) and asks for
// the largest shared-memory carveout, so two blocks of ~110 KB fit on an SM.
template <class Kernel>
Status allow_smem(Kernel kernel, int bytes, std::once_flag& once, cudaError_t& err) {
  std::call_once(once, [&] {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared);
    }
  });
  return cuda_status(err, "cudaFuncSetAttribute(attention, max dynamic shared memory)");
}

template <int kD, typename T, int kWarps>
Status launch_prefill(const AttentionParams& p, const PrefillTile* tiles, const int32_t* num_tiles,
                      int32_t max_tiles, int32_t listed_cap, cudaStream_t stream) {
  using Shape = PrefillShape<kD, kWarps>;
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  LS_RETURN_IF_ERROR(allow_smem(prefill_attention_kernel<kD, T, kWarps>,
                                Shape::template smem_bytes<T>(kMaxListedPages), once, err));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_attention_kernel<kD, T, kWarps>
      <<<grid, Shape::kThreads, Shape::template smem_bytes<T>(listed_cap), stream>>>(
          p, tiles, num_tiles, listed_cap);
  return launch_status("prefill_attention_kernel");
}

template <int kD, typename T, int kBN>
Status launch_prefill_wgmma(const AttentionParams& p, const PrefillTile* tiles,
                            const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                            cudaStream_t stream) {
  using Shape = WgmmaPrefillShape<kD, kBN>;
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  LS_RETURN_IF_ERROR(
      allow_smem(prefill_wgmma_kernel<kD, T, kBN>, Shape::smem_bytes(kMaxListedPages), once, err));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_wgmma_kernel<kD, T, kBN>
      <<<grid, Shape::kThreads, Shape::smem_bytes(listed_cap), stream>>>(p, tiles, num_tiles,
                                                                         listed_cap);
  return launch_status("prefill_wgmma_kernel");
}

template <int kD, typename T, int kBN>
Status launch_prefill_wgmma_ws(const AttentionParams& p, const PrefillTile* tiles,
                               const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                               cudaStream_t stream) {
  using Shape = WgmmaWsShape<kD, kBN>;
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  LS_RETURN_IF_ERROR(allow_smem(prefill_wgmma_ws_kernel<kD, T, kBN>,
                                Shape::smem_bytes(kMaxListedPages), once, err));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_wgmma_ws_kernel<kD, T, kBN>
      <<<grid, Shape::kThreads, Shape::smem_bytes(listed_cap), stream>>>(p, tiles, num_tiles,
                                                                         listed_cap);
  return launch_status("prefill_wgmma_ws_kernel");
}

template <int kD, typename T>
Status allow_decode_smem() {
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  return allow_smem(decode_attention_kernel<kD, T>,
                    DecodeShape<kD>::template smem_bytes<T>(kMaxListedPages), once, err);
}

template <int kD, typename T>
Status launch_decode(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                     int32_t max_splits, cudaStream_t stream) {
  using Shape = DecodeShape<kD>;
  LS_RETURN_IF_ERROR((allow_decode_smem<kD, T>()));
  const dim3 grid(static_cast<unsigned>(items),
                  static_cast<unsigned>(p.num_kv_heads * args.head_chunks),
                  static_cast<unsigned>(max_splits));
  const int smem = Shape::template smem_bytes<T>(args.listed_cap);
  if (!args.cluster_merge) {
    decode_attention_kernel<kD, T><<<grid, kDecodeThreads, smem, stream>>>(p, args);
    return launch_status("decode_attention_kernel");
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kDecodeThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = static_cast<unsigned>(max_splits);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cuda_status(cudaLaunchKernelEx(&cfg, decode_attention_kernel<kD, T>, p, args),
                     "decode_attention_kernel (clusters)");
}

template <int kD, typename T>
bool decode_cluster_fits(int32_t cluster) {
  if (cluster < 2 || cluster > kDecodeMaxCluster) return false;
  // Asked once per cluster size, at the largest shared memory a call may take.
  static std::mutex mu;
  static int fits[kDecodeMaxCluster + 1] = {};  // 0: not asked, 1: fits, -1: does not
  std::lock_guard<std::mutex> lock(mu);
  if (fits[cluster] == 0) {
    fits[cluster] = -1;
    auto kernel = decode_attention_kernel<kD, T>;
    if ((allow_decode_smem<kD, T>()).ok() &&
        (cluster <= 8 ||
         cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
             cudaSuccess)) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1, 1, static_cast<unsigned>(cluster));
      cfg.blockDim = dim3(kDecodeThreads);
      cfg.dynamicSmemBytes =
          static_cast<size_t>(DecodeShape<kD>::template smem_bytes<T>(kMaxListedPages));
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 1;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = static_cast<unsigned>(cluster);
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) == cudaSuccess && n > 0)
        fits[cluster] = 1;
    }
    cudaGetLastError();  // a refused query is an answer, not an error to keep
  }
  return fits[cluster] > 0;
}

#define LS_INSTANTIATE_PREFILL(D, W)                                                               \
  template Status launch_prefill<D, __nv_bfloat16, W>(                                             \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t); \
  template Status launch_prefill<D, __half, W>(const AttentionParams&, const PrefillTile*,         \
                                               const int32_t*, int32_t, int32_t, cudaStream_t);

#define LS_INSTANTIATE_PREFILL_WGMMA(D, BN)                                                        \
  template Status launch_prefill_wgmma<D, __nv_bfloat16, BN>(                                      \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t); \
  template Status launch_prefill_wgmma<D, __half, BN>(                                             \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t);

#define LS_INSTANTIATE_PREFILL_WGMMA_WS(D, BN)                                                     \
  template Status launch_prefill_wgmma_ws<D, __nv_bfloat16, BN>(                                   \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t); \
  template Status launch_prefill_wgmma_ws<D, __half, BN>(                                          \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t);

#define LS_INSTANTIATE_DECODE(D)                                                               \
  template Status launch_decode<D, __nv_bfloat16>(const AttentionParams&, const DecodeArgs&,   \
                                                  int32_t, int32_t, cudaStream_t);             \
  template Status launch_decode<D, __half>(const AttentionParams&, const DecodeArgs&, int32_t, \
                                           int32_t, cudaStream_t);                             \
  template bool decode_cluster_fits<D, __nv_bfloat16>(int32_t);                                \
  template bool decode_cluster_fits<D, __half>(int32_t);

#endif  // LS_ATTENTION_INSTANTIATE

}  // namespace ls::kernels::cuda
