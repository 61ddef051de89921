#pragma once
// The CUDA backend: device memory (cudaMalloc) and pinned host memory (cudaHostAlloc), one
// non-blocking stream on which every op is enqueued in order, bf16 activations and weights, ops
// dispatched to kernels/cuda (GEMMs through cuBLASLt, decode-sized ones of 1-2 rows through
// kernels/cuda/gemv). Nothing here waits for the GPU except synchronize(), a copy into pageable
// host memory, and the rare growth of the scratch workspace.
//
// Copies (copy_bytes):
//  - device <-> device and device <-> pinned host: cudaMemcpyAsync on the stream;
//  - pageable host -> device: staged through a pinned buffer (two chunks, each reused only after
//    an event says its last copy finished), so the call returns before the transfer ends and the
//    caller may free or rewrite its source at once;
//  - device -> pageable host: staged and synchronous (the data is in `dst` on return);
//  - host <-> host: the stream is drained first (a pinned buffer may be an async copy's target).
//
// Host memory (allocate(kHost)): cudaHostAlloc (portable, mapped: kernels read and write it
// through unified virtual addressing); when that fails, ordinary memory pinned with
// cudaHostRegister; when that fails too, pageable memory with a warning (copies from it are
// staged, the gather kernel and CUDA graphs refuse it). host_memory_stats() counts both kinds.
//
// Page transfers (copy_pages, save_pages): cuda_page_copy.cpp and page_saver.h; see
// docs/hierarchical-kv-transfers.md.
//
// Errors: an op with bad arguments is logged and skipped, as on the CPU backend. A failed CUDA
// call is logged naming the call and kept (last_error()). An error that leaves the CUDA context
// unusable (illegal address, launch failure, ...) is fatal: it is logged with the call that
// reported it and the process aborts, since every later result would be garbage.
//
// Extensions beyond Backend (callers that know they hold a CudaBackend):
//  - add_rmsnorm: the residual add fused with the next norm;
//  - CUDA graphs: begin_capture() / end_capture() record the ops of a step, replay() relaunches
//    them with the same pointers and host-side scalars (see docs/cuda.md for what a caller must
//    keep fixed).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/copy_fault.h"
#include "backend/cuda/page_saver.h"
#include "core/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/linear.h"

namespace ls {

// Creates the CUDA backend on `device` (0-based). Fails with a clear message when there is no
// driver, no such device, or it is not a compute-capability 9.0 part the kernels were built for.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

// Number of CUDA devices usable by this process (0 without a driver or device).
int cuda_device_count();

// Host allocations of at least two of these are pinned chunk by chunk (the host KV pool).
inline constexpr int64_t kHostChunkBytes = int64_t{1} << 30;

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<CudaBackend>> create(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  DType act_dtype() const override { return DType::kBF16; }
  DType weight_dtype_for(DType) const override { return DType::kBF16; }
  // FP8 e4m3 weights with per-row scales (docs/fp8-weights.md): the GEMV and cuBLASLt's FP8
  // GEMM both need whole 16-byte rows.
  bool reads_fp8(int64_t in_features) const override { return in_features > 0 && in_features % 16 == 0; }
  Status quantize_fp8_rows(const TensorView& x, const TensorView& codes,
                           const TensorView& scales) override;

  Result<Buffer> allocate(int64_t bytes, MemoryTier tier = MemoryTier::kDevice) override;
  void release(void* data, int64_t bytes, MemoryTier tier) override;
  void copy_bytes(void* dst, const void* src, int64_t bytes) override;
  void fill_zero(void* dst, int64_t bytes) override;
  void synchronize() override;
  void bind_thread() override;
  int device_index() const { return device_; }
  int64_t device_memory_free_bytes() const override;
  int64_t device_memory_total_bytes() const override;
  HostMemoryStats host_memory_stats() const override;

  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override;
  void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id,
                       const TensorView& out) override;
  void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void linear(const TensorView& x, const LinearWeight& w, const TensorView& out) override;
  void rope(const TensorView& x, const TensorView& cos, const TensorView& sin,
            int64_t rotary_dim) override;
  void qkv_split_rope(const TensorView& qkv, const TensorView& q_norm, const TensorView& k_norm,
                      float eps, const TensorView& cos, const TensorView& sin, int64_t rotary_dim,
                      const TensorView& q, const TensorView& k, const TensorView& v) override;
  void silu_mul(const TensorView& gate_up, const TensorView& out) override;
  void linear_silu_mul(const TensorView& x, const LinearWeight& w, const TensorView& scratch,
                       const TensorView& out) override;
  void add_inplace(const TensorView& x, const TensorView& y) override;
  void gather_rows(const TensorView& x, const TensorView& rows, const TensorView& out) override;
  void convert(const TensorView& src, const TensorView& dst) override;

