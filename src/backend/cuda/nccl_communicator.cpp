#include "backend/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/log.h"

namespace ls {

namespace {

// The communicators of one group, destroyed together (or aborted together).
struct NcclGroup {
  std::vector<ncclComm_t> comms;
  std::vector<int> devices;  // [ranks] comms[r]'s device
  std::mutex mu;
  std::atomic<bool> aborted{false};
  // Rank threads inside an NCCL host call on one of `comms` (NcclCommunicator::call): counted
  // before they test `aborted`, so the teardown never frees a communicator under one of them.
  std::atomic<int> host_calls{0};
  std::string why;
  std::vector<std::thread> aborters;  // abort()'s threads, joined by wait_abort()
  std::condition_variable ranks_out_cv;
  bool ranks_out = false;  // wait_abort() was called: no rank is inside an NCCL call any more

  ~NcclGroup() {
    if (aborted.load()) {
      wait_abort();  // ncclCommAbort frees the communicators
      return;
    }
    // Destroying a communicator first finalizes it, an intra-node collective: one thread that
    // destroys every rank's communicator in turn would wait in the first call for the other
    // ranks' finalize, which never comes (a hang at teardown). NCCL's rule for several ranks on
    // one thread: finalize them all in one group call; the destroys are then purely local.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    ncclGroupStart();
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommFinalize(c);
    }
    ncclGroupEnd();
#endif
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommDestroy(c);
    }
  }
  // ncclCommAbort sets its communicator's abort flag (the kernels waiting in it end) and then
  // tears it down, and that teardown waits until every CUDA graph that captured one of the
  // communicator's collectives is destroyed. A rank's recorded decode steps hold such graphs,
  // and a rank drops them only once it is out of its step, which for a rank waiting in a
  // collective needs the flag of ITS communicator set. So one thread per communicator ends it
  // concurrently (no teardown blocks another communicator's flag), and abort() returns without
  // waiting; wait_abort() joins them once the ranks dropped their recordings
  // (docs/tensor-parallel.md, "Failures").
  //
  // Where NCCL has ncclCommRevoke (2.28), the thread first revokes: the in-flight operations end
  // and nothing is freed, so a rank thread that is still inside an NCCL host call (a collective
  // it entered just before the abort) keeps a valid communicator. The teardown (ncclCommAbort)
  // waits until wait_abort() says every rank is out of its step, or kRevokeGrace if the ranks do
  // not get out (then it ends them as the abort flag does, the behaviour without revoke).
  static constexpr std::chrono::seconds kRevokeGrace{20};
  static constexpr std::chrono::seconds kHostCallGrace{5};

  static bool can_revoke() {
#ifdef NCCL_REVOKE_DEFAULT  // ncclCommRevoke: NCCL 2.28 builds that have it
    int version = 0;
    return ncclGetVersion(&version) == ncclSuccess && version >= NCCL_VERSION(2, 28, 0);
#else
    return false;
#endif
  }

  void end_communicator(ncclComm_t c, int device) {
    cudaSetDevice(device);
#ifdef NCCL_REVOKE_DEFAULT  // ncclCommRevoke: NCCL 2.28 builds that have it
    if (can_revoke()) {
      const ncclResult_t r = ncclCommRevoke(c, NCCL_REVOKE_DEFAULT);
      if (r == ncclSuccess) {
        std::unique_lock<std::mutex> lock(mu);
        if (!ranks_out_cv.wait_for(lock, kRevokeGrace, [&] { return ranks_out; })) {
          LS_LOG_ERROR("NCCL abort: the ranks are still in their step {} s after the revoke of "
                       "the device {} communicator; aborting it",
                       kRevokeGrace.count(), device);
        }
      } else {
        LS_LOG_ERROR("NCCL abort: ncclCommRevoke on device {} failed ({}); aborting", device,
                     ncclGetErrorString(r));
      }
    }
#endif
    wait_host_calls(device);
    ncclCommAbort(c);
  }

