// CudaBackend: lifecycle, memory, copies, synchronisation, scratch and CUDA graphs. The ops are
// in cuda_ops.cpp.

#include "backend/cuda/cuda_backend.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/log.h"
#include "kernels/cuda/check.h"

namespace ls {

namespace {

using kernels::cuda::cuda_status;

constexpr int64_t kLtWorkspaceBytes = int64_t{32} << 20;   // cuBLASLt scratch
constexpr int64_t kStagingChunkBytes = int64_t{32} << 20;  // per pinned staging chunk
constexpr int64_t kMinAllocation = 256;

enum class PtrKind { kDevice, kPinned, kPageable };

PtrKind pointer_kind(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // an unregistered pointer is not an error worth keeping
    return PtrKind::kPageable;
  }
  // Managed counts as pageable: with HMM (open kernel modules on Hopper) the driver may report
  // ordinary malloc'd memory as managed, and a cudaMemcpyAsync from or to it returns before
  // the copy is done, so a caller that reads its vector or frees its source at once races the
  // DMA. Staged copies are correct for real managed memory too (the host may touch it).
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      return PtrKind::kDevice;
    case cudaMemoryTypeHost:
      return PtrKind::kPinned;
    default:
      return PtrKind::kPageable;
  }
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CudaBackend::create(device));
  return std::unique_ptr<Backend>(std::move(b));
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int device) {
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  LS_RETURN_IF_ERROR(b->init(device));
  return b;
}

Status CudaBackend::init(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return failed_precondition("--device cuda: no CUDA device is usable ({})",
                               err == cudaSuccess ? "none found" : cudaGetErrorString(err));
  }
  if (device < 0 || device >= count) {
    return invalid_argument("--device cuda: device {} does not exist ({} found)", device, count);
  }
  device_ = device;
  LS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaDeviceProp prop{};
  LS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  if (prop.major != 9 || prop.minor != 0) {
    return unimplemented(
        "--device cuda: {} has compute capability {}.{}; this build's kernels are for 9.0 "
        "(Hopper, sm_90a)",
        prop.name, prop.major, prop.minor);
  }
  num_sms_ = prop.multiProcessorCount;
  {
    int same = 0;
    if (cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem, device) !=
        cudaSuccess) {
      cudaGetLastError();
      same = 0;
    }
    host_pointer_is_device_pointer_ = same != 0;
  }
  if (const char* fault = std::getenv("LONGSERVE_CUDA_FAULT_ATTENTION_TOKENS")) {
    fault_attention_tokens_ = std::strtoll(fault, nullptr, 10);
    LS_LOG_WARN("cuda backend: fault injection on: attention over {} tokens fails",
                fault_attention_tokens_);
  }
  if (copy_fault_.armed()) {
    LS_LOG_WARN("cuda backend: fault injection on: copy_pages call {} fails", copy_fault_.at());
  }
  name_ = fmt::format("cuda:{} {} ({} SMs, sm_{}{}, {:.1f} GiB)", device, prop.name, num_sms_,
                      prop.major, prop.minor,
                      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  // The highest priority: when background page saves (the lowest) run beside the ops, the block
  // scheduler prefers the ops' kernels. Alone, a stream's priority changes nothing.
  int least_priority = 0, greatest_priority = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  LS_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest_priority));
  LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&lt_workspace_, static_cast<size_t>(kLtWorkspaceBytes)));
  LS_ASSIGN_OR_RETURN(linear_,
                      kernels::cuda::CublasLtLinear::create(lt_workspace_, kLtWorkspaceBytes));
  staging_chunk_bytes_ = kStagingChunkBytes;
  LS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, static_cast<size_t>(2 * staging_chunk_bytes_)));
  for (cudaEvent_t& e : staging_events_) {
    LS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  void* flag = nullptr;
  LS_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&flag, sizeof(int32_t), cudaHostAllocPortable | cudaHostAllocMapped));
  copy_flag_host_ = static_cast<int32_t*>(flag);
  *copy_flag_host_ = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&flag, copy_flag_host_, 0));
  copy_flag_device_ = static_cast<int32_t*>(flag);
  return {};
}

