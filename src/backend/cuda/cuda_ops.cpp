// CudaBackend ops: shape and dtype checks on the host (a mismatch is logged and the op skipped,
// as on the CPU backend), then one enqueue into kernels/cuda.

#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "core/log.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/page_residency.h"
#include "kernels/cuda/paged_ops.h"
#include "kernels/cuda/qkv_split.h"
#include "kernels/cuda/shared_prefix_attention.h"

namespace ls {

namespace {

namespace kc = kernels::cuda;

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

bool check(bool condition, const char* op, const std::string& what) {
  if (!condition) LS_LOG_ERROR("cuda backend: {} skipped: {}", op, what);
  return condition;
}

bool float_contiguous(const TensorView& t) {
  return t.data != nullptr && is_float(t.dtype) && t.is_contiguous();
}

}  // namespace

void CudaBackend::embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  embedding_slice(ids, table, 0, out);
}

void CudaBackend::embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id,
                                  const TensorView& out) {
  const char* op = "embedding";
  if (!check(ids.dtype == DType::kI32 && ids.ndim == 1 && ids.is_contiguous(), op,
             "ids must be [T] i32") ||
      !check(table.ndim == 2 && float_contiguous(table), op, "table must be [V, H] float") ||
      !check(float_contiguous(out) && out.ndim == 2 && out.dim(0) == ids.dim(0) &&
                 out.dim(1) == table.dim(1),
             op, "out must be [T, H] float, got " + out.describe())) {
    return;
  }
  report(kc::embedding(ids.ptr<int32_t>(), ids.dim(0), table.data, table.dtype, table.dim(0),
                       table.dim(1), first_id, out.data, out.dtype, stream_),
         op);
}

void CudaBackend::rmsnorm(const TensorView& x, const TensorView& w, float eps,
                          const TensorView& out) {
  const char* op = "rmsnorm";
  if (!check(float_contiguous(x) && x.ndim >= 1 && float_contiguous(out) && out.dtype == x.dtype &&
                 out.numel() == x.numel(),
             op, "x and out must be contiguous float tensors of one dtype and size") ||
      !check(w.dtype == DType::kF32 && w.is_contiguous() && w.data && w.numel() == x.dim(-1), op,
             "w must be [D] f32")) {
    return;
  }
  const int64_t dim = x.dim(-1);
  report(kc::rmsnorm(x.data, w.ptr<float>(), eps, x.numel() / std::max<int64_t>(1, dim), dim,
                     x.dtype, out.data, stream_),
         op);
}

void CudaBackend::add_rmsnorm(const TensorView& x, const TensorView& residual, const TensorView& w,
                              float eps, const TensorView& out) {
  const char* op = "add_rmsnorm";
  if (!check(float_contiguous(x) && x.ndim >= 1 && float_contiguous(residual) &&
                 residual.dtype == x.dtype && residual.numel() == x.numel() &&
                 float_contiguous(out) && out.dtype == x.dtype && out.numel() == x.numel(),
             op, "x, residual and out must be contiguous float tensors of one dtype and size") ||
      !check(w.dtype == DType::kF32 && w.is_contiguous() && w.data && w.numel() == x.dim(-1), op,
             "w must be [D] f32")) {
    return;
  }
  const int64_t dim = x.dim(-1);
  report(kc::add_rmsnorm(x.data, residual.data, w.ptr<float>(), eps,
                         x.numel() / std::max<int64_t>(1, dim), dim, x.dtype, out.data, stream_),
         op);
}