  void kv_append(const kernels::KvAppendParams& params) override;
  void page_summary_update(const kernels::SummaryUpdateParams& params) override;
  void coarse_fold_pages(const kernels::CoarseFoldParams& params) override;
  void page_select(const kernels::PageSelectParams& params) override;
  void attention(const kernels::AttentionParams& params) override;
  void shared_prefix_attention(const kernels::SharedPrefixParams& params) override;
  void copy_pages(const kernels::PageCopyParams& params) override;
  Result<int64_t> save_pages(const kernels::PageCopyParams& params) override;
  int64_t saves_completed() override;
  Status wait_saves(int64_t ticket) override;
  // How save_pages moves pages (the default: staged scatter). Waits for every save in flight and
  // returns their first error; tickets start again from 1 afterwards.
  Status set_save_options(const PageSaveOptions& options);
  // How allocate(kHost) gets its memory from now on: kAlloc (cudaHostAlloc, falling back as
  // below), kRegister (start at the cudaHostRegister fallback), kNone (pageable, with the
  // warning). The fallbacks are tested through it. With kAlloc, an allocation of two chunks
  // (kHostChunkBytes) or more is pinned in chunks instead (allocate_host_chunked).
  enum class HostPinning : uint8_t { kAlloc, kRegister, kNone };
  void set_host_pinning(HostPinning pinning) { host_pinning_ = pinning; }
  void page_residency(const kernels::PageResidencyParams& params) override;
  void page_residency_reset(const kernels::ResidencyResetParams& params) override;

