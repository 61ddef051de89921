#pragma once
// The CPU backend: host memory (64-byte aligned, both tiers are plain RAM), f32 activations,
// ops dispatched synchronously to kernels/cpu over one ThreadPool. Shape or dtype mismatches
// are logged and the op is skipped (ops return nothing; bad input never crashes).
//
// Beyond the Backend interface it offers add_rmsnorm (the residual add fused with the next
// norm) and access to its pool, for CPU-aware callers.

#include <string>

#include "backend/backend.h"
#include "backend/copy_fault.h"
#include "core/thread_pool.h"

namespace ls {

class CpuBackend final : public Backend {
 public:
  // num_threads <= 0: all cores.
  explicit CpuBackend(int num_threads);

  Device device() const override { return Device::kCpu; }
  std::string name() const override;
  DType act_dtype() const override { return DType::kF32; }

  Result<Buffer> allocate(int64_t bytes, MemoryTier tier = MemoryTier::kDevice) override;
  // Large buffers are anonymous mappings, zero until first touched: nothing to clear.
  Result<Buffer> allocate_zeroed(int64_t bytes, MemoryTier tier = MemoryTier::kDevice) override;
  Status take_error() override;
  void release(void* data, int64_t bytes, MemoryTier tier) override;
  void copy_bytes(void* dst, const void* src, int64_t bytes) override;
  void fill_zero(void* dst, int64_t bytes) override;
  void synchronize() override {}

  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override;
  void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id,
                       const TensorView& out) override;
  void rmsnorm(const TensorView& x, const TensorView& w, float eps, const TensorView& out) override;
  void linear(const TensorView& x, const LinearWeight& w, const TensorView& out) override;
  // Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K (kernels/cpu/quant_matmul.h).
  bool reads_quantized(kernels::QuantType /*type*/) const override { return true; }
  void rope(const TensorView& x, const TensorView& cos, const TensorView& sin,
            int64_t rotary_dim) override;
  void qkv_split_rope(const TensorView& qkv, const TensorView& q_norm, const TensorView& k_norm,
                      float eps, const TensorView& cos, const TensorView& sin, int64_t rotary_dim,
                      const TensorView& q, const TensorView& k, const TensorView& v) override;
  void silu_mul(const TensorView& gate_up, const TensorView& out) override;
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
  void page_residency(const kernels::PageResidencyParams& params) override;
  void page_residency_reset(const kernels::ResidencyResetParams& params) override;

  // x += residual; out = rmsnorm(x) * w. x, residual, out: [R, D] f32 (out may alias x);
  // w: [D] f32.
  void add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& w, float eps,
                   const TensorView& out) override;

  ThreadPool& pool() { return pool_; }

 private:
  ThreadPool pool_;
  Status error_;  // the first op skipped since the last take_error()
  CopyFault copy_fault_;  // LONGSERVE_FAULT_COPY_PAGES (backend/copy_fault.h)
};

}  // namespace ls
