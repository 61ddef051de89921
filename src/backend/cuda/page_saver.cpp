#include "backend/cuda/page_saver.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/page_copy.h"

namespace ls {

namespace {

using kernels::cuda::cuda_status;

}  // namespace

Result<std::unique_ptr<PageSaver>> PageSaver::create(const PageSaveOptions& options, int device,
                                                     int num_sms) {
  std::unique_ptr<PageSaver> s(new PageSaver());
  LS_RETURN_IF_ERROR(s->init(options, device, num_sms));
  return s;
}

Status PageSaver::init(const PageSaveOptions& options, int device, int num_sms) {
  if (options.staging_bytes < (int64_t{1} << 20) || options.host_threads < 1) {
    return invalid_argument(
        "page saves: staging_bytes {} must be >= 1 MiB and host_threads {} >= 1",
        options.staging_bytes, options.host_threads);
  }
  options_ = options;
  device_ = device;
  num_sms_ = num_sms;
  half_bytes_ = options.staging_bytes / 2 / 16 * 16;
  int least = 0, greatest = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  LS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, least));
  for (cudaEvent_t& e : half_events_) {
    LS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  if (options.method == PageSaveMethod::kStagedScatter) {
    LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_stage_, static_cast<size_t>(2 * half_bytes_)));
    LS_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&host_stage_, static_cast<size_t>(2 * half_bytes_), cudaHostAllocPortable));
  }
  const size_t index_bytes = sizeof(int32_t) * 4 * kMaxRoundPages;
  void* p = nullptr;
  LS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, index_bytes, cudaHostAllocPortable));
  host_index_ = static_cast<int32_t*>(p);
  LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, index_bytes));
  device_index_ = static_cast<int32_t*>(p);
  std::vector<int32_t> iota(kMaxRoundPages);
  for (int32_t i = 0; i < kMaxRoundPages; ++i) iota[static_cast<size_t>(i)] = i;
  LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, sizeof(int32_t) * kMaxRoundPages));
  device_iota_ = static_cast<int32_t*>(p);
  LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(device_iota_, iota.data(), sizeof(int32_t) * kMaxRoundPages,
                                     cudaMemcpyHostToDevice));
  LS_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&p, sizeof(int32_t), cudaHostAllocPortable | cudaHostAllocMapped));
  error_flag_ = static_cast<int32_t*>(p);
  *error_flag_ = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&p, error_flag_, 0));
  error_flag_device_ = static_cast<int32_t*>(p);
  scatter_pool_ = std::make_unique<ThreadPool>(options.host_threads);
  worker_ = std::thread([this] { worker_loop(); });
  return {};
}

PageSaver::~PageSaver() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();  // the worker drains the queue first
  }
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : half_events_) {
    if (e) cudaEventDestroy(e);
  }
  if (device_stage_) cudaFree(device_stage_);
  if (host_stage_) cudaFreeHost(host_stage_);
  if (host_index_) cudaFreeHost(host_index_);
  if (device_index_) cudaFree(device_index_);
  if (device_iota_) cudaFree(device_iota_);
  if (error_flag_) cudaFreeHost(error_flag_);
  if (stream_) cudaStreamDestroy(stream_);
}

Result<int64_t> PageSaver::save(const kernels::PageCopyParams& p, cudaStream_t after) {
  const int64_t page_set_bytes = p.page_bytes * p.num_arrays;
  if (options_.method == PageSaveMethod::kStagedScatter && page_set_bytes > half_bytes_) {
    return invalid_argument("save_pages: a page set of {} bytes does not fit a staging half ({})",
                            page_set_bytes, half_bytes_);
  }
  Save save;
  save.params = p;
  if (p.num_pages > 0) {
    LS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&save.after, cudaEventDisableTiming));
    const cudaError_t err = cudaEventRecord(save.after, after);
    if (err != cudaSuccess) {
      cudaEventDestroy(save.after);
      return cuda_status(err, "save_pages: cudaEventRecord");
    }
    save.src_pages.assign(p.src_pages, p.src_pages + p.num_pages);
    save.dst_pages.assign(p.dst_pages, p.dst_pages + p.num_pages);
  }
  save.params.src_pages = nullptr;
  save.params.dst_pages = nullptr;
  save.ticket = ++issued_;
  const int64_t ticket = save.ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(save));
  }
  cv_.notify_all();
  return ticket;
}

void PageSaver::worker_loop() {
  cudaSetDevice(device_);
  for (;;) {
    Save save;
    bool have = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && !pending_[0].active && !pending_[1].active) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      }
      if (!queue_.empty()) {
        save = std::move(queue_.front());
        queue_.pop_front();
        have = true;
      } else if (stop_ && !pending_[0].active && !pending_[1].active) {
        return;
      }
    }
    if (have) {
      run_save(save);
    } else {
      // Nothing new to overlap with: complete the rounds in flight, oldest first.
      finish(next_half_);
      finish(next_half_ ^ 1);
    }
  }
}