void CudaBackend::linear(const TensorView& x, const LinearWeight& w, const TensorView& out) {
  const char* op = "linear";
  if (w.is_fp8()) {
    linear_fp8(x, w, out);
    return;
  }
  if (!check(float_contiguous(x) && x.ndim == 2, op,
             "x must be [M, K] contiguous float, got " + x.describe()) ||
      !check(
          w.w.ndim == 2 && float_contiguous(w.w) && w.w.dtype == x.dtype && w.w.dim(1) == x.dim(1),
          op, "w must be [N, K] of x's dtype, got " + w.w.describe()) ||
      !check(w.bias.empty() || (w.bias.dtype == DType::kF32 && w.bias.is_contiguous() &&
                                w.bias.numel() == w.w.dim(0)),
             op, "bias must be [N] f32") ||
      !check(float_contiguous(out) && out.dtype == x.dtype && out.ndim == 2 &&
                 out.dim(0) == x.dim(0) && out.dim(1) == w.w.dim(0),
             op, "out must be [M, N] of x's dtype, got " + out.describe())) {
    return;
  }
  const float* bias = w.bias.empty() ? nullptr : w.bias.ptr<float>();
  if (use_gemv_ && kc::gemv_supports(x.data, w.w.data, x.dim(0), x.dim(1), x.dtype)) {
    report(kc::gemv(x.data, w.w.data, bias, out.data, x.dim(0), w.w.dim(0), x.dim(1), x.dtype,
                    stream_),
           op);
    return;
  }
  report(linear_->run(x.data, w.w.data, bias, out.data, x.dim(0), w.w.dim(0), x.dim(1), x.dtype,
                      stream_),
         op);
}

void CudaBackend::linear_fp8(const TensorView& x, const LinearWeight& w, const TensorView& out) {
  const char* op = "linear (fp8)";
  if (!check(float_contiguous(x) && x.ndim == 2 && x.dtype != DType::kF32, op,
             "x must be [M, K] contiguous bf16/f16, got " + x.describe()) ||
      !check(w.w.ndim == 2 && w.w.data && w.w.is_contiguous() && w.w.dtype == DType::kU8 &&
                 w.w.dim(1) == x.dim(1),
             op, "w must be [N, K] e4m3 (u8), got " + w.w.describe()) ||
      !check(w.scale.dtype == DType::kF32 && w.scale.is_contiguous() &&
                 w.scale.numel() == w.w.dim(0),
             op, "scale must be [N] f32") ||
      !check(w.bias.empty() || (w.bias.dtype == DType::kF32 && w.bias.is_contiguous() &&
                                w.bias.numel() == w.w.dim(0)),
             op, "bias must be [N] f32") ||
      !check(float_contiguous(out) && out.dtype == x.dtype && out.ndim == 2 &&
                 out.dim(0) == x.dim(0) && out.dim(1) == w.w.dim(0),
             op, "out must be [M, N] of x's dtype, got " + out.describe()) ||
      !check(kc::fp8_gemv_supports(x.data, w.w.data, x.dim(0), x.dim(1), x.dtype), op,
             "K must be a multiple of 16 and x, w 16-byte aligned")) {
    return;
  }
  const int64_t m = x.dim(0), n = w.w.dim(0), k = x.dim(1);
  const float* bias = w.bias.empty() ? nullptr : w.bias.ptr<float>();
  const float* w_scale = w.scale.ptr<float>();
  const auto gemv = [&] {
    report(kc::fp8_gemv(x.data, w.w.data, w_scale, bias, out.data, m, n, k, x.dtype, stream_), op);
  };
  const bool gemv_rows = fp8_gemv_max_rows_ < 0 ? kc::fp8_prefers_gemv(m, n)
                                                : m <= fp8_gemv_max_rows_;
  if ((use_gemv_ && gemv_rows) ||
      !kc::CublasLtLinear::fp8_supported(w.w.data, w.w.data, out.data, n, k, x.dtype)) {
    gemv();
    return;
  }
  // Activations quantized per token into the workspace: [m, k] e4m3, then [m] f32 scales.
  const int64_t codes_bytes = (m * k + 255) / 256 * 256;
  Result<void*> ws = workspace(codes_bytes + m * 4);
  if (!ws.ok()) {
    report(ws.status(), op);
    return;
  }
  void* xq = *ws;
  auto* x_scale = reinterpret_cast<float*>(static_cast<char*>(*ws) + codes_bytes);
  Status s = kc::quantize_rows_e4m3(x.data, m, k, x.dtype, xq, x_scale, stream_);
  if (s.ok()) {
    s = linear_->run_fp8(xq, x_scale, w.w.data, w_scale, bias, out.data, m, n, k, x.dtype, stream_);
    if (s.code() == StatusCode::kUnimplemented) {  // no FP8 algorithm for the shape
      gemv();
      return;
    }
  }
  report(s, op);
}

