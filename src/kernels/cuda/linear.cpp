#include "kernels/cuda/linear.h"

#include <cublasLt.h>

#include <cmath>
#include <map>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_linear.h"

namespace ls::kernels::cuda {

namespace {

Status lt_status(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return internal_error("{}: cuBLASLt status {}", what, static_cast<int>(s));
}

#define LS_LT_RETURN_IF_ERROR(call) LS_RETURN_IF_ERROR(lt_status((call), #call))

int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int al : {16, 8, 4}) {
    if (a % static_cast<uintptr_t>(al) == 0) return al;
  }
  return 2;
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// One planned shape: descriptors, layouts and the chosen algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_fused = false;  // the BIAS epilogue is set on desc

  void destroy() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    desc = nullptr;
    a = b = c = nullptr;
  }
};

// (m, n, k, dtype, has_bias, align x, align w, align out)
using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, int, int, int>;

// One planned FP8 shape; `outer_vec` says whether the scales are cuBLASLt's (else
// scale_rows_cols runs after the product). (m, n, k, out dtype) key it: FP8 pointers are always
// 16-byte aligned.
struct Fp8Plan {
  Plan plan;
  bool outer_vec = false;
};
using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int>;

}  // namespace

struct CublasLtLinear::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  std::map<Key, Plan> plans;
  std::map<Fp8Key, Fp8Plan> fp8_plans;
  std::map<Fp8Key, bool> fp8_refused;  // shapes cuBLASLt has no FP8 algorithm for
  bool fp8_outer_vec_allowed = true;

  ~Impl() {
    for (auto& [key, plan] : plans) plan.destroy();
    for (auto& [key, plan] : fp8_plans) plan.plan.destroy();
    if (handle) cublasLtDestroy(handle);
  }

  // Column-major view of the row-major problem: out^T [n, m] = w [n, k] · x^T [k, m], i.e.
  // A = w stored k x n (transposed by op T), B = x stored k x m, C = out stored n x m.
  Status make_plan(const Key& key, bool try_bias, Plan& plan) {
    const auto [m, n, k, dt_int, has_bias, align_x, align_w, align_out] = key;
    const auto dt = static_cast<DType>(dt_int);
    const cudaDataType_t type = cuda_type(dt);
    const cublasComputeType_t compute =
        dt == DType::kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                         &op_t, sizeof(op_t)));
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                         &op_n, sizeof(op_n)));
    if (try_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                           &epi, sizeof(epi)));
      LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    LS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, type, static_cast<uint64_t>(k),
                                                     static_cast<uint64_t>(n), k));
    LS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, type, static_cast<uint64_t>(k),
                                                     static_cast<uint64_t>(m), k));
    LS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.c, type, static_cast<uint64_t>(n),
                                                     static_cast<uint64_t>(m), n));

    cublasLtMatmulPreference_t pref = nullptr;
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = static_cast<uint64_t>(workspace_bytes);
    const auto ua = static_cast<uint32_t>(align_w), ub = static_cast<uint32_t>(align_x),
               uc = static_cast<uint32_t>(align_out);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua,
                                         sizeof(ua));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub,
                                         sizeof(ub));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &uc,
                                         sizeof(uc));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &uc,
                                         sizeof(uc));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
        handle, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || returned == 0) {
      return internal_error("cuBLASLt has no algorithm for linear m={} n={} k={} {}{}", m, n, k,
                            dtype_name(dt), try_bias ? " with bias epilogue" : "");
    }
    plan.algo = result.algo;
    plan.bias_fused = try_bias;
    (void)has_bias;
    return {};
  }

  // The FP8 problem in the same column-major view as make_plan: A = w (e4m3, k x n, op T),
  // B = xq (e4m3, k x m, op N), C = D = out (n x m): the TN layout Hopper's FP8 kernels need.
  Status make_fp8_plan(const Fp8Key& key, bool outer_vec, Plan& plan) {
    const auto [m, n, k, dt_int] = key;
    const cudaDataType_t out_type = cuda_type(static_cast<DType>(dt_int));
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                         &op_t, sizeof(op_t)));
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                         &op_n, sizeof(op_n)));
    const int8_t fast_accum = 0;  // f32 accumulation throughout (long k: no drift)
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)));
    if (outer_vec) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
      LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
      // The heuristic offers no outer-vector algorithm while the scale pointers are unset (an
      // H200 with CUDA 13.0: none without, one with): give it a device address to look at;
      // run_fp8 sets the real vectors before every call.
      const void* placeholder = workspace;
      LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof(placeholder)));
      LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof(placeholder)));
    }
    LS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3,
                                                     static_cast<uint64_t>(k),
                                                     static_cast<uint64_t>(n), k));
    LS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3,
                                                     static_cast<uint64_t>(k),
                                                     static_cast<uint64_t>(m), k));
    LS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.c, out_type, static_cast<uint64_t>(n),
                                                     static_cast<uint64_t>(m), n));
    cublasLtMatmulPreference_t pref = nullptr;
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = static_cast<uint64_t>(workspace_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
        handle, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || returned == 0) {
      return unimplemented("cuBLASLt has no FP8 algorithm for m={} n={} k={}{}", m, n, k,
                           outer_vec ? " with outer-vector scales" : "");
    }
    plan.algo = result.algo;
    return {};
  }

  // try_outer_vec false: straight to the unscaled product (after cuBLASLt refused to run an
  // outer-vector plan its heuristic had offered).
  Result<const Fp8Plan*> fp8_plan_for(const Fp8Key& key, bool try_outer_vec = true) {
    auto it = fp8_plans.find(key);
    if (it != fp8_plans.end()) return &it->second;
    if (fp8_refused.count(key)) return unimplemented("cuBLASLt has no FP8 algorithm for this shape");
    Fp8Plan p;
    p.outer_vec = try_outer_vec && fp8_outer_vec_allowed && std::get<0>(key) >= kFp8OuterVecMinRows;
    Status s = p.outer_vec ? make_fp8_plan(key, true, p.plan)
                           : unimplemented("outer-vector scales refused or not allowed");
    if (!s.ok()) {
      p.plan.destroy();
      p.outer_vec = false;
      s = make_fp8_plan(key, false, p.plan);
      if (!s.ok()) {
        p.plan.destroy();
        fp8_refused[key] = true;
        return s;
      }
    }
    return &fp8_plans.emplace(key, p).first->second;
  }

  Result<const Plan*> plan_for(const Key& key) {
    auto it = plans.find(key);
    if (it != plans.end()) return &it->second;
    Plan plan;
    Status s = Status{};
    if (std::get<4>(key)) {
      s = make_plan(key, true, plan);
      if (!s.ok()) plan.destroy();  // no fused bias for this shape: plain GEMM + bias_add
    }
    if (!std::get<4>(key) || !s.ok()) {
      Status plain = make_plan(key, false, plan);
      if (!plain.ok()) {
        plan.destroy();
        return plain;
      }
    }
    return &plans.emplace(key, plan).first->second;
  }
};

