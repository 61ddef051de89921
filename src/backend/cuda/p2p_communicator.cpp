#include "backend/cuda/p2p_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/log.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/p2p_all_reduce.h"

namespace ls {

namespace {

namespace kc = kernels::cuda;

// What the ranks of one group share: the host-mapped words and the abort state. The device
// buffers belong to each rank's communicator (they are freed through its backend).
struct P2pGroup {
  int32_t ranks = 0;
  // Host-mapped (cudaHostAllocMapped | Portable): [0] the abort word, [1 + r] rank r's error.
  uint32_t* words = nullptr;
  uint32_t* words_dev = nullptr;  // the same words as the devices address them
  double timeout_s = 0;
  std::mutex mu;
  std::atomic<bool> aborted{false};
  std::string why;

  ~P2pGroup() {
    if (words != nullptr) cudaFreeHost(words);
  }
  std::atomic_ref<uint32_t> word(int32_t i) const { return std::atomic_ref<uint32_t>(words[i]); }
  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted.exchange(true)) return;
    why = reason;
    word(0).store(kc::kP2pErrorAborted, std::memory_order_seq_cst);
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mu);
    return why;
  }
};

// One grid configuration of the kernel with its own buffers on this rank (its call counters
// advance only with its own calls, which every rank makes in the same order).
struct P2pChannel {
  Buffer staging;   // [2][params.half_bytes] bytes on the rank's device
  Buffer flags;     // [kP2pMaxBlocks][kP2pMaxRanks] u32
  Buffer counters;  // [kP2pMaxBlocks] u32
  kc::P2pAllReduceParams params;
};

bool reducible(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

class P2pCommunicator final : public Communicator {
 public:
  P2pCommunicator(std::shared_ptr<P2pGroup> group, int32_t rank, CudaBackend* backend,
                  std::unique_ptr<Communicator> fallback, std::vector<P2pChannel> channels)
      : group_(std::move(group)),
        rank_(rank),
        backend_(backend),
        fallback_(std::move(fallback)),
        channels_(std::move(channels)) {}

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return group_->ranks; }
  std::string name() const override { return "p2p"; }

  Status all_reduce_sum(const TensorView& buf) override {
    LS_RETURN_IF_ERROR(check_alive());
    // The same decision on every rank: it depends only on the shape and dtype they share.
    const P2pChannel* channel = nullptr;
    if (reducible(buf.dtype) && buf.is_contiguous()) {
      for (const P2pChannel& c : channels_) {  // smallest first
        if (buf.nbytes() <= c.params.half_bytes) {
          channel = &c;
          break;
        }
      }
    }
    if (channel == nullptr) {
      ++counts_.fallback;
      return fallback_->all_reduce_sum(buf);
    }
    ++counts_.p2p;
    return kc::p2p_all_reduce(channel->params, buf.data, buf.numel(), buf.dtype,
                              static_cast<cudaStream_t>(backend_->stream_handle()));
  }

  Status all_gather(const TensorView& in, const TensorView& out) override {
    LS_RETURN_IF_ERROR(check_alive());
    return fallback_->all_gather(in, out);
  }

  Status barrier() override {
    LS_RETURN_IF_ERROR(check_alive());
    LS_RETURN_IF_ERROR(fallback_->barrier());  // drains this rank's stream
    return device_error();
  }

  void abort(const std::string& why) override {
    group_->abort(why);  // ends the kernels' waits first: NCCL's abort may wait for its kernels
    fallback_->abort(why);
  }

  void wait_abort() override { fallback_->wait_abort(); }

  bool reset() override {
    if (group_->aborted.load() || error_word() != 0) return false;
    return fallback_->reset();
  }

  Status device_error() override {
    const uint32_t e = error_word();
    if (e == 0) return {};
    const uint32_t code = e >> 8;
    const uint32_t peer = e & 0xffu;
    if (code == kc::kP2pErrorTimedOut) {
      // (The executor prefixes the failing rank: "tensor-parallel rank R: ...".)
      const std::string why = fmt::format(
          "the p2p all-reduce gave up waiting for rank {}: a rank waited more than {} s for a "
          "peer that never reached the same all-reduce",
          peer, group_->timeout_s);
      group_->abort(why);
      return internal_error("{}", why);
    }
    group_->abort(fmt::format("rank {}: the p2p all-reduce was aborted", rank_));
    return failed_precondition("the p2p all-reduce was aborted while waiting for rank {}: {}", peer,
                               group_->reason());
  }

  P2pCallCounts counts() const { return counts_; }

 private:
  uint32_t error_word() const { return group_->word(1 + rank_).load(std::memory_order_acquire); }
  Status check_alive() {
    if (group_->aborted.load()) {
      return failed_precondition("tensor parallel: the p2p group was aborted: {}",
                                 group_->reason());
    }
    return device_error();
  }

  std::shared_ptr<P2pGroup> group_;
  int32_t rank_;
  CudaBackend* backend_;
  std::unique_ptr<Communicator> fallback_;
  std::vector<P2pChannel> channels_;  // by message size, smallest first
  P2pCallCounts counts_;
};