void PageSaver::run_save(Save& save) {
  const kernels::PageCopyParams& p = save.params;
  if (p.num_pages == 0) {
    finish(next_half_);
    finish(next_half_ ^ 1);
    std::lock_guard<std::mutex> lock(mu_);
    completed_ = save.ticket;
    cv_.notify_all();
    return;
  }
  Status waited =
      cuda_status(cudaStreamWaitEvent(stream_, save.after, 0), "save_pages: cudaStreamWaitEvent");
  cudaEventDestroy(save.after);  // released once the wait is done
  int64_t per_round = kMaxRoundPages;
  if (options_.method == PageSaveMethod::kStagedScatter) {
    per_round = std::min(per_round, half_bytes_ / (p.page_bytes * p.num_arrays));
  }
  for (int32_t first = 0; first < p.num_pages; first += static_cast<int32_t>(per_round)) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(per_round, p.num_pages - first));
    const int half = next_half_;
    next_half_ ^= 1;
    finish(half);  // the round issued two rounds ago
    Round& round = pending_[half];
    round = Round{};
    round.active = true;
    round.ticket = first + n >= p.num_pages ? save.ticket : 0;
    const Status s = waited.ok() ? enqueue_round(save, first, n, half, round) : waited;
    if (!s.ok()) {
      // The half is reused only after whatever reached the stream has finished.
      round.has_event = cudaEventRecord(half_events_[half], stream_) == cudaSuccess;
      round.status = s;
      round.scatter = false;
      round.ticket = save.ticket;
      return;
    }
  }
}

Status PageSaver::enqueue_round(const Save& save, int32_t first, int32_t n, int half,
                                Round& round) {
  const kernels::PageCopyParams& p = save.params;
  const bool staged = options_.method == PageSaveMethod::kStagedScatter;
  int32_t* host_src = host_index_ + static_cast<int64_t>(half) * 2 * kMaxRoundPages;
  int32_t* host_dst = host_src + kMaxRoundPages;
  int32_t* dev_src = device_index_ + static_cast<int64_t>(half) * 2 * kMaxRoundPages;
  int32_t* dev_dst = dev_src + kMaxRoundPages;
  const size_t list_bytes = sizeof(int32_t) * static_cast<size_t>(n);
  std::memcpy(host_src, save.src_pages.data() + first, list_bytes);
  LS_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev_src, host_src, list_bytes, cudaMemcpyHostToDevice, stream_));
  kernels::PageCopyParams g = p;
  g.method = kernels::PageCopyMethod::kGatherKernel;
  g.src_pages = dev_src;
  g.num_pages = n;
  g.max_pages = n;
  g.num_pages_device = nullptr;
  g.max_sms = options_.max_sms;
  char* stage = nullptr;
  if (staged) {
    stage = static_cast<char*>(device_stage_) + half * half_bytes_;
    for (int a = 0; a < p.num_arrays; ++a) g.dst[a] = stage + a * n * p.page_bytes;
    g.dst_stride_bytes = p.page_bytes;
    g.dst_pages = device_iota_;
    g.dst_capacity_pages = 0;
  } else {
    std::memcpy(host_dst, save.dst_pages.data() + first, list_bytes);
    LS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dev_dst, host_dst, list_bytes, cudaMemcpyHostToDevice, stream_));
    g.dst_pages = dev_dst;
  }
  LS_RETURN_IF_ERROR(kernels::cuda::page_copy_gather(g, num_sms_, error_flag_device_, stream_));
  if (staged) {
    char* host = static_cast<char*>(host_stage_) + half * half_bytes_;
    LS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, stage,
                                            static_cast<size_t>(n * p.num_arrays * p.page_bytes),
                                            cudaMemcpyDeviceToHost, stream_));
    round.scatter = true;
    round.num_pages = n;
    round.num_arrays = p.num_arrays;
    round.page_bytes = p.page_bytes;
    round.dst_stride_bytes = p.dst_stride_bytes;
    for (int a = 0; a < p.num_arrays; ++a) round.dst[a] = p.dst[a];
    round.dst_pages.assign(save.dst_pages.begin() + first, save.dst_pages.begin() + first + n);
  }
  LS_CUDA_RETURN_IF_ERROR(cudaEventRecord(half_events_[half], stream_));
  round.has_event = true;
  return {};
}

void PageSaver::finish(int half) {
  Round& round = pending_[half];
  if (!round.active) return;
  Status s = round.status;
  if (round.has_event) {
    const Status e =
        cuda_status(cudaEventSynchronize(half_events_[half]), "save_pages: cudaEventSynchronize");
    if (s.ok()) s = e;
  }
  if (s.ok() && round.scatter) {
    const char* stage = static_cast<const char*>(host_stage_) + half * half_bytes_;
    const int64_t n = round.num_pages;
    scatter_pool_->parallel_for(n * round.num_arrays, 4, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t a = k / n, i = k - a * n;
        char* dst = static_cast<char*>(round.dst[a]) +
                    round.dst_pages[static_cast<size_t>(i)] * round.dst_stride_bytes;
        std::memcpy(dst, stage + k * round.page_bytes, static_cast<size_t>(round.page_bytes));
      }
    });
  }
  if (s.ok() && *reinterpret_cast<volatile int32_t*>(error_flag_) != 0) {
    *reinterpret_cast<volatile int32_t*>(error_flag_) = 0;
    s = invalid_argument("save_pages: the gather kernel skipped pages with out-of-range indices");
  }
  round.active = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (round.ticket > 0) completed_ = round.ticket;
    if (!s.ok() && error_.ok()) error_ = s;
  }
  cv_.notify_all();
}

int64_t PageSaver::completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

void PageSaver::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= issued_; });
}

Status PageSaver::wait(int64_t ticket) {
  if (ticket > issued_) {
    return invalid_argument("wait_saves: ticket {} was never issued ({} so far)", ticket, issued_);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= ticket; });
  Status s = error_;
  error_ = Status{};
  return s;
}

}  // namespace ls