Status CudaBackend::quantize_fp8_rows(const TensorView& x, const TensorView& codes,
                                      const TensorView& scales) {
  const bool ok = float_contiguous(x) && x.ndim == 2 && codes.is_contiguous() && codes.ndim == 2 &&
                  codes.dtype == DType::kU8 && codes.dim(0) == x.dim(0) &&
                  codes.dim(1) == x.dim(1) && scales.is_contiguous() &&
                  scales.dtype == DType::kF32 && scales.numel() == x.dim(0);
  if (!ok) {
    return invalid_argument(
        "quantize_fp8_rows: x must be [rows, cols] of a float dtype, codes [rows, cols] u8 and "
        "scales [rows] f32, all contiguous");
  }
  return kc::quantize_rows_e4m3(x.data, x.dim(0), x.dim(1), x.dtype, codes.data,
                                scales.ptr<float>(), stream_);
}

void CudaBackend::linear_silu_mul(const TensorView& x, const LinearWeight& w,
                                  const TensorView& scratch, const TensorView& out) {
  const bool fused = use_gemv_ && float_contiguous(x) && x.ndim == 2 && w.w.ndim == 2 &&
                     float_contiguous(w.w) && w.w.dtype == x.dtype && w.w.dim(1) == x.dim(1) &&
                     w.w.dim(0) % 2 == 0 &&
                     (w.bias.empty() || (w.bias.dtype == DType::kF32 && w.bias.is_contiguous() &&
                                         w.bias.numel() == w.w.dim(0))) &&
                     float_contiguous(out) && out.dtype == x.dtype && out.ndim == 2 &&
                     out.dim(0) == x.dim(0) && out.dim(1) * 2 == w.w.dim(0) &&
                     kc::gemv_supports(x.data, w.w.data, x.dim(0), x.dim(1), x.dtype);
  if (!fused) {
    Backend::linear_silu_mul(x, w, scratch, out);  // validates and reports like the two ops
    return;
  }
  report(kc::gemv_silu_mul(x.data, w.w.data, w.bias.empty() ? nullptr : w.bias.ptr<float>(),
                           out.data, x.dim(0), w.w.dim(0), x.dim(1), x.dtype, stream_),
         "linear_silu_mul");
}

void CudaBackend::rope(const TensorView& x, const TensorView& cos, const TensorView& sin,
                       int64_t rotary_dim) {
  const char* op = "rope";
  if (!check(float_contiguous(x) && x.ndim == 3, op, "x must be [T, H, D] float") ||
      !check(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= x.dim(2), op,
             "bad rotary_dim") ||
      !check(cos.dtype == DType::kF32 && sin.dtype == DType::kF32 && cos.is_contiguous() &&
                 sin.is_contiguous() && cos.numel() == x.dim(0) * rotary_dim / 2 &&
                 sin.numel() == cos.numel(),
             op, "cos/sin must be [T, rotary_dim / 2] f32")) {
    return;
  }
  report(kc::rope(x.data, x.dim(0), x.dim(1), x.dim(2), rotary_dim, cos.ptr<float>(),
                  sin.ptr<float>(), x.dtype, stream_),
         op);
}