CudaBackend::~CudaBackend() {
  saver_.reset();  // waits for the saves in flight
  abort_capture();  // a synchronize on a capturing stream is an error
  if (stream_) cudaStreamSynchronize(stream_);
  drop_graphs();
  linear_.reset();
  for (cudaEvent_t e : staging_events_) {
    if (e) cudaEventDestroy(e);
  }
  if (staging_) cudaFreeHost(staging_);
  if (copy_flag_host_) cudaFreeHost(copy_flag_host_);
  if (workspace_) cudaFree(workspace_);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::check_sticky(const char* op) {
  const cudaError_t err = cudaPeekAtLastError();
  if (err != cudaSuccess && kernels::cuda::is_sticky_error(err)) {
    LS_LOG_ERROR("cuda backend: fatal CUDA error in {}: {} ({}); the CUDA context is unusable", op,
                 cudaGetErrorString(err), cudaGetErrorName(err));
    std::abort();
  }
}

void CudaBackend::report(const Status& status, const char* op) {
  if (status.ok()) return;
  check_sticky(op);
  LS_LOG_ERROR("cuda backend: {} failed: {}", op, status.message());
  if (error_.ok()) error_ = status;
  if (capturing_ && capture_error_.ok()) capture_error_ = status;
}

Status CudaBackend::take_error() {
  Status s = error_;
  error_ = Status{};
  return s;
}

// ---- memory ----

Result<Buffer> CudaBackend::allocate(int64_t bytes, MemoryTier tier) {
  if (bytes < 0) return invalid_argument("cuda backend: cannot allocate {} bytes", bytes);
  const int64_t n = std::max(bytes, kMinAllocation);
  void* data = nullptr;
  if (tier == MemoryTier::kDevice) {
    const cudaError_t err = cudaMalloc(&data, static_cast<size_t>(n));
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return resource_exhausted(
          "cuda backend: cudaMalloc of {} MiB failed ({}); {} MiB of {} MiB free",
          static_cast<double>(n) / 1048576.0, cudaGetErrorString(err),
          static_cast<double>(free_b) / 1048576.0, static_cast<double>(total_b) / 1048576.0);
    }
  } else {
    LS_ASSIGN_OR_RETURN(data, allocate_host(n));
  }
  return Buffer(this, data, bytes, tier);
}

// Pinned if at all possible: cudaHostAlloc, else ordinary pages registered with the driver, else
// (warned once per kind) pageable pages, so a host pool larger than what may be locked still
// works, slowly and visibly (host_memory_stats, the gather kernel's refusal).
Result<void*> CudaBackend::allocate_host(int64_t n) {
  if (host_pinning_ == HostPinning::kAlloc && n >= 2 * kHostChunkBytes) {
    LS_ASSIGN_OR_RETURN(void* chunked, allocate_host_chunked(n));
    if (chunked != nullptr) return chunked;
  }
  const int64_t mib = (n + 1048575) / 1048576;  // whole MiB: integer formatting only
  void* data = nullptr;
  const cudaError_t err = host_pinning_ == HostPinning::kAlloc
                              ? cudaHostAlloc(&data, static_cast<size_t>(n),
                                              cudaHostAllocPortable | cudaHostAllocMapped)
                              : cudaErrorNotPermitted;  // told to skip it
  HostKind kind = HostKind::kAllocated;
  if (err != cudaSuccess) {
    cudaGetLastError();
    data = mmap(nullptr, static_cast<size_t>(n), PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) {
      return resource_exhausted(
          "cuda backend: cannot allocate {} MiB of host memory (cudaHostAlloc: {}; mmap "
          "failed too)",
          mib, cudaGetErrorString(err));
    }
    const cudaError_t rerr =
        host_pinning_ == HostPinning::kNone
            ? cudaErrorNotPermitted
            : cudaHostRegister(data, static_cast<size_t>(n),
                               cudaHostRegisterPortable | cudaHostRegisterMapped);
    std::lock_guard<std::mutex> lock(host_mu_);
    if (rerr == cudaSuccess) {
      kind = HostKind::kRegistered;
      if (!warned_registered_) {
        warned_registered_ = true;
        LS_LOG_WARN(
            "cuda backend: cudaHostAlloc of {} MiB failed ({}); pinned ordinary "
            "memory with cudaHostRegister instead",
            mib, cudaGetErrorString(err));
      }
    } else {
      cudaGetLastError();
      kind = HostKind::kPageable;
      if (!warned_pageable_) {
        warned_pageable_ = true;
        LS_LOG_WARN(
            "cuda backend: pinning {} MiB of host memory failed (cudaHostAlloc: {}; "
            "cudaHostRegister: {}); it stays PAGEABLE: copies from it are staged and slow, the "
            "gather kernel and CUDA graphs refuse it. Ask for less host memory (the host KV "
            "cache size) or free some.",
            mib, cudaGetErrorString(err), cudaGetErrorString(rerr));
      }
    }
  }
  std::lock_guard<std::mutex> lock(host_mu_);
  host_blocks_[data] = HostBlock{n, kind};
  return data;
}

