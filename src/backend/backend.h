#pragma once
// The Backend interface: memory per tier, copies, synchronisation and op dispatch. The model
// layer runs the same forward on any backend; a backend never decides policy.
//
// Conventions for every op:
//  - tensors live on this backend's device (memory from allocate(kDevice)); shapes are in
//    each signature's comment;
//  - activations use act_dtype() (f32 on the CPU, bf16 on CUDA); weights may be f32/bf16/f16;
//  - ops are asynchronous on CUDA (one stream, in order); synchronize() waits for all of them.

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/page_copy.h"
#include "kernels/page_residency.h"
#include "kernels/paged_kv.h"
#include "kernels/quant_format.h"
#include "kernels/shared_prefix.h"

namespace ls {

enum class MemoryTier : uint8_t {
  kDevice,  // where kernels run (host RAM for the CPU backend, HBM for CUDA)
  kHost,    // host RAM, pinned when the backend is a GPU (transfers, offloaded KV)
};

class Backend;

// Live kHost memory of a backend by kind. A GPU backend pins host memory (page-locked: DMA and
// kernels reach it directly); when pinning fails it falls back to pageable memory with a warning,
// and pageable_bytes says how much. Backends without pinning report zeros.
struct HostMemoryStats {
  int64_t pinned_bytes = 0;
  int64_t pageable_bytes = 0;
};

// Owning, move-only allocation from a Backend.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* data, int64_t bytes, MemoryTier tier)
      : owner_(owner), data_(data), bytes_(bytes), tier_(tier) {}
  ~Buffer();
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemoryTier tier() const { return tier_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // A contiguous view of the start of the buffer (must fit).
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  MemoryTier tier_ = MemoryTier::kDevice;
};

// A linear layer's parameters: y = x · w^T + bias.
struct LinearWeight {
  TensorView w;     // [out_features, in_features] f32/bf16/f16; data null when `quant` is set
  TensorView bias;  // [out_features] f32, or empty
  // Set when the weight stays in ggml's quantized blocks (GGUF on a backend whose
  // reads_quantized() accepts every part's type); w then carries only the shape.
  std::shared_ptr<const kernels::QuantMatrix> quant;
  // Set for FP8 weights (--quantization fp8, or an FP8 checkpoint on a backend that reads e4m3):
  // w is then [out_features, in_features] e4m3 codes (dtype kU8) and the real weight row r is
  // e4m3(w[r]) * scale[r]. Only a backend whose reads_fp8() accepts the shape gets such weights.
  TensorView scale;  // [out_features] f32, or empty
  bool is_fp8() const { return !scale.empty(); }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu (2 threads)", "cuda:0 NVIDIA H100 ..."
  virtual DType act_dtype() const = 0;
  // The dtype this backend computes linear layers with for weights stored as `stored`
  // (CPU: as stored, converting in registers; CUDA: bf16).
  virtual DType weight_dtype_for(DType stored) const { return stored; }
  // Whether linear() reads weights kept in `type` blocks (LinearWeight::quant) directly.
  virtual bool reads_quantized(kernels::QuantType /*type*/) const { return false; }
  // Whether linear() reads FP8 e4m3 weights with per-output-row scales (LinearWeight::scale)
  // of `in_features` columns.
  virtual bool reads_fp8(int64_t /*in_features*/) const { return false; }
  // Quantizes each row of x [rows, cols] (f32, bf16 or f16, in this backend's memory) to e4m3
  // codes [rows, cols] (u8) and one f32 scale per row [rows], bit for bit as core/fp8.h's
  // quantize_row_e4m3 does for finite rows (a row holding an infinity or a NaN may differ in a
  // NaN code's sign); enqueued like an op (take_error() reports a fault). The loader
  // quantizes `--quantization fp8` weights with it, so a backend whose reads_fp8() accepts
  // shapes implements it; kUnimplemented here.
  virtual Status quantize_fp8_rows(const TensorView& /*x*/, const TensorView& /*codes*/,
                                   const TensorView& /*scales*/) {
    return unimplemented("{} does not quantize FP8 rows", name());
  }

