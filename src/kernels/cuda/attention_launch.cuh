#pragma once
// Internal to kernels/cuda: typed launchers of the attention kernels. attention.cu calls them;
// attention_prefill_d*.cu / attention_decode_d*.cu instantiate them, one head_dim per file so the
// heavy instantiations compile in parallel.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/attention_prefill_wgmma.cuh"
#include "kernels/cuda/attention_prefill_wgmma_ws.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/pdl_launch.cuh"

namespace ls::kernels::cuda {

template <int kD, typename T, int kWarps>
Status launch_prefill(const AttentionParams& p, const PrefillTile* tiles, const int32_t* num_tiles,
                      int32_t max_tiles, int32_t listed_cap, cudaStream_t stream);

// The sm_90a wgmma prefill kernel: 128-row tiles, key blocks of kBN rows.
template <int kD, typename T, int kBN>
Status launch_prefill_wgmma(const AttentionParams& p, const PrefillTile* tiles,
                            const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                            cudaStream_t stream);

// Its warp-specialised variant (head_dim 128; kAuto's choice there); kPingPong: with the two
// consumer warpgroups' wgmmas issued in turns (PrefillKernel::kWgmmaPingPong; head_dim 64, 128);
// kStages K/V stages; use_tma: K/V blocks by TMA where the pool allows (kv_tma_maps.h) and the
// span has at least tma_min_blocks key blocks, else cp.async only. kQ != kNone: the pools hold
// quantized pages, which the producer dequantizes into the tiles (no TMA).
template <int kD, typename T, int kBN, bool kPingPong, int kStages, KvQuant kQ = KvQuant::kNone>
Status launch_prefill_wgmma_ws(const AttentionParams& p, const PrefillTile* tiles,
                               const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                               bool use_tma, int32_t tma_min_blocks, cudaStream_t stream);

template <int kD, typename T>
Status launch_decode(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                     int32_t max_splits, cudaStream_t stream);

// The mma.sync prefill kernel over quantized pages: head_dim 64 and 128, 4 or 8 warps.
template <int kD, typename T, int kWarps>
Status launch_prefill_quant(const AttentionParams& p, const PrefillTile* tiles,
                            const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                            KvQuant quant, cudaStream_t stream);

// The decode kernel's quantized instantiations (attention_decode.cuh, the same pipeline as
// launch_decode's over fp8 / int8 / int4 pages): head_dim 64 and 128, kDecodeQuantKeys keys
// per iteration.
template <int kD, typename T>
Status launch_decode_quant(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                           int32_t max_splits, KvQuant quant, cudaStream_t stream);

#ifdef LS_ATTENTION_INSTANTIATE

// Once per device and kernel: a function attribute belongs to one device, and tensor
// parallelism launches the same kernels on several GPUs (docs/tensor-parallel.md).
struct PerDeviceOnce {
  std::mutex mu;
  uint64_t done = 0;         // bit d: device d has the attribute
  cudaError_t err[64] = {};  // each device's result
};

// Raises the kernel's dynamic shared-memory limit once per device (to the largest listed_cap)
// and asks for the largest shared-memory carveout, so two blocks of ~110 KB fit on an SM.
template <class Kernel>
Status allow_smem(Kernel kernel, int bytes, PerDeviceOnce& once) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess && device >= 0 && device < 64) {
    std::lock_guard<std::mutex> lock(once.mu);
    if (((once.done >> device) & 1u) == 0) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (err == cudaSuccess) {
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
      }
      once.err[device] = err;
      once.done |= uint64_t{1} << device;
    }
    err = once.err[device];
  }
  return cuda_status(err, "cudaFuncSetAttribute(attention, max dynamic shared memory)");
}

template <int kD, typename T, int kWarps>
Status launch_prefill(const AttentionParams& p, const PrefillTile* tiles, const int32_t* num_tiles,
                      int32_t max_tiles, int32_t listed_cap, cudaStream_t stream) {
  using Shape = PrefillShape<kD, kWarps>;
  static PerDeviceOnce once;
  LS_RETURN_IF_ERROR(allow_smem(prefill_attention_kernel<kD, T, kWarps>,
                                Shape::template smem_bytes<T>(kMaxListedPages), once));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_attention_kernel<kD, T, kWarps>
      <<<grid, Shape::kThreads, Shape::template smem_bytes<T>(listed_cap), stream>>>(
          p, tiles, num_tiles, listed_cap);
  return launch_status("prefill_attention_kernel");
}

template <int kD, typename T, int kWarps, KvQuant kQ>
Status launch_prefill_quant_kernel(const AttentionParams& p, const PrefillTile* tiles,
                                   const int32_t* num_tiles, int32_t max_tiles,
                                   int32_t listed_cap, cudaStream_t stream) {
  using Shape = PrefillShape<kD, kWarps>;
  static PerDeviceOnce once;
  LS_RETURN_IF_ERROR(allow_smem(prefill_attention_kernel<kD, T, kWarps, kQ>,
                                Shape::template smem_bytes<T>(kMaxListedPages), once));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_attention_kernel<kD, T, kWarps, kQ>
      <<<grid, Shape::kThreads, Shape::template smem_bytes<T>(listed_cap), stream>>>(
          p, tiles, num_tiles, listed_cap);
  return launch_status("prefill_attention_kernel (quantized pages)");
}

