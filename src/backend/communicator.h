#pragma once
// Collectives between the tensor-parallel ranks of one process (docs/tensor-parallel.md). Each
// rank holds its own Communicator object, bound to its rank's Backend: a collective is enqueued
// in order with that backend's ops (the CUDA stream for NCCL; at once on the CPU), so a rank's
// runner calls it between two ops like any other op, and a recorded decode step records it.
//
// Every rank must call the same collectives in the same order with buffers of the same shape and
// dtype. A rank that fails calls abort() (any rank's object aborts the whole group): collectives
// waiting on it, and later ones, then fail instead of hanging.

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace ls {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  virtual std::string name() const = 0;  // "cpu", "nccl"
  // buf [any shape] f32 | bf16 | f16, contiguous, on this rank's device: becomes the element-wise
  // sum of every rank's buf.
  virtual Status all_reduce_sum(const TensorView& buf) = 0;
  // in [n] elements on every rank; out [size() * n] gets rank r's `in` at [r * n, (r + 1) * n).
  virtual Status all_gather(const TensorView& in, const TensorView& out) = 0;
  // Returns once every rank has called it (and, on a device, once this rank's queued ops have).
  virtual Status barrier() = 0;
  // Fails the group: collectives in flight and later ones return `why` until reset().
  virtual void abort(const std::string& why) = 0;
  // After abort(), once every rank is out of its step and has dropped its recorded steps (CUDA
  // graphs holding the group's collectives): waits until the transport's own teardown is done.
  // abort() itself returns once the waits are ended (NCCL: every communicator's abort flag is
  // set), since that teardown cannot finish while a rank still runs or holds recordings.
  virtual void wait_abort() {}
  // After an abort, once every rank is out of its collectives (the executor knows: all its rank
  // threads returned), makes the group usable again; false when the transport cannot recover
  // (an aborted NCCL communicator is gone).
  virtual bool reset() = 0;
  // An error a collective met while it ran on the device (a peer-to-peer all-reduce whose wait
  // for a peer was aborted or timed out), read once the rank's stream is drained (the runner
  // checks it with the step's other errors, graph replays included); ok when none.
  virtual Status device_error() { return {}; }
};

// How device communicators all-reduce (docs/p2p-all-reduce.md).
struct DeviceCommOptions {
  // auto: the one-shot peer-to-peer kernel for messages up to p2p_max_bytes when every pair of
  // GPUs has peer access, NCCL otherwise; nccl: NCCL only; p2p: as auto, but an error when some
  // pair of GPUs lacks peer access.
  std::string all_reduce = "auto";
  int64_t p2p_max_bytes = int64_t{2} << 20;  // the largest message the kernel takes
  // Two grids (each with its own buffers, so each keeps its own call sequence): messages up to
  // p2p_small_bytes run on p2p_blocks blocks, larger ones on p2p_large_blocks (more blocks pay
  // from about 512 KB on an H200 pair). p2p_small_bytes = 0: one grid, p2p_large_blocks.
  int64_t p2p_small_bytes = int64_t{256} << 10;
  int32_t p2p_blocks = 32;        // 1 .. 64
  int32_t p2p_large_blocks = 64;  // 1 .. 64
  double p2p_timeout_s = 120.0;              // how long a rank's kernel waits for a peer
};

}  // namespace ls
