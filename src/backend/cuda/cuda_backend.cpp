// CudaBackend: lifecycle, memory, copies, synchronisation, scratch and CUDA graphs. The ops are
// in cuda_ops.cpp.

#include "backend/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

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
  if (const char* fault = std::getenv("LONGSERVE_CUDA_FAULT_ATTENTION_TOKENS")) {
    fault_attention_tokens_ = std::strtoll(fault, nullptr, 10);
    LS_LOG_WARN("cuda backend: fault injection on: attention over {} tokens fails",
                fault_attention_tokens_);
  }
  name_ = fmt::format("cuda:{} {} ({} SMs, sm_{}{}, {:.1f} GiB)", device, prop.name, num_sms_,
                      prop.major, prop.minor,
                      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  LS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&lt_workspace_, static_cast<size_t>(kLtWorkspaceBytes)));
  LS_ASSIGN_OR_RETURN(linear_,
                      kernels::cuda::CublasLtLinear::create(lt_workspace_, kLtWorkspaceBytes));
  staging_chunk_bytes_ = kStagingChunkBytes;
  LS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, static_cast<size_t>(2 * staging_chunk_bytes_)));
  for (cudaEvent_t& e : staging_events_) {
    LS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  return {};
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  drop_graphs();
  linear_.reset();
  for (cudaEvent_t e : staging_events_) {
    if (e) cudaEventDestroy(e);
  }
  if (staging_) cudaFreeHost(staging_);
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
          "cuda backend: cudaMalloc of {:.1f} MiB failed ({}); {:.1f} MiB of {:.1f} MiB free",
          static_cast<double>(n) / 1048576.0, cudaGetErrorString(err),
          static_cast<double>(free_b) / 1048576.0, static_cast<double>(total_b) / 1048576.0);
    }
  } else {
    const cudaError_t err = cudaMallocHost(&data, static_cast<size_t>(n));
    if (err != cudaSuccess) {
      cudaGetLastError();
      return resource_exhausted("cuda backend: cudaMallocHost of {:.1f} MiB failed ({})",
                                static_cast<double>(n) / 1048576.0, cudaGetErrorString(err));
    }
  }
  return Buffer(this, data, bytes, tier);
}

void CudaBackend::release(void* data, int64_t, MemoryTier tier) {
  if (!data) return;
  // Kernels still queued may read the buffer: let them finish first.
  if (stream_ && !capturing_) cudaStreamSynchronize(stream_);
  const cudaError_t err = tier == MemoryTier::kDevice ? cudaFree(data) : cudaFreeHost(data);
  report(cuda_status(err, tier == MemoryTier::kDevice ? "cudaFree" : "cudaFreeHost"), "release");
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
  report(
      cuda_status(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream_), "cudaMemsetAsync"),
      "fill_zero");
}

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

void CudaBackend::drop_graphs() {
  for (cudaGraphExec_t g : graphs_) {
    if (g) cudaGraphExecDestroy(g);
  }
  graphs_.clear();
}

}  // namespace ls