  // Before ncclCommAbort frees a communicator: wait until no rank thread is inside an NCCL host
  // call. A thread counts itself in before it tests `aborted` (both sequentially consistent), so
  // once the count reads zero after `aborted` was set, no call can start any more. Short, since
  // connections are made at init (NCCL_RUNTIME_CONNECT=0 below); a collective whose connection
  // NCCL sets up at run time (if the user turns that back on) waits inside the call for its
  // peers, which only the abort flag ends, hence the bound (logged): past it the communicator is
  // aborted anyway (docs/tensor-parallel.md, "Failures").
  void wait_host_calls(int device) {
    const auto until = std::chrono::steady_clock::now() + kHostCallGrace;
    while (host_calls.load() > 0) {
      if (std::chrono::steady_clock::now() > until) {
        LS_LOG_ERROR("NCCL abort: a rank thread is still inside an NCCL call on device {} after "
                     "{} s; aborting anyway",
                     device, kHostCallGrace.count());
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  void abort(const std::string& reason) {
    // Ranks without an abort thread are aborted here after `mu` is released: the in-place
    // ncclCommAbort may wait for that rank's recordings to be dropped, which needs the rank's
    // thread out of its step, and that thread's check_alive() -> reason() takes `mu`.
    std::vector<std::pair<ncclComm_t, int>> in_place;  // [comm, device]
    {
      std::lock_guard<std::mutex> lock(mu);
      if (aborted.exchange(true)) return;
      why = reason;
      for (size_t r = 0; r < comms.size(); ++r) {
        ncclComm_t c = comms[r];
        if (c == nullptr) continue;
        const int device = devices[r];
        try {
          aborters.emplace_back([this, c, device] { end_communicator(c, device); });
        } catch (const std::exception& e) {
          LS_LOG_ERROR("NCCL abort: no thread for rank {} ({}); aborting it in place", r,
                       e.what());
          in_place.emplace_back(c, device);
        }
      }
    }
    for (const auto& [c, device] : in_place) {
      cudaSetDevice(device);
      wait_host_calls(device);
      ncclCommAbort(c);
    }
  }
  void wait_abort() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu);
      ranks_out = true;
      threads.swap(aborters);
    }
    ranks_out_cv.notify_all();
    for (std::thread& t : threads) t.join();
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mu);
    return why;
  }
};