template <int kD, typename T, int kWarps>
Status launch_prefill_quant(const AttentionParams& p, const PrefillTile* tiles,
                            const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                            KvQuant quant, cudaStream_t stream) {
  switch (quant) {
    case KvQuant::kFp8:
      return launch_prefill_quant_kernel<kD, T, kWarps, KvQuant::kFp8>(p, tiles, num_tiles,
                                                                       max_tiles, listed_cap, stream);
    case KvQuant::kInt8:
      return launch_prefill_quant_kernel<kD, T, kWarps, KvQuant::kInt8>(
          p, tiles, num_tiles, max_tiles, listed_cap, stream);
    case KvQuant::kInt4:
      return launch_prefill_quant_kernel<kD, T, kWarps, KvQuant::kInt4>(
          p, tiles, num_tiles, max_tiles, listed_cap, stream);
    default:
      return invalid_argument("attention: no quantized prefill kernel for format {}",
                              static_cast<int>(quant));
  }
}

template <int kD, typename T, int kBN>
Status launch_prefill_wgmma(const AttentionParams& p, const PrefillTile* tiles,
                            const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                            cudaStream_t stream) {
  using Shape = WgmmaPrefillShape<kD, kBN>;
  static PerDeviceOnce once;
  LS_RETURN_IF_ERROR(
      allow_smem(prefill_wgmma_kernel<kD, T, kBN>, Shape::smem_bytes(kMaxListedPages), once));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_wgmma_kernel<kD, T, kBN>
      <<<grid, Shape::kThreads, Shape::smem_bytes(listed_cap), stream>>>(p, tiles, num_tiles,
                                                                         listed_cap);
  return launch_status("prefill_wgmma_kernel");
}

template <int kD, typename T, int kBN, bool kPingPong, int kStages, KvQuant kQ>
Status launch_prefill_wgmma_ws(const AttentionParams& p, const PrefillTile* tiles,
                               const int32_t* num_tiles, int32_t max_tiles, int32_t listed_cap,
                               bool use_tma, int32_t tma_min_blocks, cudaStream_t stream) {
  using Shape = WgmmaWsShape<kD, kBN, kStages, WsQuantStaging<kD, kQ>::kBytes>;
  static PerDeviceOnce once;
  LS_RETURN_IF_ERROR(allow_smem(prefill_wgmma_ws_kernel<kD, T, kBN, kPingPong, kStages, kQ>,
                                Shape::smem_bytes(kMaxListedPages), once));
  KvTmaMaps maps;
  LS_RETURN_IF_ERROR(make_kv_tma_maps(p, use_tma, tma_min_blocks, maps));
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(max_tiles));
  prefill_wgmma_ws_kernel<kD, T, kBN, kPingPong, kStages, kQ>
      <<<grid, Shape::kThreads, Shape::smem_bytes(listed_cap), stream>>>(p, maps, tiles, num_tiles,
                                                                         listed_cap);
  return launch_status(kQ != KvQuant::kNone ? "prefill_wgmma_ws_kernel (quantized pages)"
                       : kPingPong          ? "prefill_wgmma_ws_kernel (ping-pong)"
                                            : "prefill_wgmma_ws_kernel");
}

template <int kD, typename T, bool kTicketed, bool kTiered, KvQuant kQ = KvQuant::kNone,
          int kQuantKeys = kDecodeQuantKeys>
Status launch_decode_kernel(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                            int32_t max_splits, cudaStream_t stream) {
  using Shape = DecodeShape<kD, kQ, kQuantKeys>;
  constexpr auto kernel = decode_attention_kernel<kD, T, kTicketed, kTiered, kQ, kQuantKeys>;
  static PerDeviceOnce once;
  LS_RETURN_IF_ERROR(allow_smem(kernel, Shape::template smem_bytes<T>(kMaxListedPages), once));
  const dim3 grid(static_cast<unsigned>(items),
                  static_cast<unsigned>(p.num_kv_heads * args.head_chunks),
                  static_cast<unsigned>(max_splits));
  return launch_pdl(kernel, grid, kDecodeThreads,
                    static_cast<size_t>(Shape::template smem_bytes<T>(args.listed_cap)), stream,
                    kQ == KvQuant::kNone ? "decode_attention_kernel"
                                         : "decode_attention_kernel (quantized pages)",
                    p, args);
}

