#pragma once
// Paged attention on the GPU for a mixed batch (prefill chunks and decode tokens), following the
// plan in AttentionParams (kernels/paged_kv.h), with the semantics of kernels/cpu/attention:
// every output row written, a row with no visible key is 0, only visible head-pages are read.
//
// Routing, decided from host-known sizes only (so a call never synchronises and can be captured
// in a CUDA graph):
//  - num_tokens == num_seqs (a decode step): the split-K decode kernel serves every token, then
//    a reduction kernel merges the splits;
//  - otherwise: a one-block plan kernel lists 16*warps-row query tiles of the sequences with
//    q_len >= 2 (longest positions first), the prefill kernel runs them, and the decode kernel
//    serves the sequences with q_len == 1.
// Two prefill kernels compute the same thing: the wgmma one (sm_90a, FlashAttention-3 style,
// 128-row tiles; head_dim 64 and 128) and the mma.sync one (every head_dim, 64- or 128-row
// tiles). AttentionOptions::prefill_kernel picks; auto takes wgmma where it applies.
// Supported: head_dim 16, 32, 64, 96, 128; q/out and both pools in one dtype, bf16 or f16;
// max_selected and num_sink_pages at most 1024; q, out and pools 16-byte aligned.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/decode_trace.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cuda {

enum class PrefillKernel : int32_t {
  // head_dim 128: the warp-specialised wgmma kernel (quantized pages too); 64: wgmma (quantized
  // pages: mma); else mma
  kAuto = 0,
  kMma = 1,    // the mma.sync kernel (prefill_warps applies)
  kWgmma = 2,  // the wgmma kernel; paged_attention rejects head dims it does not cover
  // The warp-specialised wgmma kernel (producer warpgroup + mbarriers, K/V by TMA on long spans;
  // head_dim 128, key blocks of 64, wgmma_key_block ignored): kAuto's choice for head_dim 128,
  // where it is the fastest of the three (H100: 392-401 TFLOP/s against 347-377 for kWgmma at
  // 8K-128K tokens).
  kWgmmaWs = 3,
  // kWgmmaWs with FlashAttention-3's ping-pong scheduling: the two consumer warpgroups issue
  // their wgmmas in turns (named barriers), so one's softmax overlaps the other's GEMMs. Head_dim
  // 64 and 128, key blocks of 64 (wgmma_key_block ignored). Opt-in: about 4% slower than
  // kWgmmaWs on an H200 at 8K-32K tokens, where shared-memory bandwidth, not the softmax, bounds
  // both (docs/cuda-prefill-wgmma.md).
  kWgmmaPingPong = 4,
};

