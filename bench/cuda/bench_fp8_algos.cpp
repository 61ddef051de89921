#include "bench_fp8_algos.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_fill.h"
#include "kernels/cuda/fp8_linear.h"

namespace ls::bench {

namespace {

// What one GEMM form multiplies and how cuBLASLt is asked to scale it.
enum class Form { kBf16, kFp8Unscaled, kFp8TensorScales, kFp8OuterVec, kFp8Blockwise };

const char* form_name(Form f) {
  switch (f) {
    case Form::kBf16: return "bf16";
    case Form::kFp8Unscaled: return "fp8_unscaled";
    case Form::kFp8TensorScales: return "fp8_tensor_scales";
    case Form::kFp8OuterVec: return "fp8_outer_vec";
    case Form::kFp8Blockwise: return "fp8_blockwise";
  }
  return "?";
}

struct LtProblem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~LtProblem() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The production layout (kernels/cuda/linear.cpp): column-major A = w (k x n, op T), B = x
// (k x m, op N), C = D = out (n x m, bf16). Returns false where cuBLASLt rejects the
// descriptor itself (a scale mode this library version does not know).
bool describe(LtProblem& p, Form f, int64_t m, int64_t n, int64_t k, const float* a_scale,
              const float* b_scale) {
  const bool fp8 = f != Form::kBf16;
  if (cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
    return false;
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t));
  cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n));
  if (fp8) {
    const int8_t fast_accum = 0;
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                   sizeof(fast_accum));
  }
  int32_t a_mode = -1, b_mode = -1;
  if (f == Form::kFp8OuterVec) a_mode = b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (f == Form::kFp8Blockwise) {
    a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;  // weights: 128 x 128 blocks
    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;      // activations: 1 x 128 per token
  }
  if (a_mode >= 0 &&
      (cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                      sizeof(a_mode)) != CUBLAS_STATUS_SUCCESS ||
       cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                      sizeof(b_mode)) != CUBLAS_STATUS_SUCCESS)) {
    return false;
  }
  if (f == Form::kFp8TensorScales || f == Form::kFp8OuterVec || f == Form::kFp8Blockwise) {
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                   sizeof(a_scale));
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                   sizeof(b_scale));
  }
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return cublasLtMatrixLayoutCreate(&p.a, in, u(k), u(n), k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&p.b, in, u(k), u(m), k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, u(n), u(m), n) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace

void bench_fp8_algos(CudaBackend& b, JsonLines& out, const std::vector<int64_t>& ms_list,
                     int max_algos) {
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "bench_fp8_algos: cublasLtCreate failed\n");
    return;
  }
  constexpr int64_t kWorkspace = int64_t{64} << 20;
  Buffer ws = must_alloc(b, kWorkspace);
  const Form forms[] = {Form::kBf16, Form::kFp8Unscaled, Form::kFp8TensorScales,
                        Form::kFp8OuterVec, Form::kFp8Blockwise};
  for (int64_t m : ms_list) {
    for (const LinearShape& s : kLlama3LinearShapes) {
      Buffer x = must_alloc(b, m * s.k * 2), w = must_alloc(b, s.n * s.k * 2);
      Buffer y = must_alloc(b, m * s.n * 2);
      // Scales: room for per-row / per-block vectors of either operand, all ones.
      const int64_t scale_floats = std::max(m, s.n) * ((s.k + 127) / 128 + 1) + 64;
      Buffer a_scale = must_alloc(b, scale_floats * 4), b_scale = must_alloc(b, scale_floats * 4);
      std::vector<float> ones(static_cast<size_t>(scale_floats), 1.0f);
      die_on(cudaMemcpyAsync(a_scale.data(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice,
                             stream),
             "scales");
      die_on(cudaMemcpyAsync(b_scale.data(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice,
                             stream),
             "scales");
      die_on(fill_uniform_bf16(x.data(), m * s.k, 31, -1, 1, stream), "fill x");
      die_on(fill_uniform_bf16(w.data(), s.n * s.k, 32, -0.05f, 0.05f, stream), "fill w");
      // e4m3 copies of both, quantized per row as production does.
      Buffer xq = must_alloc(b, m * s.k), wq = must_alloc(b, s.n * s.k);
      Buffer xs = must_alloc(b, m * 4), wsc = must_alloc(b, s.n * 4);
      (void)kernels::cuda::quantize_rows_e4m3(w.data(), s.n, s.k, DType::kBF16, wq.data(),
                                              static_cast<float*>(wsc.data()), stream);
      die_on(fill_uniform_bf16(y.data(), m * s.n, 33, -1, 1, stream), "fill y");
      b.synchronize();
      const double flop = 2.0 * static_cast<double>(m) * s.n * s.k;
      // tflops for the GEMM forms; 0 for the quantize / scale passes (they do no products).
      const auto emit = [&](const std::string& form, int heuristics, int rank, double us,
                            bool gemm = true) {
        out.write(fmt::format(
            R"({{"bench": "fp8_algos", "form": "{}", "name": "{}", "m": {}, "n": {}, "k": {}, )"
            R"("heuristics": {}, "rank": {}, "us": {:.2f}, "tflops": {:.1f}, "ok": {}}})",
            form, s.name, m, s.n, s.k, heuristics, rank, us,
            gemm && us > 0 ? flop / (us * 1e-6) / 1e12 : 0.0, us > 0 ? "true" : "false"));
      };
      // The passes around the unscaled product: activation quantization and the scale pass.
      emit("quantize_rows", 0, 0,
           median_ms(b, 3, 10,
                     [&] {
                       (void)kernels::cuda::quantize_rows_e4m3(
                           x.data(), m, s.k, DType::kBF16, xq.data(),
                           static_cast<float*>(xs.data()), stream);
                     }) *
               1e3,
           false);
      emit("scale_rows_cols", 0, 0,
           median_ms(b, 3, 10,
                     [&] {
                       (void)kernels::cuda::scale_rows_cols(
                           y.data(), m, s.n, 1.0f, static_cast<const float*>(xs.data()),
                           static_cast<const float*>(wsc.data()), nullptr, DType::kBF16, stream);
                     }) *
               1e3,
           false);
      for (const Form f : forms) {
        LtProblem p;
        const bool fp8 = f != Form::kBf16;
        const float* as = static_cast<const float*>(a_scale.data());
        const float* bs = static_cast<const float*>(b_scale.data());
        if (!describe(p, f, m, s.n, s.k, as, bs)) {
          emit(form_name(f), -1, 0, 0.0);  // the descriptor itself was refused
          continue;
        }
        cublasLtMatmulPreference_t pref = nullptr;
        cublasLtMatmulPreferenceCreate(&pref);
        const uint64_t wsb = static_cast<uint64_t>(kWorkspace);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                             sizeof(wsb));
        std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(max_algos));
        int returned = 0;
        const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
            lt, p.desc, p.a, p.b, p.c, p.c, pref, max_algos, res.data(), &returned);
        cublasLtMatmulPreferenceDestroy(pref);
        if (hs != CUBLAS_STATUS_SUCCESS || returned == 0) {
          emit(form_name(f), 0, 0, 0.0);
          continue;
        }
        const float alpha = f == Form::kFp8Unscaled ? 1.0f / 65536.0f : 1.0f, beta = 0.0f;
        const void* wa = fp8 ? wq.data() : w.data();
        const void* xb = fp8 ? xq.data() : x.data();
        for (int r = 0; r < returned; ++r) {
          cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
          const double us = median_ms(b, 2, 7, [&] {
                              st = cublasLtMatmul(lt, p.desc, &alpha, wa, p.a, xb, p.b, &beta,
                                                  y.data(), p.c, y.data(), p.c, &res[r].algo,
                                                  ws.data(), static_cast<size_t>(kWorkspace),
                                                  stream);
                            }) *
                            1e3;
          emit(form_name(f), returned, r, st == CUBLAS_STATUS_SUCCESS ? us : 0.0);
        }
      }
      (void)b.take_error();
    }
  }
  cublasLtDestroy(lt);
}

}  // namespace ls::bench
