#pragma once
// The in-process CPU Communicator: the ranks are threads of one process sharing a CpuCommGroup;
// collectives meet at a barrier and read each other's buffers. Sums are computed in f32 in rank
// order 0, 1, ..., N-1 on every rank, so every rank gets bit-identical results and a run is
// deterministic. Waits are bounded (timeout) and an abort wakes every waiter.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/communicator.h"

namespace ls {

class CpuCommGroup {
 public:
  // size ranks; a collective waits at most `timeout` for the others.
  explicit CpuCommGroup(int32_t size,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(120000));
  int32_t size() const { return size_; }

  // Waits until all ranks arrived (or abort / timeout: the error).
  Status arrive_and_wait();
  void abort(const std::string& why);
  bool reset();
  // Published per-rank pointers for the collective in progress.
  std::vector<const void*> slots;

 private:
  int32_t size_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int32_t arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::string why_;
};

// `size` communicators of one new group, rank r at [r] (they share the group).
std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(
    int32_t size, std::chrono::milliseconds timeout = std::chrono::milliseconds(120000));

}  // namespace ls