  // x += residual (stored in x); out = rmsnorm(x) * w. x, residual, out: [R, D] act dtype (out
  // may alias x); w: [D] f32.
  void add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& w, float eps,
                   const TensorView& out) override;

  // ---- CUDA graphs ----
  // Ops enqueued between begin_capture() and end_capture() are recorded, not run. A recording
  // fails (end_capture returns the error) when an op cannot be recorded: a copy from or to
  // pageable memory, or scratch that would have to grow. Run the same sequence once uncaptured
  // first so the scratch is sized.
  bool can_record() const override { return true; }
  Status begin_capture() override;
  // Returns the id of the recorded graph.
  Result<int32_t> end_capture() override;
  // Enqueues the recorded graph on the stream.
  Status replay(int32_t graph) override;
  // Also ends a capture still under way (abort_capture()).
  void drop_graphs() override;
  // A step that throws between begin_capture() and end_capture() leaves the stream capturing, and
  // NCCL holds the captured collectives against their communicator until that graph is destroyed
  // (ncclCommAbort waits for it): end the capture and destroy its graph. Capture mode is
  // thread-local, so this must run on the thread that called begin_capture().
  void abort_capture() override;
  int64_t recording_epoch() const override { return workspace_epoch_; }
  bool capturing() const { return capturing_; }

  // ---- introspection, tuning ----
  int num_sms() const { return num_sms_; }
  // The stream every op is enqueued on (a cudaStream_t).
  void* stream_handle() const { return stream_; }
  // The first CUDA error since the last call (ok if none); clears it.
  Status take_error() override;
  // Linear layers of up to kernels::cuda::kGemvMaxRows rows go to the gemv kernel (default) or,
  // when off, to cuBLASLt like the others (benchmarks compare the two).
  void set_gemv(bool on) { use_gemv_ = on; }
  // FP8 weights: by default (-1) kernels::cuda::fp8_prefers_gemv picks the e4m3 GEMV or the
  // per-token-quantized cuBLASLt GEMM per call; 0..kFp8GemvMaxRows forces the GEMV for calls of
  // at most that many rows and the GEMM above (benchmarks compare the two paths).
  void set_fp8_gemv_max_rows(int64_t rows) {
    fp8_gemv_max_rows_ = std::clamp<int64_t>(rows, -1, kernels::cuda::kFp8GemvMaxRows);
  }
  // Off: FP8 GEMMs run as an unscaled product + an epilogue kernel even where cuBLASLt has
  // outer-vector scale algorithms (tests and benchmarks compare the two); on by default. Drops
  // the FP8 plans made so far; not while a graph is being captured.
  void set_fp8_outer_vec(bool allowed) { linear_->set_fp8_outer_vec(allowed); }
  // Whether the last FP8 GEMM of this shape ran with cuBLASLt's outer-vector scales (else an
  // unscaled product and an epilogue kernel); for benchmarks.
  bool fp8_outer_vec_scales(int64_t m, int64_t n, int64_t k) const {
    return linear_->fp8_outer_vec_scales(m, n, k, DType::kBF16);
  }
  // Whether a bf16-activation FP8 GEMM of this shape has run through cuBLASLt (else the calls
  // fell back to the GEMV); for benchmarks.
  bool fp8_gemm_planned(int64_t m, int64_t n, int64_t k) const {
    return linear_->fp8_gemm_planned(m, n, k, DType::kBF16);
  }
  void set_attention_options(const kernels::cuda::AttentionOptions& options) {
    attention_options_ = options;
  }
  // Grows the scratch workspace to at least `bytes` now (outside any capture).
  Status reserve_workspace(int64_t bytes);

 private:
  CudaBackend() = default;
  Status init(int device);
  // Logs a failed op (skipped); aborts on errors that poison the context.
  void report(const Status& status, const char* op);
  // linear() for FP8 weights (LinearWeight::scale set): fp8_gemv for up to
  // kernels::cuda::kFp8GemvMaxRows rows, else per-token activation quantization into the
  // workspace and cuBLASLt's FP8 GEMM (fp8_gemv again where cuBLASLt has no FP8 algorithm).
  void linear_fp8(const TensorView& x, const LinearWeight& w, const TensorView& out);
  void check_sticky(const char* op);
  Result<void*> workspace(int64_t bytes);
  void copy_from_pageable(void* dst, const void* src, int64_t bytes);
  void copy_to_pageable(void* dst, const void* src, int64_t bytes);
  // copy_pages on `stream`; the gather kernel flags device-side index errors in *error_flag (a
  // device address).
  Status copy_pages_on(const kernels::PageCopyParams& params, cudaStream_t stream,
                       int32_t* error_flag);
  // The error a gather kernel flagged in `flag` (a host address), clearing it; call after the
  // kernel's stream drained.
  static Status take_copy_flag(int32_t* flag);
  Result<void*> allocate_host(int64_t bytes);
  // A large host allocation (at least two kHostChunkBytes chunks) pinned chunk by chunk in one
  // contiguous mapping: all of it pinned, or an error that says how much could be pinned (the
  // caller asks for less). Null when this device cannot address registered memory at its host
  // address (then the chunks would not be contiguous for kernels): the caller falls back.
  Result<void*> allocate_host_chunked(int64_t bytes);

  enum class HostKind : uint8_t { kAllocated, kRegistered, kRegisteredChunks, kPageable };
  struct HostBlock {
    int64_t bytes = 0;
    HostKind kind = HostKind::kAllocated;
  };

  int device_ = 0;
  int num_sms_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernels::cuda::CublasLtLinear> linear_;
  void* lt_workspace_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  int64_t workspace_epoch_ = 0;  // bumped when the workspace moves
  // Pinned staging for pageable copies: two chunks, each with an event marking its last use.
  void* staging_ = nullptr;
  int64_t staging_chunk_bytes_ = 0;
  cudaEvent_t staging_events_[2] = {nullptr, nullptr};
  int staging_next_ = 0;
  kernels::cuda::AttentionOptions attention_options_;
  bool use_gemv_ = true;
  int64_t fp8_gemv_max_rows_ = -1;
  // Fault injection for the GPU error tests: an attention call over exactly this many query
  // tokens (LONGSERVE_CUDA_FAULT_ATTENTION_TOKENS) is replaced by a real, non-sticky CUDA error
  // from the runtime, as a failed launch would give. 0: off.
  int64_t fault_attention_tokens_ = 0;
  CopyFault copy_fault_;  // LONGSERVE_FAULT_COPY_PAGES (backend/copy_fault.h)
  Status error_;
  bool capturing_ = false;
  Status capture_error_;
  std::vector<cudaGraphExec_t> graphs_;
  // copy_pages: the gather kernel's error word (mapped pinned; host and device addresses) and
  // the memcpy batch's descriptor scratch.
  int32_t* copy_flag_host_ = nullptr;
  int32_t* copy_flag_device_ = nullptr;
  std::vector<void*> batch_dsts_;
  std::vector<const void*> batch_srcs_;
  std::vector<size_t> batch_sizes_;
  // Live kHost allocations and how each was obtained (released accordingly).
  mutable std::mutex host_mu_;
  std::unordered_map<void*, HostBlock> host_blocks_;
  bool host_pointer_is_device_pointer_ = false;  // cudaDevAttrCanUseHostPointerForRegisteredMem
  HostPinning host_pinning_ = HostPinning::kAlloc;
  bool warned_registered_ = false;
  bool warned_pageable_ = false;
  // Background saves, created at the first save_pages.
  PageSaveOptions save_options_;
  std::unique_ptr<PageSaver> saver_;
};

}  // namespace ls