  // ---- memory ----
  virtual Result<Buffer> allocate(int64_t bytes, MemoryTier tier = MemoryTier::kDevice) = 0;
  // Memory that reads as zero. Backends whose fresh memory is already zero (the CPU maps large
  // buffers lazily) override it, so a large KV cache costs nothing until it is used.
  virtual Result<Buffer> allocate_zeroed(int64_t bytes, MemoryTier tier = MemoryTier::kDevice);
  // Called by ~Buffer.
  virtual void release(void* data, int64_t bytes, MemoryTier tier) = 0;
  // Copies bytes between any two tiers of this backend (or plain host memory).
  virtual void copy_bytes(void* dst, const void* src, int64_t bytes) = 0;
  virtual void fill_zero(void* dst, int64_t bytes) = 0;
  // Waits until every queued op has finished.
  virtual void synchronize() = 0;
  // Makes this backend's device current for the calling thread (CUDA: cudaSetDevice), for a
  // thread other than the one that created it (a tensor-parallel rank's worker).
  virtual void bind_thread() {}
  // The first failure of an op since the last call (ops return nothing, so a bad view or a
  // device fault is recorded here), then clears it. Callers check it after synchronize().
  virtual Status take_error() { return {}; }
  // ---- recorded steps (CUDA graphs) ----
  // A backend that can record a sequence of ops once and relaunch it (same pointers, same
  // host-side scalars) says so here; the others refuse every call below. A recording fails
  // (end_capture returns the error, nothing ran) when an op cannot be recorded: a copy from or to
  // pageable memory, a synchronize(), scratch that would have to grow. Run the same sequence once
  // unrecorded first, so the scratch is sized.
  virtual bool can_record() const { return false; }
  virtual Status begin_capture() { return unimplemented("{} cannot record ops", name()); }
  // Returns the id of the recording.
  virtual Result<int32_t> end_capture() { return unimplemented("{} cannot record ops", name()); }
  // Enqueues recording `graph`.
  virtual Status replay(int32_t /*graph*/) { return unimplemented("{} cannot record ops", name()); }
  // Drops the recordings; a recording still under way (its step threw) is ended and discarded
  // first. Call on the thread that began it.
  virtual void drop_graphs() {}
  // Ends and discards a recording still under way (begin_capture() without end_capture(), as when
  // the step being recorded threw); nothing when none is. Call on the thread that began it.
  virtual void abort_capture() {}
  // Changes whenever memory that recorded ops point at moved (the scratch grew): recordings made
  // under another epoch are stale and must be dropped.
  virtual int64_t recording_epoch() const { return 0; }

  // Free and total bytes of kDevice memory (GPU: cudaMemGetInfo; CPU: physical RAM).
  virtual int64_t device_memory_free_bytes() const;
  virtual int64_t device_memory_total_bytes() const;
  // kHost memory allocated and not yet released, pinned and pageable (for /metrics).
  virtual HostMemoryStats host_memory_stats() const { return {}; }