void CudaBackend::qkv_split_rope(const TensorView& qkv, const TensorView& q_norm,
                                 const TensorView& k_norm, float eps, const TensorView& cos,
                                 const TensorView& sin, int64_t rotary_dim, const TensorView& q,
                                 const TensorView& k, const TensorView& v) {
  const char* op = "qkv_split_rope";
  const bool shapes = float_contiguous(q) && q.ndim == 3 && float_contiguous(k) && k.ndim == 3 &&
                      float_contiguous(v) && v.ndim == 3 && k.dtype == q.dtype &&
                      v.dtype == q.dtype && k.dim(0) == q.dim(0) && v.dim(0) == q.dim(0) &&
                      k.dim(2) == q.dim(2) && v.dim(1) == k.dim(1) && v.dim(2) == q.dim(2);
  if (!check(shapes, op, "q [T, Hq, D], k and v [T, Hkv, D] contiguous of one float dtype") ||
      !check(float_contiguous(qkv) && qkv.dtype == q.dtype &&
                 qkv.numel() == q.numel() + k.numel() + v.numel(),
             op, "qkv must be [T, (Hq + 2 Hkv) * D] of q's dtype") ||
      !check(cos.dtype == DType::kF32 && sin.dtype == DType::kF32 && cos.is_contiguous() &&
                 sin.is_contiguous() && cos.numel() == q.dim(0) * rotary_dim / 2 &&
                 sin.numel() == cos.numel(),
             op, "cos/sin must be [T, rotary_dim / 2] f32") ||
      !check(q_norm.empty() == k_norm.empty() &&
                 (q_norm.empty() || (q_norm.dtype == DType::kF32 && k_norm.dtype == DType::kF32 &&
                                     q_norm.numel() == q.dim(2) && k_norm.numel() == q.dim(2))),
             op, "q_norm and k_norm must both be [D] f32 or both empty")) {
    return;
  }
  kc::QkvSplitParams p;
  p.qkv = qkv.data;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.q_norm = q_norm.empty() ? nullptr : q_norm.ptr<float>();
  p.k_norm = k_norm.empty() ? nullptr : k_norm.ptr<float>();
  p.eps = eps;
  p.cos = cos.ptr<float>();
  p.sin = sin.ptr<float>();
  p.tokens = q.dim(0);
  p.q_heads = static_cast<int32_t>(q.dim(1));
  p.kv_heads = static_cast<int32_t>(k.dim(1));
  p.head_dim = static_cast<int32_t>(q.dim(2));
  p.rotary_dim = static_cast<int32_t>(rotary_dim);
  p.dtype = q.dtype;
  report(kc::qkv_split_rope(p, stream_), op);
}

void CudaBackend::silu_mul(const TensorView& gate_up, const TensorView& out) {
  const char* op = "silu_mul";
  if (!check(float_contiguous(gate_up) && gate_up.ndim == 2 && gate_up.dim(1) % 2 == 0, op,
             "gate_up must be [T, 2I] float") ||
      !check(float_contiguous(out) && out.dtype == gate_up.dtype && out.ndim == 2 &&
                 out.dim(0) == gate_up.dim(0) && out.dim(1) * 2 == gate_up.dim(1),
             op, "out must be [T, I] of gate_up's dtype")) {
    return;
  }
  report(kc::silu_mul(gate_up.data, gate_up.dim(0), out.dim(1), gate_up.dtype, out.data, stream_),
         op);
}

void CudaBackend::add_inplace(const TensorView& x, const TensorView& y) {
  if (!check(float_contiguous(x) && float_contiguous(y) && x.dtype == y.dtype &&
                 x.numel() == y.numel(),
             "add_inplace", "x and y must be contiguous float tensors of one dtype and size")) {
    return;
  }
  report(kc::add_inplace(x.data, y.data, x.numel(), x.dtype, stream_), "add_inplace");
}

void CudaBackend::gather_rows(const TensorView& x, const TensorView& rows, const TensorView& out) {
  const char* op = "gather_rows";
  if (!check(x.data && x.ndim == 2 && x.is_contiguous(), op, "x must be [T, H] contiguous") ||
      !check(rows.dtype == DType::kI32 && rows.ndim == 1 && rows.is_contiguous(), op,
             "rows must be [R] i32") ||
      !check(out.data && out.dtype == x.dtype && out.ndim == 2 && out.is_contiguous() &&
                 out.dim(0) == rows.dim(0) && out.dim(1) == x.dim(1),
             op, "out must be [R, H] of x's dtype")) {
    return;
  }
  report(kc::gather_rows(x.data, x.dim(0), dtype_nbytes(x.dtype, x.dim(1)), rows.ptr<int32_t>(),
                         rows.dim(0), out.data, stream_),
         op);
}