// One mapping, registered in kHostChunkBytes pieces: a machine that cannot lock all of it (the
// memlock limit, fragmentation of pinnable memory) pins a prefix, and the error says how large,
// instead of one all-or-nothing cudaHostAlloc. Kernels address the whole range as one array, so
// this needs registered memory at its own host address on the device (UVA on Linux x86-64 with
// Hopper: true); without that the caller takes the single-allocation path.
Result<void*> CudaBackend::allocate_host_chunked(int64_t n) {
  if (!host_pointer_is_device_pointer_) return static_cast<void*>(nullptr);
  const int64_t mib = (n + 1048575) / 1048576;  // whole MiB: integer formatting only
  void* data = mmap(nullptr, static_cast<size_t>(n), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (data == MAP_FAILED) {
    return resource_exhausted("cuda backend: cannot map {} MiB of host memory", mib);
  }
  auto* base = static_cast<char*>(data);
  int64_t pinned = 0;
  cudaError_t err = cudaSuccess;
  while (pinned < n) {
    const int64_t len = std::min(kHostChunkBytes, n - pinned);
    err = cudaHostRegister(base + pinned, static_cast<size_t>(len),
                           cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (err != cudaSuccess) break;
    void* dev = nullptr;
    if (cudaHostGetDevicePointer(&dev, base + pinned, 0) != cudaSuccess || dev != base + pinned) {
      cudaGetLastError();
      cudaHostUnregister(base + pinned);
      err = cudaErrorInvalidDevicePointer;
      break;
    }
    pinned += len;
  }
  if (pinned == n) {
    std::lock_guard<std::mutex> lock(host_mu_);
    host_blocks_[data] = HostBlock{n, HostKind::kRegisteredChunks};
    return data;
  }
  cudaGetLastError();
  for (int64_t off = 0; off < pinned; off += kHostChunkBytes) cudaHostUnregister(base + off);
  munmap(data, static_cast<size_t>(n));
  LS_LOG_WARN(
      "cuda backend: pinned only {} of {} MiB of host memory in {} MiB chunks "
      "(cudaHostRegister: {}); nothing of it is kept. Raise the locked-memory limit (ulimit -l, "
      "memlock) or ask for less",
      pinned / 1048576, mib, kHostChunkBytes >> 20,
      cudaGetErrorString(err));
  return resource_exhausted(
      "cuda backend: could pin only {} of the {} MiB of host memory asked for ({})",
      pinned / 1048576, mib, cudaGetErrorString(err));
}

void CudaBackend::release(void* data, int64_t, MemoryTier tier) {
  if (!data) return;
  // Kernels still queued, and saves in flight, may read the buffer: let them finish first.
  if (stream_ && !capturing_) cudaStreamSynchronize(stream_);
  if (saver_) saver_->drain();
  if (tier == MemoryTier::kDevice) {
    report(cuda_status(cudaFree(data), "cudaFree"), "release");
    return;
  }
  HostBlock block;
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    auto it = host_blocks_.find(data);
    if (it != host_blocks_.end()) {
      block = it->second;
      host_blocks_.erase(it);
    }
  }
  switch (block.kind) {
    case HostKind::kAllocated:
      report(cuda_status(cudaFreeHost(data), "cudaFreeHost"), "release");
      break;
    case HostKind::kRegistered:
      report(cuda_status(cudaHostUnregister(data), "cudaHostUnregister"), "release");
      munmap(data, static_cast<size_t>(block.bytes));
      break;
    case HostKind::kRegisteredChunks:
      for (int64_t off = 0; off < block.bytes; off += kHostChunkBytes) {
        report(cuda_status(cudaHostUnregister(static_cast<char*>(data) + off),
                           "cudaHostUnregister"),
               "release");
      }
      munmap(data, static_cast<size_t>(block.bytes));
      break;
    case HostKind::kPageable:
      munmap(data, static_cast<size_t>(block.bytes));
      break;
  }
}

HostMemoryStats CudaBackend::host_memory_stats() const {
  HostMemoryStats s;
  std::lock_guard<std::mutex> lock(host_mu_);
  for (const auto& [ptr, block] : host_blocks_) {
    (block.kind == HostKind::kPageable ? s.pageable_bytes : s.pinned_bytes) += block.bytes;
  }
  return s;
}

int64_t CudaBackend::device_memory_free_bytes() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return static_cast<int64_t>(free_b);
}