  // ---- ops ----
  // out[t, :] = table[ids[t], :]; ids: [T] i32; table: [V, H]; out: [T, H] act_dtype.
  virtual void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) = 0;
  // Vocabulary-parallel lookup (model/tensor_parallel.h): table holds the V rows of ids
  // [first_id, first_id + V); out[t, :] = table[ids[t] - first_id, :] for ids in that range and
  // zeros for every other id (another rank's row; an all-reduce sums the ranks' outputs).
  virtual void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id,
                               const TensorView& out) = 0;
  // out = rmsnorm(x) * w per row; x, out: [R, D] act_dtype (may alias); w: [D] f32.
  virtual void rmsnorm(const TensorView& x, const TensorView& w, float eps,
                       const TensorView& out) = 0;
  // out[M, N] = x[M, K] · w^T + bias.
  virtual void linear(const TensorView& x, const LinearWeight& w, const TensorView& out) = 0;
  // Rotates x: [T, H, D] act_dtype in place on the first rotary_dim dims; cos, sin: [T, rotary/2]
  // f32.
  virtual void rope(const TensorView& x, const TensorView& cos, const TensorView& sin,
                    int64_t rotary_dim) = 0;
  // The fused QKV projection's output split for attention: qkv [T, (Hq + 2 Hkv) * D] (q heads,
  // then k heads, then v heads) into q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]; q and k get the
  // per-head rmsnorm (q_norm / k_norm: [D] f32, or empty for none; rounded to act dtype) and then
  // RoPE on their first rotary_dim dims (cos, sin: [T, rotary_dim/2] f32), exactly as the
  // rmsnorm and rope ops would.
  virtual void qkv_split_rope(const TensorView& qkv, const TensorView& q_norm,
                              const TensorView& k_norm, float eps, const TensorView& cos,
                              const TensorView& sin, int64_t rotary_dim, const TensorView& q,
                              const TensorView& k, const TensorView& v) = 0;
  // out[T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]; gate_up: [T, 2I].
  virtual void silu_mul(const TensorView& gate_up, const TensorView& out) = 0;
  // out[M, I] = silu(gate) * up of gate_up = x · w^T + bias ([M, 2I]: gate columns, then up
  // columns), rounded to the act dtype before the product, exactly as linear into `scratch`
  // ([M, 2I]) followed by silu_mul. Backends fuse it where they can (scratch then unused).
  virtual void linear_silu_mul(const TensorView& x, const LinearWeight& w, const TensorView& scratch,
                               const TensorView& out) {
    linear(x, w, scratch);
    silu_mul(scratch, out);
  }
  // x += y, same shape.
  virtual void add_inplace(const TensorView& x, const TensorView& y) = 0;
  // x += residual, then out = rmsnorm(x) * w: the pre-norm block's "add the sublayer output,
  // normalise for the next one". Backends fuse it into one pass; the default runs the two ops.
  virtual void add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& w,
                           float eps, const TensorView& out) {
    add_inplace(x, residual);
    rmsnorm(x, w, eps, out);
  }
  // Copies rows: out[i, :] = x[rows[i], :]; rows: [R] i32 on device; x: [T, H]; out: [R, H].
  virtual void gather_rows(const TensorView& x, const TensorView& rows, const TensorView& out) = 0;
  // Converts between float dtypes (e.g. bf16 logits to f32); same numel.
  virtual void convert(const TensorView& src, const TensorView& dst) = 0;

  // Paged KV and attention (plain-data params, see kernels/paged_kv.h).
  // With params.summaries set, kv_append also serves the index request (the GPU in one launch).
  virtual void kv_append(const kernels::KvAppendParams& params) = 0;
  virtual void page_summary_update(const kernels::SummaryUpdateParams& params) = 0;
  // Two-level summaries: folds stored fine summaries of a sequence's pages into its coarse row.
  virtual void coarse_fold_pages(const kernels::CoarseFoldParams& params) = 0;
  virtual void page_select(const kernels::PageSelectParams& params) = 0;
  virtual void attention(const kernels::AttentionParams& params) = 0;
  // Decode attention with a shared prefix computed once per group (kernels/shared_prefix.h): the
  // same result as attention(params.attn) up to fp32 summation order. The plan's arrays are in
  // device memory. A backend whose kernel cannot serve the pool's format runs attention(attn).
  virtual void shared_prefix_attention(const kernels::SharedPrefixParams& params) = 0;
  // Copies a batch of pages between two page arrays of any tier (kernels/page_copy.h): the
  // transfer of the hierarchical KV memory. Asynchronous like every op; faults go to take_error().
  virtual void copy_pages(const kernels::PageCopyParams& params) = 0;
  // Residency lookup and replacement of the device page cache (kernels/page_residency.h): the
  // hierarchical KV memory's per-layer op, writing the copy list copy_pages then runs. Overflow
  // goes to params.error (device memory), bad params to take_error().
  virtual void page_residency(const kernels::PageResidencyParams& params) = 0;
  // Empties one request's partition of the page cache.
  virtual void page_residency_reset(const kernels::ResidencyResetParams& params) = 0;

  // ---- background page saves (new KV pages to their host home, docs/hierarchical-kv-transfers.md)
  // Copies pages as copy_pages does, but beside the ops queued after it instead of before them:
  // it starts once every op queued before the call has finished (so it sees the pages' final
  // contents) and later ops do not wait for it. params: a host count and host index lists (read
  // during the call; the caller may reuse them at once), sources in kDevice memory, destinations
  // in kHost memory. Until the returned ticket completes the caller must neither write the
  // source pages nor read the destination pages. Bad params: an error, nothing enqueued. Not
  // recordable (refused during a capture). The default (CPU) copies at once.
  virtual Result<int64_t> save_pages(const kernels::PageCopyParams& params) {
    copy_pages(params);
    LS_RETURN_IF_ERROR(take_error());
    return ++saves_issued_;
  }
  // The highest ticket whose save has finished (saves finish in ticket order); never blocks.
  virtual int64_t saves_completed() { return saves_issued_; }
  // Blocks until save `ticket` (and every earlier one) has finished; returns the first error of
  // a save that failed since the last call.
  virtual Status wait_saves(int64_t /*ticket*/) { return {}; }

 private:
  int64_t saves_issued_ = 0;  // the default save_pages' tickets
};

// Creates the CPU backend with `num_threads` threads (<= 0: all cores).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace ls
