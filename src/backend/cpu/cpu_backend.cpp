#include "backend/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "kernels/cpu/add.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/shared_prefix_attention.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_append.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/page_copy.h"
#include "kernels/cpu/page_residency.h"
#include "kernels/cpu/page_select.h"
#include "kernels/cpu/page_summary.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"

namespace ls {

namespace {

constexpr int64_t kAlignment = 64;
// Allocations of at least this many bytes are anonymous mappings (zero-filled lazily).
constexpr int64_t kMapThresholdBytes = int64_t{1} << 21;

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

// Records (first one wins) and logs why an op was skipped; returns the condition so checks
// read `if (!check_op(error_, ...)) return;`. take_error() hands the record to the caller.
bool check_op(Status& error, bool condition, const char* op, const std::string& what) {
  if (!condition) {
    LS_LOG_ERROR("cpu backend: {} skipped: {}", op, what);
    if (error.ok()) error = internal_error("cpu backend: {} skipped: {}", op, what);
  }
  return condition;
}

bool f32_contiguous(const TensorView& t) {
  return t.data != nullptr && t.dtype == DType::kF32 && t.is_contiguous();
}

// The embedding ops' shapes: ids [T] i32, table [V, H] float, out [T, H] f32.
bool check_embedding_args(Status& error, const TensorView& ids, const TensorView& table,
                          const TensorView& out, const char* op) {
  return check_op(error, ids.dtype == DType::kI32 && ids.ndim == 1 && ids.is_contiguous(), op,
                  "ids must be [T] i32") &&
         check_op(error, table.ndim == 2 && is_float(table.dtype) && table.is_contiguous(), op,
                  "table must be [V, H] float") &&
         check_op(error, f32_contiguous(out) && out.ndim == 2 && out.dim(0) == ids.dim(0) &&
                             out.dim(1) == table.dim(1),
                  op, "out must be [T, H] f32, got " + out.describe());
}

}  // namespace

CpuBackend::CpuBackend(int num_threads) : pool_(num_threads) {
  if (copy_fault_.armed()) {
    LS_LOG_WARN("cpu backend: fault injection on: copy_pages call {} fails", copy_fault_.at());
  }
}

std::string CpuBackend::name() const {
  return fmt::format("cpu ({} threads, {})", pool_.num_threads(),
                     kernels::cpu::isa_name(kernels::cpu::best_isa()));
}

Result<Buffer> CpuBackend::allocate(int64_t bytes, MemoryTier tier) {
  if (bytes < 0) return invalid_argument("cpu backend: cannot allocate {} bytes", bytes);
  // Refuse what can never fit instead of relying on overcommit (which may hand out the pages
  // and fail later, on first touch).
  const int64_t total = device_memory_total_bytes();
  if (total > 0 && bytes > total) {
    return resource_exhausted("cpu backend: {} bytes requested, the machine has {} bytes of RAM",
                              bytes, total);
  }
  // aligned_alloc needs a multiple of the alignment; never return null for 0 bytes.
  const int64_t rounded =
      std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded < bytes) return resource_exhausted("cpu backend: {} bytes is too large", bytes);
  void* data = nullptr;
  if (rounded >= kMapThresholdBytes) {
    // Large buffers (weights, KV cache) are mapped: pages come zeroed on first touch, so an
    // unused KV cache costs no time and no memory, and huge pages are asked for.
    data = mmap(nullptr, static_cast<size_t>(rounded), PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) data = nullptr;
    if (data) madvise(data, static_cast<size_t>(rounded), MADV_HUGEPAGE);
  } else {
    data = std::aligned_alloc(static_cast<size_t>(kAlignment), static_cast<size_t>(rounded));
  }
  if (!data) {
    return resource_exhausted("cpu backend: out of host memory allocating {} bytes ({})", bytes,
                              tier == MemoryTier::kDevice ? "device tier" : "host tier");
  }
  return Buffer(this, data, bytes, tier);
}