Result<ncclDataType_t> nccl_type(DType d) {
  switch (d) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    default:
      return invalid_argument("NCCL collectives: {} buffers are not supported (f32, bf16, f16)",
                              dtype_name(d));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroup> group, int32_t rank, CudaBackend* backend,
                   Buffer scratch)
      : group_(std::move(group)), rank_(rank), backend_(backend), scratch_(std::move(scratch)) {}

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return static_cast<int32_t>(group_->comms.size()); }
  std::string name() const override { return "nccl"; }

  Status all_reduce_sum(const TensorView& buf) override {
    LS_RETURN_IF_ERROR(check_alive());
    LS_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(buf.dtype));
    if (!buf.is_contiguous()) return invalid_argument("all_reduce_sum: the buffer is not contiguous");
    return call("ncclAllReduce", [&] {
      return ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()), type, ncclSum,
                           comm(), stream());
    });
  }

  Status all_gather(const TensorView& in, const TensorView& out) override {
    LS_RETURN_IF_ERROR(check_alive());
    LS_ASSIGN_OR_RETURN(ncclDataType_t type, nccl_type(in.dtype));
    if (!in.is_contiguous() || !out.is_contiguous() || in.dtype != out.dtype ||
        out.numel() != in.numel() * size()) {
      return invalid_argument("all_gather: out must be [{} x {}] {} contiguous elements", size(),
                              in.numel(), dtype_name(in.dtype));
    }
    return call("ncclAllGather", [&] {
      return ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), type, comm(),
                           stream());
    });
  }

  Status barrier() override {
    LS_RETURN_IF_ERROR(check_alive());
    LS_RETURN_IF_ERROR(call("ncclAllReduce (barrier)", [&] {
      return ncclAllReduce(scratch_.data(), scratch_.data(), 1, ncclFloat32, ncclSum, comm(),
                           stream());
    }));
    backend_->synchronize();
    LS_RETURN_IF_ERROR(backend_->take_error());
    return check_alive();
  }

  void abort(const std::string& why) override { group_->abort(why); }
  void wait_abort() override { group_->wait_abort(); }
  bool reset() override { return !group_->aborted.load(); }

 private:
  // One NCCL host call on this rank's communicator, counted in the group's host_calls so that an
  // abort on another thread does not free the communicator under it; refused once aborted.
  template <typename F>
  Status call(const char* what, F&& enqueue) {
    struct Count {
      std::atomic<int>& n;
      explicit Count(std::atomic<int>& c) : n(c) { n.fetch_add(1); }
      ~Count() { n.fetch_sub(1); }
      Count(const Count&) = delete;
      Count& operator=(const Count&) = delete;
    } count(group_->host_calls);
    LS_RETURN_IF_ERROR(check_alive());
    return check(enqueue(), what);
  }

  ncclComm_t comm() const { return group_->comms[static_cast<size_t>(rank_)]; }
  cudaStream_t stream() const { return static_cast<cudaStream_t>(backend_->stream_handle()); }
  Status check_alive() const {
    if (group_->aborted.load()) {
      return failed_precondition("tensor parallel: the NCCL group was aborted: {}",
                                 group_->reason());
    }
    return {};
  }
  Status check(ncclResult_t r, const char* what) const {
    if (r == ncclSuccess) return {};
    ncclResult_t async = ncclSuccess;
    if (!group_->aborted.load()) ncclCommGetAsyncError(comm(), &async);
    return internal_error("tensor parallel rank {}: {} failed: {}{}", rank_, what,
                          ncclGetErrorString(r),
                          async != ncclSuccess
                              ? std::string(" (async: ") + ncclGetErrorString(async) + ")"
                              : std::string());
  }

  std::shared_ptr<NcclGroup> group_;
  int32_t rank_;
  CudaBackend* backend_;
  Buffer scratch_;  // [1] f32 on the rank's device, the barrier's payload
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    const std::vector<Backend*>& backends) {
  std::vector<CudaBackend*> cuda;
  std::vector<int> devices;
  for (Backend* b : backends) {
    auto* c = dynamic_cast<CudaBackend*>(b);
    if (c == nullptr) return invalid_argument("NCCL communicators need CUDA backends");
    cuda.push_back(c);
    devices.push_back(c->device_index());
  }
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess ||
      visible < static_cast<int>(backends.size())) {
    return resource_exhausted("--tensor-parallel-size {} needs {} GPUs; {} are visible",
                              backends.size(), backends.size(), visible);
  }
  // Every connection made here, at init, unless the user set it otherwise: with NCCL's runtime
  // connection setup (its default since 2.22) a collective needing a new connection waits for
  // its peers inside the host call, where a failed rank would leave it until the abort flag, and
  // the abort waits for host calls to end before freeing the communicators (NcclGroup).
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  auto group = std::make_shared<NcclGroup>();
  group->comms.assign(backends.size(), nullptr);
  group->devices = devices;
  const ncclResult_t r = ncclCommInitAll(group->comms.data(), static_cast<int>(backends.size()),
                                         devices.data());
  if (r != ncclSuccess) {
    group->comms.assign(backends.size(), nullptr);
    return internal_error("ncclCommInitAll over {} GPUs failed: {}", backends.size(),
                          ncclGetErrorString(r));
  }
  int version = 0;
  ncclGetVersion(&version);
  LS_LOG_INFO("NCCL {} communicators on {} GPUs (NCCL_NVLS_ENABLE={}, NCCL_RUNTIME_CONNECT={})",
              version, backends.size(),
              std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "unset",
              std::getenv("NCCL_RUNTIME_CONNECT"));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < cuda.size(); ++i) {
    cuda[i]->bind_thread();
    LS_ASSIGN_OR_RETURN(Buffer scratch, cuda[i]->allocate_zeroed(4));
    out.push_back(std::make_unique<NcclCommunicator>(group, static_cast<int32_t>(i), cuda[i],
                                                     std::move(scratch)));
  }
  return out;
}

}  // namespace ls