// The ticketed-splits kernel when the call has ticket counters, else the fixed-splits one; the
// tiered instantiation when the retrieval pool is the tier's page cache.
template <int kD, typename T>
Status launch_decode(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                     int32_t max_splits, cudaStream_t stream) {
  const bool tiered = p.retrieval.page_slot != nullptr;
  if (args.row_tickets != nullptr) {
    return tiered ? launch_decode_kernel<kD, T, true, true>(p, args, items, max_splits, stream)
                  : launch_decode_kernel<kD, T, true, false>(p, args, items, max_splits, stream);
  }
  return tiered ? launch_decode_kernel<kD, T, false, true>(p, args, items, max_splits, stream)
                : launch_decode_kernel<kD, T, false, false>(p, args, items, max_splits, stream);
}

// Quantized pages always take fixed splits (kTicketed false): ticketed splits are an opt-in
// benchmark variant (AttentionOptions::decode_ticketed_splits), not worth three more
// instantiations per format; a call with ticket counters just leaves them unused.
template <int kD, typename T, KvQuant kQ>
Status launch_decode_quant_kernel(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                                  int32_t max_splits, cudaStream_t stream) {
  return p.retrieval.page_slot != nullptr
             ? launch_decode_kernel<kD, T, false, true, kQ>(p, args, items, max_splits, stream)
             : launch_decode_kernel<kD, T, false, false, kQ>(p, args, items, max_splits, stream);
}

template <int kD, typename T>
Status launch_decode_quant(const AttentionParams& p, const DecodeArgs& args, int32_t items,
                           int32_t max_splits, KvQuant quant, cudaStream_t stream) {
  switch (quant) {
    case KvQuant::kFp8:
      return launch_decode_quant_kernel<kD, T, KvQuant::kFp8>(p, args, items, max_splits, stream);
    case KvQuant::kInt8:
      return launch_decode_quant_kernel<kD, T, KvQuant::kInt8>(p, args, items, max_splits, stream);
    case KvQuant::kInt4:
      return launch_decode_quant_kernel<kD, T, KvQuant::kInt4>(p, args, items, max_splits, stream);
    default:
      return invalid_argument("attention: no quantized decode kernel for format {}",
                              static_cast<int>(quant));
  }
}

#define LS_INSTANTIATE_DECODE_QUANT(D)                                                     \
  template Status launch_decode_quant<D, __nv_bfloat16>(                                   \
      const AttentionParams&, const DecodeArgs&, int32_t, int32_t, KvQuant, cudaStream_t); \
  template Status launch_decode_quant<D, __half>(const AttentionParams&, const DecodeArgs&, \
                                                 int32_t, int32_t, KvQuant, cudaStream_t);

#define LS_INSTANTIATE_PREFILL(D, W)                                                               \
  template Status launch_prefill<D, __nv_bfloat16, W>(                                             \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t); \
  template Status launch_prefill<D, __half, W>(const AttentionParams&, const PrefillTile*,         \
                                               const int32_t*, int32_t, int32_t, cudaStream_t);

#define LS_INSTANTIATE_PREFILL_QUANT(D, W)                                                     \
  template Status launch_prefill_quant<D, __nv_bfloat16, W>(                                   \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, KvQuant,   \
      cudaStream_t);                                                                           \
  template Status launch_prefill_quant<D, __half, W>(const AttentionParams&, const PrefillTile*, \
                                                     const int32_t*, int32_t, int32_t, KvQuant,  \
                                                     cudaStream_t);

#define LS_INSTANTIATE_PREFILL_WGMMA(D, BN)                                                        \
  template Status launch_prefill_wgmma<D, __nv_bfloat16, BN>(                                      \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t); \
  template Status launch_prefill_wgmma<D, __half, BN>(                                             \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, cudaStream_t);

#define LS_INSTANTIATE_PREFILL_WGMMA_WS(D, BN, PP, ST)                                             \
  template Status launch_prefill_wgmma_ws<D, __nv_bfloat16, BN, PP, ST>(                           \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, bool, int32_t, \
      cudaStream_t);                                                                               \
  template Status launch_prefill_wgmma_ws<D, __half, BN, PP, ST>(                                  \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, bool, int32_t, \
      cudaStream_t);

#define LS_INSTANTIATE_PREFILL_WGMMA_WS_QUANT(D, Q)                                               \
  template Status launch_prefill_wgmma_ws<D, __nv_bfloat16, 64, false, 2, Q>(                      \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, bool, int32_t, \
      cudaStream_t);                                                                               \
  template Status launch_prefill_wgmma_ws<D, __half, 64, false, 2, Q>(                             \
      const AttentionParams&, const PrefillTile*, const int32_t*, int32_t, int32_t, bool, int32_t, \
      cudaStream_t);

#define LS_INSTANTIATE_DECODE(D)                                                               \
  template Status launch_decode<D, __nv_bfloat16>(const AttentionParams&, const DecodeArgs&,   \
                                                  int32_t, int32_t, cudaStream_t);             \
  template Status launch_decode<D, __half>(const AttentionParams&, const DecodeArgs&, int32_t, \
                                           int32_t, cudaStream_t);

#endif  // LS_ATTENTION_INSTANTIATE

}  // namespace ls::kernels::cuda