Result<Buffer> CpuBackend::allocate_zeroed(int64_t bytes, MemoryTier tier) {
  LS_ASSIGN_OR_RETURN(Buffer buf, allocate(bytes, tier));
  const int64_t rounded =
      std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded < kMapThresholdBytes) fill_zero(buf.data(), bytes);
  return buf;
}

void CpuBackend::release(void* data, int64_t bytes, MemoryTier) {
  const int64_t rounded =
      std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded >= kMapThresholdBytes) {
    munmap(data, static_cast<size_t>(rounded));
  } else {
    std::free(data);
  }
}

Status CpuBackend::take_error() {
  Status error = std::move(error_);
  error_ = Status{};
  return error;
}

void CpuBackend::copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::fill_zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

void CpuBackend::embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  const char* op = "embedding";
  if (!check_embedding_args(error_, ids, table, out, op)) return;
  const int64_t tokens = ids.dim(0), vocab = table.dim(0), hidden = table.dim(1);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (!check_op(error_, id[t] >= 0 && id[t] < vocab, op,
               fmt::format("token id {} outside [0, {})", id[t], vocab))) {
      std::memset(out.ptr<float>(), 0, static_cast<size_t>(out.nbytes()));
      return;
    }
  }
  kernels::cpu::embedding(id, tokens, table.data, table.dtype, hidden, out.ptr<float>(), pool_);
}

void CpuBackend::embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id,
                                 const TensorView& out) {
  if (!check_embedding_args(error_, ids, table, out, "embedding_slice")) return;
  kernels::cpu::embedding_slice(ids.ptr<int32_t>(), ids.dim(0), table.data, table.dtype,
                                table.dim(0), table.dim(1), first_id, out.ptr<float>(), pool_);
}

void CpuBackend::rmsnorm(const TensorView& x, const TensorView& w, float eps,
                         const TensorView& out) {
  const char* op = "rmsnorm";
  if (!check_op(error_, f32_contiguous(x) && x.ndim >= 1 && f32_contiguous(out) && out.numel() == x.numel(),
             op, "x and out must be contiguous f32 of one size") ||
      !check_op(error_, f32_contiguous(w) && w.numel() == x.dim(-1), op, "w must be [D] f32")) {
    return;
  }
  const int64_t dim = x.dim(-1);
  kernels::cpu::rmsnorm(x.ptr<float>(), w.ptr<float>(), eps, x.numel() / std::max<int64_t>(1, dim),
                        dim, out.ptr<float>(), pool_);
}

void CpuBackend::add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& w,
                             float eps, const TensorView& out) {
  const char* op = "add_rmsnorm";
  if (!check_op(error_, f32_contiguous(x) && x.ndim >= 1 && f32_contiguous(residual) &&
                 residual.numel() == x.numel() && f32_contiguous(out) && out.numel() == x.numel(),
             op, "x, residual and out must be contiguous f32 of one size") ||
      !check_op(error_, f32_contiguous(w) && w.numel() == x.dim(-1), op, "w must be [D] f32")) {
    return;
  }
  const int64_t dim = x.dim(-1);
  kernels::cpu::add_rmsnorm(x.ptr<float>(), residual.ptr<float>(), w.ptr<float>(), eps,
                            x.numel() / std::max<int64_t>(1, dim), dim, out.ptr<float>(), pool_);
}