// Enables access from each device to every other one (the current device ends on the last).
Status enable_peer_access_from_each(const std::vector<int>& devices) {
  for (int i : devices) {
    LS_CUDA_RETURN_IF_ERROR(cudaSetDevice(i));
    for (int j : devices) {
      if (j == i) continue;
      const cudaError_t err = cudaDeviceEnablePeerAccess(j, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // NCCL, or an earlier group, enabled it
      } else if (err != cudaSuccess) {
        return kc::cuda_status(err,
                               fmt::format("cudaDeviceEnablePeerAccess(cuda:{} -> cuda:{})", i, j));
      }
    }
  }
  return {};
}

// The same, leaving the caller's current device as it found it.
Status enable_peer_access(const std::vector<int>& devices) {
  int current = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  const Status s = enable_peer_access_from_each(devices);
  const cudaError_t restore = cudaSetDevice(current);
  if (!s.ok()) return s;
  return kc::cuda_status(restore, "cudaSetDevice (restoring the current device)");
}

}  // namespace

Status check_peer_access(const std::vector<int>& devices) {
  for (int i : devices) {
    for (int j : devices) {
      if (j == i) continue;
      int can = 0;
      LS_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can, i, j));
      if (can == 0) {
        return failed_precondition(
            "cuda:{} cannot access cuda:{}'s memory (no peer-to-peer path between them)", i, j);
      }
    }
  }
  return {};
}

