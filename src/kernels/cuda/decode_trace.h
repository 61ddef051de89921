#pragma once
// Internal to kernels/cuda: per-block timestamps of the decode attention kernels, for profiling
// (AttentionOptions::decode_trace, bench_cuda_kernels --decode-trace, docs/cuda.md). Off (a null
// pointer) in every normal call; one thread per block writes one record at the block's end.

#include <cstdint>

namespace ls::kernels::cuda {

// One record per block of decode_attention_kernel, at trace[linear block index], and per block
// of decode_reduce_kernel, at trace[decode grid blocks + linear block index]. Times are the
// device's global nanosecond timer (comparable across SMs); a phase a block did not reach is 0.
struct DecodeTraceRecord {
  uint64_t start = 0;       // the block began
  uint64_t waited = 0;      // past griddepcontrol.wait (the previous kernel is done)
  uint64_t first_data = 0;  // decode: the first K/V block landed in shared memory
  uint64_t loop_end = 0;    // decode: the last K/V block is computed
  uint64_t end = 0;         // the block's writes are issued
  int32_t smid = -1;
  int32_t iterations = -1;  // decode: 64-key blocks this block computed (-1: it had none)
  int32_t kernel = 0;       // 0 decode, 1 reduce
  int32_t split = 0;        // decode: blockIdx.z
};

// Built with -DLS_DECODE_TRACE_LANDINGS (CUDA and C++ flags; a profiling build, never the
// default): the decode kernel also writes, after the records, kDecodeTraceLandings timestamps per
// decode block (uint64, linear block order): when its key blocks 0, 1, ... were ready to compute.
// bench_cuda_kernels --decode-trace then sizes the buffer for them and prints them as "land" rows.
// Summed over blocks they give the call's consumption rate over time
// (scripts/gpu/decode_timeline.py prints it; docs/history/cuda-decode.md shows what it found).
inline constexpr int kDecodeTraceLandings = 32;

#ifdef __CUDACC__
__device__ __forceinline__ uint64_t trace_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int32_t trace_smid() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return static_cast<int32_t>(id);
}
#endif

}  // namespace ls::kernels::cuda
