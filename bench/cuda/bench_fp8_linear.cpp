#include "bench_fp8_linear.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_fill.h"
#include "kernels/cuda/fp8_linear.h"

namespace ls::bench {

void bench_fp8_linear(CudaBackend& b, JsonLines& out, const std::vector<int64_t>& ms_list,
                      double copy_bps, int64_t l2_bytes) {
  // The lm_head stays bf16 under --quantization fp8: not measured here.
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  for (int64_t m : ms_list) {
    for (const LinearShape& s : kLlama3LinearShapes) {
      // FP8 calls the GEMV may take are timed on both paths (the GEMV, then cuBLASLt's GEMM),
      // so one run shows where the row threshold belongs; from kFp8OuterVecMinRows rows both GEMM
      // forms (cuBLASLt's outer-vector scales where it has them, then the unscaled product +
      // epilogue, which is all fewer rows run).
      struct Variant {
        bool fp8, gemm, unscaled;
      };
      std::vector<Variant> variants = {{false, false, false}, {true, false, false}};
      if (m <= kernels::cuda::kFp8GemvMaxRows) variants.push_back({true, true, false});
      if (m >= kernels::cuda::kFp8OuterVecMinRows) variants.push_back({true, false, true});
      for (const Variant& v : variants) {
        const bool fp8 = v.fp8;
        b.set_fp8_gemv_max_rows(v.gemm ? 0 : kernels::cuda::kFp8GemvMaxRows);
        b.set_fp8_outer_vec(!v.unscaled);
        const int64_t wbytes = s.n * s.k * (fp8 ? 1 : 2) + (fp8 ? s.n * 4 : 0);
        const int64_t replicas =
            std::clamp<int64_t>((4 * l2_bytes + wbytes - 1) / wbytes, 2, 64);
        const int64_t stride = (wbytes + 255) / 256 * 256;
        Buffer w = must_alloc(b, stride * replicas);
        Buffer x = must_alloc(b, m * s.k * 2), y = must_alloc(b, m * s.n * 2);
        die_on(fill_uniform_bf16(x.data(), m * s.k, 22, -1, 1, stream), "fill x");
        std::vector<LinearWeight> ws(static_cast<size_t>(replicas));
        if (fp8) {
          // Random bf16 rows quantized on the GPU (codes, then the row scales after them).
          Buffer staging = must_alloc(b, s.n * s.k * 2);
          die_on(fill_uniform_bf16(staging.data(), s.n * s.k, 21, -0.05f, 0.05f, stream), "fill w");
          auto* base = static_cast<char*>(w.data());
          const Status q = kernels::cuda::quantize_rows_e4m3(
              staging.data(), s.n, s.k, DType::kBF16, base,
              reinterpret_cast<float*>(base + s.n * s.k), stream);
          if (!q.ok()) std::fprintf(stderr, "quantize: %s\n", q.to_string().c_str());
          for (int64_t r = 1; r < replicas; ++r) {
            die_on(cudaMemcpyAsync(base + r * stride, base, static_cast<size_t>(wbytes),
                                   cudaMemcpyDeviceToDevice, stream),
                   "replicate");
          }
          b.synchronize();
          for (int64_t r = 0; r < replicas; ++r) {
            char* p = base + r * stride;
            ws[static_cast<size_t>(r)].w = TensorView(p, DType::kU8, {s.n, s.k}, Device::kCuda);
            ws[static_cast<size_t>(r)].scale =
                TensorView(p + s.n * s.k, DType::kF32, {s.n}, Device::kCuda);
          }
        } else {
          for (int64_t r = 0; r < replicas; ++r) {
            char* p = static_cast<char*>(w.data()) + r * stride;
            die_on(fill_uniform_bf16(p, s.n * s.k, 21, -0.05f, 0.05f, stream), "fill w");
            ws[static_cast<size_t>(r)].w = TensorView(p, DType::kBF16, {s.n, s.k}, Device::kCuda);
          }
        }
        const TensorView xv(x.data(), DType::kBF16, {m, s.k}, Device::kCuda);
        const TensorView yv(y.data(), DType::kBF16, {m, s.n}, Device::kCuda);
        for (const LinearWeight& lw : ws) b.linear(xv, lw, yv);  // plans and workspace first
        b.synchronize();
        double us = 0;
        if (b.begin_capture().ok()) {
          for (const LinearWeight& lw : ws) b.linear(xv, lw, yv);
          auto graph = b.end_capture();
          if (graph.ok()) {
            us = median_ms(b, 2, 7, [&] { (void)b.replay(*graph); }) * 1e3 /
                 static_cast<double>(replicas);
          }
        }
        const Status err = b.take_error();
        // FP8: the path that ran (a GEMM cuBLASLt had no algorithm for falls back to the GEMV).
        const bool gemv = fp8 ? (!v.gemm && m <= kernels::cuda::kFp8GemvMaxRows) ||
                                    !b.fp8_gemm_planned(m, s.n, s.k)
                              : m <= 2;
        const double bytes = static_cast<double>(wbytes + 2 * m * (s.k + s.n));
        const double gbps = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0;
        const double tflops = us > 0 ? 2.0 * m * s.n * s.k / (us * 1e-6) / 1e12 : 0.0;
        out.write(fmt::format(
            R"({{"bench": "fp8_linear", "weights": "{}", "path": "{}", "outer_vec_scales": {}, "name": "{}", "m": {}, "n": {}, "k": {}, "us": {:.2f}, "gbps": {:.0f}, "copy_fraction": {:.3f}, "tflops": {:.1f}, "ok": {}}})",
            fp8 ? "fp8" : "bf16", gemv ? "gemv" : "gemm",
            fp8 && !gemv && b.fp8_outer_vec_scales(m, s.n, s.k) ? "true" : "false", s.name, m,
            s.n, s.k, us, gbps, copy_bps > 0 ? gbps * 1e9 / copy_bps : 0.0, tflops,
            err.ok() && us > 0 ? "true" : "false"));
      }
      b.set_fp8_gemv_max_rows(-1);
      b.set_fp8_outer_vec(true);
    }
  }
}

}  // namespace ls::bench