struct AttentionOptions {
  PrefillKernel prefill_kernel = PrefillKernel::kAuto;
  // Key rows per block of the wgmma prefill kernel: 64 or 128.
  int wgmma_key_block = 128;
  // K/V stages of kWgmmaPingPong: 2, or 3 at head_dim 128 (a third stage
  // lets the producer run one more key block ahead of the lagging consumer warpgroup).
  int wgmma_ws_stages = 2;
  // kWgmmaWs and kWgmmaPingPong load K/V blocks by TMA where the pool allows (bf16 / f16 pages
  // of at least 8 tokens that divide or are a multiple of 64; kv_tma_maps.h), and with cp.async
  // where it does not and for blocks with rows past the context; false: cp.async everywhere
  // (to compare).
  bool prefill_tma = true;
  // Query tiles whose span has fewer 64-key blocks than this keep the cp.async producer.
  int prefill_tma_min_blocks = 128;
  // Warps per block of the mma prefill kernel: 4 (64-row query tiles, two blocks per SM) or 8
  // (128-row tiles, head_dim >= 64). 8 measured 10-24% faster on an H100 at 8K-128K tokens, d 128
  // (bench/results/gpu/h100.jsonl).
  int prefill_warps = 8;
  // Decode splits per (token, kv head): 0 picks them from the rows and the SMs (with few rows
  // one wave of blocks, four when the call passes page selections; two waves for many rows;
  // attention.cu's layout_for).
  int max_splits = 0;
  // A decode split covers at least this many 64-key blocks (quantized pages: blocks of
  // 128 keys, attention_decode.cuh's kDecodeQuantKeys). 0: max(2, 16 / splits), so with few
  // splits (large batches) short rows such as streaming heads' are not cut into blocks far
  // smaller than the long rows' (H100, lserve batch 32: 117 us per call against 126 with 2).
  int min_blocks_per_split = 0;
  // Decode blocks prefetch each 64-key block's K/V rows into L2 one block before copying them
  // (more DRAM reads in flight without more shared memory); 0: the cp.async pipeline alone.
  // Float pages only: the kernel over quantized pages never prefetches (attention_decode.cuh).
  // -1 (auto): on where the device's peak DRAM bandwidth is below kL2PrefetchMaxDramBytesPerS
  // (an H100 SXM's 3.35 TB/s: the prefetch made its decode copy-bound), off above (an H200's
  // 4.9 TB/s, where each byte crossing L2 twice cost more than the extra reads in flight gave).
  int decode_l2_prefetch = -1;
  static constexpr double kL2PrefetchMaxDramBytesPerS = 4e12;
  // 64-key blocks (0..4) whose rows a decode block prefetches into L2 before waiting for the
  // previous kernel (with decode_l2_prefetch). 1, because every block asking for four blocks at
  // once made each block's first one arrive last (H100, lserve batch 8 at 128K: 37.4 us per call
  // with 1 against 38.4 with 4).
  int decode_prewait_prefetch = 1;
  // Ticketed decode splits: after its first four 64-key blocks, each split of a row draws the
  // row's remaining blocks decode_chunk_blocks at a time from a ticket counter the row's splits
  // share, so splits whose loads are served slowly take fewer blocks instead of finishing last
  // (a small kernel clears the counters first). Which split reads which block then depends on
  // timing, so the output's rounding differs from run to run (not bit-reproducible): hence off
  // by default. 1: on; 0: every split takes a fixed share of its row; -1: on for calls with page
  // selections and at least 64 (token, kv head) rows, since tickets lose on a single sequence
  // and without selections (H100: lserve batch 1 15.5 us per call against 11.3, dense batch 8
  // at 8K 106.7 against 104.5). Against the fixed-splits kernel, which has its own instantiation
  // without the ticket code, they do not pay anywhere (lserve batch 8 at 128K 37.9 us against
  // 37.8 fixed, batch 32 117.5 against 115.6); the measurements: docs/history/cuda-decode.md.
  int decode_ticketed_splits = 0;
  int decode_chunk_blocks = 1;
  // Run every sequence (q_len 1 included) through the prefill kernel; for tests and benchmarks.
  bool prefill_only = false;
  // Profiling: per-block timestamps of the decode kernels (decode_trace_records entries, see
  // decode_trace.h). Null in every normal call.
  DecodeTraceRecord* decode_trace = nullptr;
};

// Entries decode_trace needs for a call with these sizes: the decode blocks, then the reduction
// blocks (0 when the call runs no decode kernel).
int64_t decode_trace_records(const AttentionParams& p, int num_sms,
                             const AttentionOptions& options = {});

// Device scratch bytes paged_attention needs for a call with these host-known sizes.
int64_t attention_workspace_bytes(const AttentionParams& p, int num_sms,
                                  const AttentionOptions& options = {});

// What decode_l2_prefetch = -1 means on the current device: whether its peak DRAM bandwidth
// (memory clock x 2 x bus width, asked once per device) is below kL2PrefetchMaxDramBytesPerS.
bool decode_l2_prefetch_pays();

// Enqueues the attention of `p` on `stream`. `workspace` (device memory of at least
// attention_workspace_bytes) is scratch, free again when the stream passes this call.
Status paged_attention(const AttentionParams& p, void* workspace, int64_t workspace_bytes,
                       int num_sms, cudaStream_t stream, const AttentionOptions& options = {});

}  // namespace ls::kernels::cuda