int64_t CudaBackend::device_memory_total_bytes() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return static_cast<int64_t>(total_b);
}

// ---- copies ----

void CudaBackend::copy_from_pageable(void* dst, const void* src, int64_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (int64_t off = 0; off < bytes; off += staging_chunk_bytes_) {
    const int64_t n = std::min(staging_chunk_bytes_, bytes - off);
    const int buf = staging_next_;
    staging_next_ ^= 1;
    // The chunk's previous copy must have left it before it is refilled.
    report(cuda_status(cudaEventSynchronize(staging_events_[buf]), "cudaEventSynchronize"),
           "copy_bytes");
    char* stage = static_cast<char*>(staging_) + buf * staging_chunk_bytes_;
    std::memcpy(stage, s + off, static_cast<size_t>(n));
    report(cuda_status(cudaMemcpyAsync(d + off, stage, static_cast<size_t>(n),
                                       cudaMemcpyHostToDevice, stream_),
                       "cudaMemcpyAsync(host->device)"),
           "copy_bytes");
    report(cuda_status(cudaEventRecord(staging_events_[buf], stream_), "cudaEventRecord"),
           "copy_bytes");
  }
}

void CudaBackend::copy_to_pageable(void* dst, const void* src, int64_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (int64_t off = 0; off < bytes; off += staging_chunk_bytes_) {
    const int64_t n = std::min(staging_chunk_bytes_, bytes - off);
    report(cuda_status(cudaMemcpyAsync(staging_, s + off, static_cast<size_t>(n),
                                       cudaMemcpyDeviceToHost, stream_),
                       "cudaMemcpyAsync(device->host)"),
           "copy_bytes");
    const Status st = cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    report(st, "copy_bytes");
    if (!st.ok()) return;
    std::memcpy(d + off, staging_, static_cast<size_t>(n));
  }
}

void CudaBackend::copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || dst == src) return;
  const PtrKind dk = pointer_kind(dst), sk = pointer_kind(src);
  const bool pageable = dk == PtrKind::kPageable || sk == PtrKind::kPageable;
  const bool host_only = dk != PtrKind::kDevice && sk != PtrKind::kDevice;
  if (capturing_ && (pageable || host_only)) {
    report(failed_precondition("a copy from or to pageable host memory, or between host "
                               "buffers, cannot be captured"),
           "copy_bytes");
    return;
  }
  if (host_only) {
    report(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"), "copy_bytes");
    std::memmove(dst, src, static_cast<size_t>(bytes));
    return;
  }
  if (sk == PtrKind::kPageable) {
    copy_from_pageable(dst, src, bytes);
  } else if (dk == PtrKind::kPageable) {
    copy_to_pageable(dst, src, bytes);
  } else {
    report(cuda_status(
               cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_),
               "cudaMemcpyAsync"),
           "copy_bytes");
  }
}