Result<std::vector<std::unique_ptr<Communicator>>> wrap_with_p2p_all_reduce(
    const std::vector<Backend*>& backends, std::vector<std::unique_ptr<Communicator>> fallback,
    const DeviceCommOptions& options, bool required) {
  const auto n = static_cast<int32_t>(backends.size());
  if (fallback.size() != backends.size()) {
    return invalid_argument("p2p all-reduce: {} fallback communicators for {} ranks",
                            fallback.size(), backends.size());
  }
  const auto blocks_ok = [](int32_t b) { return b >= 1 && b <= kc::kP2pMaxBlocks; };
  if (options.p2p_max_bytes < 16 || options.p2p_max_bytes % 16 != 0 ||
      options.p2p_small_bytes < 0 || options.p2p_small_bytes % 16 != 0 ||
      options.p2p_small_bytes >= options.p2p_max_bytes || !blocks_ok(options.p2p_blocks) ||
      !blocks_ok(options.p2p_large_blocks) || !(options.p2p_timeout_s > 0)) {
    return invalid_argument(
        "p2p all-reduce: max bytes {} (a positive multiple of 16), small bytes {} (a multiple "
        "of 16 below it), blocks {} and {} (1 .. {}), timeout {} s (> 0)",
        options.p2p_max_bytes, options.p2p_small_bytes, options.p2p_blocks,
        options.p2p_large_blocks, kc::kP2pMaxBlocks, options.p2p_timeout_s);
  }
  std::vector<CudaBackend*> cuda;
  std::vector<int> devices;
  for (Backend* b : backends) {
    auto* c = dynamic_cast<CudaBackend*>(b);
    if (c == nullptr) return invalid_argument("the p2p all-reduce needs CUDA backends");
    cuda.push_back(c);
    devices.push_back(c->device_index());
  }
  Status usable = n == 2 || n == 4 || n == 8
                      ? check_peer_access(devices)
                      : failed_precondition("the p2p all-reduce takes 2, 4 or 8 GPUs, not {}", n);
  if (!usable.ok()) {
    if (required) return usable.with_context("--tp-all-reduce p2p");
    LS_LOG_INFO("tensor parallel: NCCL for every all-reduce ({})", usable.message());
    return fallback;
  }
  LS_RETURN_IF_ERROR(enable_peer_access(devices));

  auto group = std::make_shared<P2pGroup>();
  group->ranks = n;
  group->timeout_s = options.p2p_timeout_s;
  const size_t word_bytes = sizeof(uint32_t) * static_cast<size_t>(1 + n);
  LS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&group->words), word_bytes,
                                        cudaHostAllocMapped | cudaHostAllocPortable));
  for (int32_t i = 0; i <= n; ++i) group->word(i).store(0);
  LS_CUDA_RETURN_IF_ERROR(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&group->words_dev), group->words, 0));

  // (half bytes, blocks) per channel, smallest messages first.
  std::vector<std::pair<int64_t, int32_t>> shapes;
  if (options.p2p_small_bytes > 0) shapes.emplace_back(options.p2p_small_bytes, options.p2p_blocks);
  shapes.emplace_back(options.p2p_max_bytes, options.p2p_large_blocks);
  std::vector<std::vector<P2pChannel>> channels(static_cast<size_t>(n));
  constexpr int64_t kFlagBytes = int64_t{kc::kP2pMaxBlocks} * kc::kP2pMaxRanks * 4;
  for (const auto& [half_bytes, blocks] : shapes) {
    kc::P2pAllReduceParams base;
    base.ranks = n;
    base.blocks = blocks;
    base.half_bytes = half_bytes;
    base.abort = group->words_dev;
    base.timeout_ns = static_cast<uint64_t>(std::llround(options.p2p_timeout_s * 1e9));
    for (int32_t r = 0; r < n; ++r) {
      CudaBackend& b = *cuda[static_cast<size_t>(r)];
      b.bind_thread();
      P2pChannel c;
      LS_ASSIGN_OR_RETURN(c.staging, b.allocate(2 * half_bytes));
      LS_ASSIGN_OR_RETURN(c.flags, b.allocate_zeroed(kFlagBytes));
      LS_ASSIGN_OR_RETURN(c.counters, b.allocate_zeroed(int64_t{kc::kP2pMaxBlocks} * 4));
      // The zeroing must land before any peer's kernel stores a flag here.
      b.synchronize();
      LS_RETURN_IF_ERROR(b.take_error());
      base.staging[r] = c.staging.data();
      base.flags[r] = c.flags.as<uint32_t>();
      channels[static_cast<size_t>(r)].push_back(std::move(c));
    }
    for (int32_t r = 0; r < n; ++r) {
      P2pChannel& c = channels[static_cast<size_t>(r)].back();
      c.params = base;
      c.params.rank = r;
      c.params.counters = c.counters.as<uint32_t>();
      c.params.error = group->words_dev + 1 + r;
    }
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (int32_t r = 0; r < n; ++r) {
    const auto i = static_cast<size_t>(r);
    out.push_back(std::make_unique<P2pCommunicator>(group, r, cuda[i], std::move(fallback[i]),
                                                    std::move(channels[i])));
  }
  LS_LOG_INFO(
      "tensor parallel: one-shot p2p all-reduce over {} GPUs for messages up to {} KiB ({} "
      "blocks up to {} KiB, {} above), NCCL for larger ones",
      n, options.p2p_max_bytes / 1024, options.p2p_blocks, options.p2p_small_bytes / 1024,
      options.p2p_large_blocks);
  return out;
}

P2pCallCounts p2p_call_counts(const Communicator& comm) {
  const auto* p = dynamic_cast<const P2pCommunicator*>(&comm);
  return p != nullptr ? p->counts() : P2pCallCounts{};
}

}  // namespace ls
