#pragma once
// One-shot all-reduce over peer-to-peer memory for small messages (docs/p2p-all-reduce.md): the
// ranks are GPUs of one process with peer access enabled between every pair. Each rank's kernel
// stages its input in its own staging buffer, meets its peers at a flag barrier, then reads every
// rank's staged copy over NVLink and sums them in f32 in rank order 0, 1, ..., N-1 (so every
// rank gets the same bits), writing the sum over its input.
//
// Replayable in a CUDA graph: the flag value of a call is a per-block counter kept in device
// memory (counters[b] += 1 by block b), not a host value baked into the graph. The staging
// buffer alternates between two halves by call parity, which is why one barrier per call
// suffices (the proof is in p2p_all_reduce.cu).
//
// Waits are bounded: a waiting block polls the group's abort word (host-mapped, set by
// Communicator::abort) and a timeout; either ends the call without reading the peers, records
// a code in the rank's error word and (on a timeout) sets the abort word so that the peers end
// too. After that the group is out of step and must not be used again.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ls::kernels::cuda {

inline constexpr int kP2pMaxRanks = 8;
inline constexpr int kP2pMaxBlocks = 64;
inline constexpr int kP2pThreads = 512;

// Codes in the abort word, and in a rank's error word as (code << 8) | the peer it waited for.
inline constexpr uint32_t kP2pErrorAborted = 1;   // the host aborted the group
inline constexpr uint32_t kP2pErrorTimedOut = 2;  // some rank's wait for a peer passed timeout_ns

struct P2pAllReduceParams {
  int32_t ranks = 0;  // 2, 4 or 8
  int32_t rank = 0;
  int32_t blocks = 0;  // the grid: the same on every rank, 1 .. kP2pMaxBlocks
  // Rank p's staging buffer: [2][half_bytes] bytes on device p (two halves, by call parity).
  void* staging[kP2pMaxRanks] = {};
  // Rank p's flags: [kP2pMaxBlocks][kP2pMaxRanks] u32 on device p; flags[b][q] is the last call
  // whose block b peer q has staged. Written by the peers (st.release.sys), read by rank p.
  uint32_t* flags[kP2pMaxRanks] = {};
  uint32_t* counters = nullptr;  // [kP2pMaxBlocks] u32 on this rank's device: calls per block
  uint32_t* abort = nullptr;     // [1] u32, host-mapped, shared by the group: nonzero = aborted
  uint32_t* error = nullptr;     // [1] u32, host-mapped, this rank's: 0, or a code above
  int64_t half_bytes = 0;        // the largest message in bytes, a multiple of 16
  uint64_t timeout_ns = 0;       // how long a block waits for a peer before giving up
};

// buf [n] dtype (f32 | bf16 | f16) on this rank's device, n * size <= half_bytes; any alignment.
// Every rank must call with the same n and dtype, in the same order of calls.
Status p2p_all_reduce(const P2pAllReduceParams& p, void* buf, int64_t n, DType dtype,
                      cudaStream_t stream);

}  // namespace ls::kernels::cuda
