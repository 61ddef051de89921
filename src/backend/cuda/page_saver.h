#pragma once
// Background page saves of the CUDA backend (Backend::save_pages): new full KV pages reach their
// host home on a low-priority side stream, so the compute queued after a save never waits for it.
// Two methods, chosen by PageSaveOptions (the benchmark compares them):
//  - kStagedScatter (SparseServe's FlashD2H): the gather kernel packs the pages into a contiguous
//    device staging half (a short device-to-device pass), one cudaMemcpyAsync moves the half to
//    pinned host staging, and host threads scatter it into the destination pages. PCIe is crossed
//    by the copy engine, not by SMs, so compute loses only the short pack.
//  - kGatherKernel: the gather kernel writes the destination pages in pinned host memory directly
//    (through unified virtual addressing) on at most max_sms SMs for the whole transfer.
// save() only checks, copies the index lists and marks the caller's stream position with an
// event, so it never blocks. A worker thread makes the side stream wait for that event and moves
// each save in rounds of at most one staging half; the two halves alternate, so the GPU fills
// one while the worker scatters the other, and tickets complete in order.

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/page_copy.h"

namespace ls {

enum class PageSaveMethod : int32_t {
  kStagedScatter = 0,  // pack on the GPU, one D2H memcpy, host threads scatter (default)
  kGatherKernel = 1,   // the gather kernel writes pinned host pages directly
};

struct PageSaveOptions {
  PageSaveMethod method = PageSaveMethod::kStagedScatter;
  int32_t max_sms = 8;  // blocks of the pack (kStagedScatter) or save (kGatherKernel) kernel
  int64_t staging_bytes = int64_t{128} << 20;  // kStagedScatter: device + pinned, two halves each
  int32_t host_threads = 4;                    // kStagedScatter: threads scattering a half
};

class PageSaver {
 public:
  // Allocates the staging buffers and starts the worker; num_sms: the device's SM count.
  static Result<std::unique_ptr<PageSaver>> create(const PageSaveOptions& options, int device,
                                                   int num_sms);
  ~PageSaver();  // waits for every save
  PageSaver(const PageSaver&) = delete;
  PageSaver& operator=(const PageSaver&) = delete;

  const PageSaveOptions& options() const { return options_; }
  // Backend::save_pages: params checked by the caller except what only the saver knows (sizes
  // that fit a staging half); `after` is the stream whose queued work the save must follow.
  Result<int64_t> save(const kernels::PageCopyParams& params, cudaStream_t after);
  int64_t completed();
  Status wait(int64_t ticket);
  int64_t issued() const { return issued_; }
  // Blocks until every save issued so far has finished (errors stay for wait()).
  void drain();

  // Index capacity of a round (pages per staging half).
  static constexpr int32_t kMaxRoundPages = 16384;

 private:
  struct Save {
    kernels::PageCopyParams params;             // pointers as the GPU and the host threads use them
    std::vector<int32_t> src_pages, dst_pages;  // [num_pages] copies of the caller's lists
    int64_t ticket = 0;
    cudaEvent_t after = nullptr;  // the caller's stream position at save()
  };
  struct Round {
    bool active = false;
    bool has_event = false;  // false: failed before reaching the GPU
    Status status;
    int64_t ticket = 0;  // > 0 on a save's last round
    bool scatter = false;
    int32_t num_pages = 0;
    int32_t num_arrays = 1;
    int64_t page_bytes = 0;
    int64_t dst_stride_bytes = 0;
    void* dst[kernels::kMaxPageArrays] = {};
    std::vector<int32_t> dst_pages;  // [num_pages]
  };

  PageSaver() = default;
  Status init(const PageSaveOptions& options, int device, int num_sms);
  // Moves one save's rounds through the halves (the worker thread).
  void run_save(Save& save);
  // One round: pages [first, first + n) of `save` into staging half `half`.
  Status enqueue_round(const Save& save, int32_t first, int32_t n, int half, Round& round);
  // Waits for the round pending on `half`, scatters it and completes its ticket.
  void finish(int half);
  void worker_loop();

  PageSaveOptions options_;
  int device_ = 0;
  int num_sms_ = 0;
  int64_t half_bytes_ = 0;
  cudaStream_t stream_ = nullptr;  // low priority
  cudaEvent_t half_events_[2] = {nullptr, nullptr};
  void* device_stage_ = nullptr;     // [2, half_bytes_] bytes (kStagedScatter)
  void* host_stage_ = nullptr;       // [2, half_bytes_] bytes pinned (kStagedScatter)
  int32_t* host_index_ = nullptr;    // [2, 2, kMaxRoundPages] i32 pinned: per half src, dst lists
  int32_t* device_index_ = nullptr;  // [2, 2, kMaxRoundPages] i32
  int32_t* device_iota_ = nullptr;   // [kMaxRoundPages] i32: 0, 1, 2, ...
  int32_t* error_flag_ = nullptr;    // [1] i32 mapped pinned: the gather kernel's index errors
  int32_t* error_flag_device_ = nullptr;  // its device address
  int64_t issued_ = 0;                    // tickets handed out (caller thread only)

  // Worker thread only.
  std::unique_ptr<ThreadPool> scatter_pool_;
  Round pending_[2];
  int next_half_ = 0;

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Save> queue_;  // guarded by mu_
  int64_t completed_ = 0;   // guarded by mu_
  Status error_;            // first failure since the last wait(); guarded by mu_
  bool stop_ = false;       // guarded by mu_
};

}  // namespace ls