void CudaBackend::fill_zero(void* dst, int64_t bytes) {
  if (bytes <= 0) return;
  if (pointer_kind(dst) == PtrKind::kPageable) {
    if (capturing_) {
      report(failed_precondition("zeroing pageable host memory cannot be captured"), "fill_zero");
      return;
    }
    report(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"), "fill_zero");
    std::memset(dst, 0, static_cast<size_t>(bytes));
    return;
  }
  // A chunk-pinned block is several registrations: one memset per chunk, so no driver call
  // spans two of them.
  int64_t chunk = bytes;
  {
    std::lock_guard<std::mutex> lock(host_mu_);
    auto it = host_blocks_.find(dst);
    if (it != host_blocks_.end() && it->second.kind == HostKind::kRegisteredChunks) {
      chunk = kHostChunkBytes;
    }
  }
  for (int64_t off = 0; off < bytes; off += chunk) {
    report(cuda_status(cudaMemsetAsync(static_cast<char*>(dst) + off, 0,
                                       static_cast<size_t>(std::min(chunk, bytes - off)), stream_),
                       "cudaMemsetAsync"),
           "fill_zero");
  }
}

void CudaBackend::bind_thread() { cudaSetDevice(device_); }

void CudaBackend::synchronize() {
  if (capturing_) {
    report(failed_precondition("synchronize() inside a capture"), "synchronize");
    return;
  }
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess && kernels::cuda::is_sticky_error(err)) {
    LS_LOG_ERROR(
        "cuda backend: fatal CUDA error while synchronizing: {} ({}); a kernel of this "
        "step faulted and the CUDA context is unusable",
        cudaGetErrorString(err), cudaGetErrorName(err));
    std::abort();
  }
  report(cuda_status(err, "cudaStreamSynchronize"), "synchronize");
  if (err == cudaSuccess) report(take_copy_flag(copy_flag_host_), "copy_pages");
}

// ---- scratch ----

Status CudaBackend::reserve_workspace(int64_t bytes) {
  if (bytes <= workspace_bytes_) return {};
  if (capturing_) {
    return failed_precondition(
        "scratch must grow from {} to {} bytes inside a capture; run the step once uncaptured "
        "first",
        workspace_bytes_, bytes);
  }
  const int64_t n = std::max<int64_t>(bytes + bytes / 2, int64_t{1} << 20);
  if (workspace_) {
    LS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    LS_CUDA_RETURN_IF_ERROR(cudaFree(workspace_));
    workspace_ = nullptr;
    workspace_bytes_ = 0;
  }
  LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, static_cast<size_t>(n)));
  workspace_bytes_ = n;
  ++workspace_epoch_;
  return {};
}

Result<void*> CudaBackend::workspace(int64_t bytes) {
  LS_RETURN_IF_ERROR(reserve_workspace(bytes));
  return workspace_;
}

// ---- graphs ----

Status CudaBackend::begin_capture() {
  if (capturing_) return failed_precondition("begin_capture: a capture is already running");
  LS_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_error_ = Status{};
  return {};
}

Result<int32_t> CudaBackend::end_capture() {
  if (!capturing_) return failed_precondition("end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  if (!capture_error_.ok()) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return capture_error_.with_context("capturing a CUDA graph");
  }
  LS_CUDA_RETURN_IF_ERROR(err);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ierr = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  LS_CUDA_RETURN_IF_ERROR(ierr);
  graphs_.push_back(exec);
  return static_cast<int32_t>(graphs_.size() - 1);
}

Status CudaBackend::replay(int32_t graph) {
  if (graph < 0 || graph >= static_cast<int32_t>(graphs_.size()) || !graphs_[graph]) {
    return invalid_argument("replay: no graph {}", graph);
  }
  LS_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[static_cast<size_t>(graph)], stream_));
  return {};
}

void CudaBackend::abort_capture() {
  if (!capturing_) return;
  capturing_ = false;
  capture_error_ = Status{};
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);  // null when the capture was invalidated
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // clears the non-sticky error of a failed or invalidated capture
}

void CudaBackend::drop_graphs() {
  abort_capture();
  for (cudaGraphExec_t g : graphs_) {
    if (g) cudaGraphExecDestroy(g);
  }
  graphs_.clear();
}

}  // namespace ls
