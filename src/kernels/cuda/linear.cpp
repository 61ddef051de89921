#include "kernels/cuda/linear.h"

#include <cublasLt.h>

#include <map>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"

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

}  // namespace

struct CublasLtLinear::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  std::map<Key, Plan> plans;

  ~Impl() {
    for (auto& [key, plan] : plans) plan.destroy();
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

}  // namespace ls::kernels::cuda