void CpuBackend::linear(const TensorView& x, const LinearWeight& w, const TensorView& out) {
  const char* op = "linear";
  if (w.quant) {
    const kernels::QuantMatrix& q = *w.quant;
    bool whole_blocks = !q.parts.empty();
    for (const kernels::QuantPart& p : q.parts) {
      whole_blocks = whole_blocks && q.cols % kernels::quant_block_elems(p.type) == 0;
    }
    if (!check_op(error_, f32_contiguous(x) && x.ndim == 2 && x.dim(1) == q.cols, op,
                  "x must be [M, K] contiguous f32 with K = the quantized weight's columns, got " +
                      x.describe()) ||
        !check_op(error_, whole_blocks, op, "quantized weight rows must be whole blocks") ||
        !check_op(error_, w.bias.empty() || (f32_contiguous(w.bias) && w.bias.numel() == q.rows),
                  op, "bias must be [N] f32") ||
        !check_op(error_, f32_contiguous(out) && out.ndim == 2 && out.dim(0) == x.dim(0) &&
                              out.dim(1) == q.rows,
                  op, "out must be [M, N] f32, got " + out.describe())) {
      return;
    }
    kernels::cpu::quant_linear(q, x.ptr<float>(), x.dim(0),
                               w.bias.empty() ? nullptr : w.bias.ptr<float>(), out.ptr<float>(),
                               pool_);
    return;
  }
  if (!check_op(error_, f32_contiguous(x) && x.ndim == 2, op,
             "x must be [M, K] contiguous f32, got " + x.describe()) ||
      !check_op(error_, w.w.ndim == 2 && is_float(w.w.dtype) && w.w.is_contiguous() && w.w.dim(1) == x.dim(1),
             op, "w must be [N, K] float, got " + w.w.describe()) ||
      !check_op(error_, w.bias.empty() || (f32_contiguous(w.bias) && w.bias.numel() == w.w.dim(0)), op,
             "bias must be [N] f32") ||
      !check_op(error_, f32_contiguous(out) && out.ndim == 2 && out.dim(0) == x.dim(0) &&
                 out.dim(1) == w.w.dim(0),
             op, "out must be [M, N] f32, got " + out.describe())) {
    return;
  }
  kernels::cpu::matmul(x.ptr<float>(), x.dim(0), x.dim(1), w.w.data, w.w.dtype, w.w.dim(0),
                       w.bias.empty() ? nullptr : w.bias.ptr<float>(), out.ptr<float>(), pool_);
}

void CpuBackend::rope(const TensorView& x, const TensorView& cos, const TensorView& sin,
                      int64_t rotary_dim) {
  const char* op = "rope";
  if (!check_op(error_, f32_contiguous(x) && x.ndim == 3, op, "x must be [T, H, D] f32") ||
      !check_op(error_, rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= x.dim(2), op,
             "bad rotary_dim") ||
      !check_op(error_, f32_contiguous(cos) && f32_contiguous(sin) &&
                 cos.numel() == x.dim(0) * rotary_dim / 2 && sin.numel() == cos.numel(),
             op, "cos/sin must be [T, rotary_dim / 2] f32")) {
    return;
  }
  kernels::cpu::rope(x.ptr<float>(), x.dim(0), x.dim(1), x.dim(2), rotary_dim, cos.ptr<float>(),
                     sin.ptr<float>(), pool_);
}