void CudaBackend::convert(const TensorView& src, const TensorView& dst) {
  if (!check(float_contiguous(src) && float_contiguous(dst) && src.numel() == dst.numel(),
             "convert", "src and dst must be contiguous float tensors of one size")) {
    return;
  }
  if (src.dtype == dst.dtype) {
    copy_bytes(dst.data, src.data, src.nbytes());
    return;
  }
  report(kc::convert(src.data, src.dtype, dst.data, dst.dtype, src.numel(), stream_), "convert");
}

void CudaBackend::kv_append(const kernels::KvAppendParams& params) {
  report(kc::kv_append(params, stream_), "kv_append");
}

void CudaBackend::page_summary_update(const kernels::SummaryUpdateParams& params) {
  report(kc::page_summary_update(params, stream_), "page_summary_update");
}

void CudaBackend::coarse_fold_pages(const kernels::CoarseFoldParams& params) {
  report(kc::coarse_fold_pages(params, stream_), "coarse_fold_pages");
}

void CudaBackend::page_select(const kernels::PageSelectParams& params) {
  const int64_t bytes = kc::page_select_workspace_bytes(params);
  Result<void*> ws = workspace(bytes);
  if (!ws.ok()) {
    report(ws.status(), "page_select");
    return;
  }
  report(kc::page_select(params, *ws, workspace_bytes_, stream_), "page_select");
}

void CudaBackend::attention(const kernels::AttentionParams& params) {
  if (fault_attention_tokens_ > 0 && params.num_tokens == fault_attention_tokens_) {
    // A real runtime error (invalid value, not sticky) instead of the launch.
    const cudaError_t err = cudaMemsetAsync(nullptr, 0, 1, stream_);
    report(internal_error("attention (injected fault): {} ({})", cudaGetErrorString(err),
                          cudaGetErrorName(err)),
           "attention");
    cudaGetLastError();
    return;
  }
  const int64_t bytes = kc::attention_workspace_bytes(params, num_sms_, attention_options_);
  Result<void*> ws = workspace(bytes);
  if (!ws.ok()) {
    report(ws.status(), "attention");
    return;
  }
  report(kc::paged_attention(params, *ws, workspace_bytes_, num_sms_, stream_, attention_options_),
         "attention");
}

void CudaBackend::shared_prefix_attention(const kernels::SharedPrefixParams& params) {
  // The tensor-core kernel reads plain pages of q's dtype with head_dim 64 or 128 and at most
  // 64 query heads per kv head; anything else (quantized pages) is the ordinary kernel's.
  const kernels::AttentionParams& a = params.attn;
  const bool served =
      (a.q_dtype == DType::kBF16 || a.q_dtype == DType::kF16) &&
      a.retrieval.quant == kernels::KvQuant::kNone && a.retrieval.dtype == a.q_dtype &&
      (a.head_dim == 64 || a.head_dim == 128) && a.num_kv_heads > 0 &&
      a.num_q_heads / a.num_kv_heads <= kc::kSharedPrefixMaxRows &&
      params.max_item_rows <= kc::kSharedPrefixMaxRows;
  if (!served) {
    attention(a);
    return;
  }
  Result<void*> ws = workspace(kc::shared_prefix_workspace_bytes(params));
  if (!ws.ok()) {
    report(ws.status(), "shared_prefix_attention");
    return;
  }
  report(kc::shared_prefix_attention(params, *ws, workspace_bytes_, stream_),
         "shared_prefix_attention");
}

void CudaBackend::page_residency(const kernels::PageResidencyParams& params) {
  report(kc::page_residency(params, stream_), "page_residency");
}

void CudaBackend::page_residency_reset(const kernels::ResidencyResetParams& params) {
  report(kc::page_residency_reset(params, stream_), "page_residency_reset");
}

}  // namespace ls