CublasLtLinear::CublasLtLinear(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtLinear::~CublasLtLinear() = default;

Result<std::unique_ptr<CublasLtLinear>> CublasLtLinear::create(void* workspace,
                                                               int64_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  LS_LT_RETURN_IF_ERROR(cublasLtCreate(&impl->handle));
  impl->workspace = workspace;
  impl->workspace_bytes = workspace_bytes;
  return std::unique_ptr<CublasLtLinear>(new CublasLtLinear(std::move(impl)));
}

Status CublasLtLinear::run(const void* x, const void* w, const float* bias, void* out, int64_t m,
                           int64_t n, int64_t k, DType dtype, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return {};
  if (k <= 0 || !x || !w || !out) return invalid_argument("linear: bad arguments");
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) {
    return invalid_argument("linear: dtype {} is not supported", dtype_name(dtype));
  }
  const Key key{m,
                n,
                k,
                static_cast<int>(dtype),
                bias != nullptr,
                alignment_of(x),
                alignment_of(w),
                alignment_of(out)};
  LS_ASSIGN_OR_RETURN(const Plan* plan, impl_->plan_for(key));
  if (plan->bias_fused) {
    LS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  LS_LT_RETURN_IF_ERROR(cublasLtMatmul(
      impl_->handle, plan->desc, &alpha, w, plan->a, x, plan->b, &beta, out, plan->c, out, plan->c,
      &plan->algo, impl_->workspace, static_cast<size_t>(impl_->workspace_bytes), stream));
  if (bias && !plan->bias_fused) return bias_add(out, bias, m, n, dtype, stream);
  return {};
}

bool CublasLtLinear::fp8_supported(const void* xq, const void* w, const void* out, int64_t n,
                                   int64_t k, DType dtype) {
  return k > 0 && k % 16 == 0 && n > 0 && n % 8 == 0 &&
         (dtype == DType::kBF16 || dtype == DType::kF16) && alignment_of(xq) == 16 &&
         alignment_of(w) == 16 && alignment_of(out) == 16;
}

bool CublasLtLinear::fp8_gemm_planned(int64_t m, int64_t n, int64_t k, DType dtype) const {
  return impl_->fp8_plans.count(Fp8Key{m, n, k, static_cast<int>(dtype)}) != 0;
}

void CublasLtLinear::set_fp8_outer_vec(bool allowed) {
  if (allowed == impl_->fp8_outer_vec_allowed) return;
  impl_->fp8_outer_vec_allowed = allowed;
  for (auto& [key, plan] : impl_->fp8_plans) plan.plan.destroy();
  impl_->fp8_plans.clear();
  impl_->fp8_refused.clear();
}

bool CublasLtLinear::fp8_outer_vec_scales(int64_t m, int64_t n, int64_t k, DType dtype) const {
  auto it = impl_->fp8_plans.find(Fp8Key{m, n, k, static_cast<int>(dtype)});
  return it != impl_->fp8_plans.end() && it->second.outer_vec;
}

Status CublasLtLinear::run_fp8(const void* xq, const float* x_scale, const void* w,
                               const float* w_scale, const float* bias, void* out, int64_t m,
                               int64_t n, int64_t k, DType dtype, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return {};
  if (!x_scale || !w_scale) return invalid_argument("linear fp8: null scales");
  if (!fp8_supported(xq, w, out, n, k, dtype)) {
    return unimplemented("linear fp8: shape n={} k={} {} is outside cuBLASLt's FP8 layouts", n, k,
                         dtype_name(dtype));
  }
  const Fp8Key key{m, n, k, static_cast<int>(dtype)};
  LS_ASSIGN_OR_RETURN(const Fp8Plan* p, impl_->fp8_plan_for(key));
  // Unscaled products are taken times 2^-s so that sums of k products of e4m3 codes (448^2 each)
  // fit f16 (65504): s = 16 up to k = 14336 (43,905 at most), one more per doubling of k beyond;
  // scale_rows_cols multiplies it back (exact: a power of two).
  int shift = 16;
  while (448.0 * 448.0 * static_cast<double>(k) > 65504.0 * std::ldexp(1.0, shift)) ++shift;
  const float unscaled_alpha = std::ldexp(1.0f, -shift);
  const float beta = 0.0f;
  float alpha = 1.0f;
  const auto matmul = [&](const Fp8Plan& plan) -> cublasStatus_t {
    alpha = plan.outer_vec ? 1.0f : unscaled_alpha;
    if (plan.outer_vec) {
      cublasLtMatmulDescSetAttribute(plan.plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                     &w_scale, sizeof(w_scale));
      cublasLtMatmulDescSetAttribute(plan.plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                     &x_scale, sizeof(x_scale));
    }
    return cublasLtMatmul(impl_->handle, plan.plan.desc, &alpha, w, plan.plan.a, xq, plan.plan.b,
                          &beta, out, plan.plan.c, out, plan.plan.c, &plan.plan.algo,
                          impl_->workspace, static_cast<size_t>(impl_->workspace_bytes), stream);
  };
  cublasStatus_t st = matmul(*p);
  if (st != CUBLAS_STATUS_SUCCESS && p->outer_vec) {
    // An outer-vector plan the heuristic offered but the library would not run: replan unscaled.
    auto it = impl_->fp8_plans.find(key);
    it->second.plan.destroy();
    impl_->fp8_plans.erase(it);
    LS_ASSIGN_OR_RETURN(p, impl_->fp8_plan_for(key, false));
    st = matmul(*p);
  }
  LS_RETURN_IF_ERROR(lt_status(st, "cublasLtMatmul (fp8)"));
  if (!p->outer_vec) {
    return scale_rows_cols(out, m, n, 1.0f / unscaled_alpha, x_scale, w_scale, bias, dtype, stream);
  }
  if (bias) return bias_add(out, bias, m, n, dtype, stream);
  return {};
}

}  // namespace ls::kernels::cuda