void CpuBackend::qkv_split_rope(const TensorView& qkv, const TensorView& q_norm,
                                const TensorView& k_norm, float eps, const TensorView& cos,
                                const TensorView& sin, int64_t rotary_dim, const TensorView& q,
                                const TensorView& k, const TensorView& v) {
  const char* op = "qkv_split_rope";
  const bool shapes = f32_contiguous(q) && q.ndim == 3 && f32_contiguous(k) && k.ndim == 3 &&
                      f32_contiguous(v) && v.ndim == 3 && k.dim(0) == q.dim(0) &&
                      v.dim(0) == q.dim(0) && k.dim(2) == q.dim(2) && v.dim(1) == k.dim(1) &&
                      v.dim(2) == q.dim(2);
  if (!check_op(error_, shapes, op, "q [T, Hq, D], k and v [T, Hkv, D] must be contiguous f32") ||
      !check_op(error_, f32_contiguous(qkv) && qkv.numel() == q.numel() + k.numel() + v.numel(),
                op, "qkv must be [T, (Hq + 2 Hkv) * D] f32") ||
      !check_op(error_, rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= q.dim(2), op,
                "bad rotary_dim") ||
      !check_op(error_, f32_contiguous(cos) && f32_contiguous(sin) &&
                            cos.numel() == q.dim(0) * rotary_dim / 2 && sin.numel() == cos.numel(),
                op, "cos/sin must be [T, rotary_dim / 2] f32") ||
      !check_op(error_,
                q_norm.empty() == k_norm.empty() &&
                    (q_norm.empty() || (f32_contiguous(q_norm) && f32_contiguous(k_norm) &&
                                        q_norm.numel() == q.dim(2) && k_norm.numel() == q.dim(2))),
                op, "q_norm and k_norm must both be [D] f32 or both empty")) {
    return;
  }
  const int64_t tokens = q.dim(0), d = q.dim(2);
  const int64_t qn = q.dim(1) * d, kn = k.dim(1) * d;
  const float* src = qkv.ptr<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = src + t * (qn + 2 * kn);
    std::memcpy(q.ptr<float>() + t * qn, row, static_cast<size_t>(qn) * 4);
    std::memcpy(k.ptr<float>() + t * kn, row + qn, static_cast<size_t>(kn) * 4);
    std::memcpy(v.ptr<float>() + t * kn, row + qn + kn, static_cast<size_t>(kn) * 4);
  }
  if (!q_norm.empty()) {
    kernels::cpu::rmsnorm(q.ptr<float>(), q_norm.ptr<float>(), eps, tokens * q.dim(1), d,
                          q.ptr<float>(), pool_);
    kernels::cpu::rmsnorm(k.ptr<float>(), k_norm.ptr<float>(), eps, tokens * k.dim(1), d,
                          k.ptr<float>(), pool_);
  }
  kernels::cpu::rope(q.ptr<float>(), tokens, q.dim(1), d, rotary_dim, cos.ptr<float>(),
                     sin.ptr<float>(), pool_);
  kernels::cpu::rope(k.ptr<float>(), tokens, k.dim(1), d, rotary_dim, cos.ptr<float>(),
                     sin.ptr<float>(), pool_);
}

void CpuBackend::silu_mul(const TensorView& gate_up, const TensorView& out) {
  const char* op = "silu_mul";
  if (!check_op(error_, f32_contiguous(gate_up) && gate_up.ndim == 2 && gate_up.dim(1) % 2 == 0, op,
             "gate_up must be [T, 2I] f32") ||
      !check_op(error_, f32_contiguous(out) && out.ndim == 2 && out.dim(0) == gate_up.dim(0) &&
                 out.dim(1) * 2 == gate_up.dim(1),
             op, "out must be [T, I] f32")) {
    return;
  }
  kernels::cpu::silu_mul(gate_up.ptr<float>(), gate_up.dim(0), out.dim(1), out.ptr<float>(), pool_);
}

void CpuBackend::add_inplace(const TensorView& x, const TensorView& y) {
  if (!check_op(error_, f32_contiguous(x) && f32_contiguous(y) && x.numel() == y.numel(), "add_inplace",
             "x and y must be contiguous f32 of one size")) {
    return;
  }
  kernels::cpu::add_inplace(x.ptr<float>(), y.ptr<float>(), x.numel(), pool_);
}

void CpuBackend::gather_rows(const TensorView& x, const TensorView& rows, const TensorView& out) {
  const char* op = "gather_rows";
  if (!check_op(error_, x.data && x.ndim == 2 && x.is_contiguous(), op, "x must be [T, H] contiguous") ||
      !check_op(error_, rows.dtype == DType::kI32 && rows.ndim == 1 && rows.is_contiguous(), op,
             "rows must be [R] i32") ||
      !check_op(error_, out.data && out.dtype == x.dtype && out.ndim == 2 && out.is_contiguous() &&
                 out.dim(0) == rows.dim(0) && out.dim(1) == x.dim(1),
             op, "out must be [R, H] of x's dtype")) {
    return;
  }
  const int64_t row_bytes = dtype_nbytes(x.dtype, x.dim(1));
  const int32_t* idx = rows.ptr<int32_t>();
  for (int64_t r = 0; r < rows.dim(0); ++r) {
    char* dst = static_cast<char*>(out.data) + r * row_bytes;
    if (!check_op(error_, idx[r] >= 0 && idx[r] < x.dim(0), op,
               fmt::format("row {} outside [0, {})", idx[r], x.dim(0)))) {
      std::memset(dst, 0, static_cast<size_t>(row_bytes));
      continue;
    }
    std::memcpy(dst, static_cast<const char*>(x.data) + idx[r] * row_bytes,
                static_cast<size_t>(row_bytes));
  }
}

void CpuBackend::convert(const TensorView& src, const TensorView& dst) {
  if (!check_op(error_, src.data && dst.data && is_float(src.dtype) && is_float(dst.dtype) &&
                 src.is_contiguous() && dst.is_contiguous() && src.numel() == dst.numel(),
             "convert", "src and dst must be contiguous float tensors of one size")) {
    return;
  }
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype) {
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()));
  } else if (dst.dtype == DType::kF32) {
    convert_to_f32(src.dtype, src.data, dst.ptr<float>(), n);
  } else if (src.dtype == DType::kF32) {
    convert_from_f32(src.ptr<float>(), dst.dtype, dst.data, n);
  } else {  // f16 <-> bf16 through f32 chunks
    constexpr int64_t kChunk = 4096;
    std::vector<float> tmp(kChunk);
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t m = std::min(kChunk, n - i);
      convert_to_f32(src.dtype, static_cast<const uint16_t*>(src.data) + i, tmp.data(), m);
      convert_from_f32(tmp.data(), dst.dtype, static_cast<uint16_t*>(dst.data) + i, m);
    }
  }
}

void CpuBackend::kv_append(const kernels::KvAppendParams& params) {
  kernels::cpu::kv_append(params, pool_);
}

void CpuBackend::page_summary_update(const kernels::SummaryUpdateParams& params) {
  kernels::cpu::page_summary_update(params, pool_);
}

void CpuBackend::coarse_fold_pages(const kernels::CoarseFoldParams& params) {
  kernels::cpu::coarse_fold_pages(params, pool_);
}

void CpuBackend::page_select(const kernels::PageSelectParams& params) {
  kernels::cpu::page_select(params, pool_);
}

void CpuBackend::copy_pages(const kernels::PageCopyParams& params) {
  if (copy_fault_.trip()) {
    if (error_.ok()) {
      error_ = internal_error("copy_pages: injected fault (LONGSERVE_FAULT_COPY_PAGES={}): the "
                              "transfer failed, nothing was copied",
                              copy_fault_.at());
    }
    return;
  }
  Status status = kernels::cpu::page_copy(params, pool_);
  if (!status.ok() && error_.ok()) error_ = std::move(status);
}

void CpuBackend::page_residency(const kernels::PageResidencyParams& params) {
  Status status = kernels::cpu::page_residency(params, pool_);
  if (!status.ok() && error_.ok()) error_ = std::move(status);
}

void CpuBackend::page_residency_reset(const kernels::ResidencyResetParams& params) {
  Status status = kernels::cpu::page_residency_reset(params);
  if (!status.ok() && error_.ok()) error_ = std::move(status);
}

void CpuBackend::attention(const kernels::AttentionParams& params) {
  kernels::cpu::paged_attention(params, pool_);
}

void CpuBackend::shared_prefix_attention(const kernels::SharedPrefixParams& params) {
  Status status = kernels::cpu::shared_prefix_attention(params, pool_);
  if (!status.ok() && error_.ok()) error_ = std::move(status);
}

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace ls
