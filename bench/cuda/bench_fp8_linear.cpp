#include "bench_fp8_linear.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_fill.h"
#include "kernels/cuda/fp8_linear.h"

namespace ls::bench {

namespace {

Buffer must_alloc(CudaBackend& b, int64_t bytes) {
  auto r = b.allocate(std::max<int64_t>(bytes, 256));
  if (!r.ok()) {
    std::fprintf(stderr, "bench_fp8_linear: %s\n", r.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*r);
}

// Rounds of timing: each round replays every variant's graph once, in turn, so clock and thermal
// drift fall on all of them alike; the median round is reported.
constexpr int kWarmupReplays = 2;
constexpr int kRounds = 9;

// One timed variant: which backend runs it, its weights (replicas that defeat the L2), the graph
// of one call per replica.
struct Variant {
  const char* weights;  // "bf16" or "fp8"
  bool fast_accum = false;
  CudaBackend* backend = nullptr;
  std::vector<LinearWeight> ws;
  int64_t weight_bytes = 0;  // one replica
  int32_t graph = -1;
  std::vector<double> us;  // per round, per call
  Status error;
};

}  // namespace

void bench_fp8_linear(CudaBackend& b, CudaBackend& fast, JsonLines& out,
                      const std::vector<int64_t>& ms_list, double copy_bps, int64_t l2_bytes) {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  // The lm_head stays bf16 under --quantization fp8: not measured here.
  const Shape shapes[] = {{"q_or_o", 4096, 4096},
                          {"k_or_v", 1024, 4096},
                          {"qkv", 6144, 4096},
                          {"gate_up", 28672, 4096},
                          {"down", 4096, 14336}};
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  for (int64_t m : ms_list) {
    for (const Shape& s : shapes) {
      const bool gemm = m > kernels::cuda::kFp8GemvMaxRows;  // else the GEMV: no accumulation mode
      Buffer x = must_alloc(b, m * s.k * 2), y = must_alloc(b, m * s.n * 2);
      die_on(fill_uniform_bf16(x.data(), m * s.k, 22, -1, 1, stream), "fill x");
      const auto replicas_for = [&](int64_t wbytes) {
        return std::clamp<int64_t>((4 * l2_bytes + wbytes - 1) / wbytes, 2, 64);
      };

      // bf16 weights.
      const int64_t bf16_bytes = s.n * s.k * 2;
      const int64_t bf16_stride = (bf16_bytes + 255) / 256 * 256;
      const int64_t bf16_replicas = replicas_for(bf16_bytes);
      Buffer wb = must_alloc(b, bf16_stride * bf16_replicas);
      std::vector<LinearWeight> bf16_ws(static_cast<size_t>(bf16_replicas));
      for (int64_t r = 0; r < bf16_replicas; ++r) {
        char* p = static_cast<char*>(wb.data()) + r * bf16_stride;
        die_on(fill_uniform_bf16(p, s.n * s.k, 21, -0.05f, 0.05f, stream), "fill w");
        bf16_ws[static_cast<size_t>(r)].w = TensorView(p, DType::kBF16, {s.n, s.k}, Device::kCuda);
      }

      // FP8 weights: random bf16 rows quantized on the GPU (codes, then the row scales after
      // them), shared by the precise and the fast variant.
      const int64_t fp8_bytes = s.n * s.k + s.n * 4;
      const int64_t fp8_stride = (fp8_bytes + 255) / 256 * 256;
      const int64_t fp8_replicas = replicas_for(fp8_bytes);
      Buffer wf = must_alloc(b, fp8_stride * fp8_replicas);
      {
        Buffer staging = must_alloc(b, s.n * s.k * 2);
        die_on(fill_uniform_bf16(staging.data(), s.n * s.k, 21, -0.05f, 0.05f, stream), "fill w");
        auto* base = static_cast<char*>(wf.data());
        const Status q = kernels::cuda::quantize_rows_e4m3(
            staging.data(), s.n, s.k, DType::kBF16, base,
            reinterpret_cast<float*>(base + s.n * s.k), stream);
        if (!q.ok()) std::fprintf(stderr, "quantize: %s\n", q.to_string().c_str());
        for (int64_t r = 1; r < fp8_replicas; ++r) {
          die_on(cudaMemcpyAsync(base + r * fp8_stride, base, static_cast<size_t>(fp8_bytes),
                                 cudaMemcpyDeviceToDevice, stream),
                 "replicate");
        }
        b.synchronize();  // the fast backend's stream reads these too
      }
      std::vector<LinearWeight> fp8_ws(static_cast<size_t>(fp8_replicas));
      for (int64_t r = 0; r < fp8_replicas; ++r) {
        char* p = static_cast<char*>(wf.data()) + r * fp8_stride;
        fp8_ws[static_cast<size_t>(r)].w = TensorView(p, DType::kU8, {s.n, s.k}, Device::kCuda);
        fp8_ws[static_cast<size_t>(r)].scale =
            TensorView(p + s.n * s.k, DType::kF32, {s.n}, Device::kCuda);
      }

      std::vector<Variant> variants;
      variants.push_back({"bf16", false, &b, bf16_ws, bf16_bytes, -1, {}, {}});
      variants.push_back({"fp8", false, &b, fp8_ws, fp8_bytes, -1, {}, {}});
      if (gemm) variants.push_back({"fp8", true, &fast, fp8_ws, fp8_bytes, -1, {}, {}});

      const TensorView xv(x.data(), DType::kBF16, {m, s.k}, Device::kCuda);
      const TensorView yv(y.data(), DType::kBF16, {m, s.n}, Device::kCuda);
      for (Variant& v : variants) {
        CudaBackend& vb = *v.backend;
        for (const LinearWeight& lw : v.ws) vb.linear(xv, lw, yv);  // plans and workspace first
        vb.synchronize();
        if (vb.begin_capture().ok()) {
          for (const LinearWeight& lw : v.ws) vb.linear(xv, lw, yv);
          auto graph = vb.end_capture();
          if (graph.ok()) v.graph = *graph;
        }
        if (v.graph >= 0) {
          (void)median_ms(vb, kWarmupReplays, 1, [&] { (void)vb.replay(v.graph); });
        }
      }
      for (int round = 0; round < kRounds; ++round) {
        for (Variant& v : variants) {
          if (v.graph < 0) continue;
          CudaBackend& vb = *v.backend;
          v.us.push_back(median_ms(vb, 0, 1, [&] { (void)vb.replay(v.graph); }) * 1e3 /
                         static_cast<double>(v.ws.size()));
        }
      }
      double bf16_us = 0, precise_us = 0, fast_us = 0;
      for (Variant& v : variants) {
        CudaBackend& vb = *v.backend;
        v.error = vb.take_error();
        std::sort(v.us.begin(), v.us.end());
        const double us = v.us.empty() ? 0.0 : v.us[v.us.size() / 2];
        const bool fp8 = std::string(v.weights) == "fp8";
        (fp8 ? (v.fast_accum ? fast_us : precise_us) : bf16_us) = us;
        const bool gemv = fp8 ? !gemm : m <= 2;
        const double bytes = static_cast<double>(v.weight_bytes + 2 * m * (s.k + s.n));
        const double gbps = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0;
        const double tflops = us > 0 ? 2.0 * m * s.n * s.k / (us * 1e-6) / 1e12 : 0.0;
        out.write(fmt::format(
            R"({{"bench": "fp8_linear", "weights": "{}", "path": "{}", "fast_accum": {}, "outer_vec_scales": {}, "name": "{}", "m": {}, "n": {}, "k": {}, "us": {:.2f}, "gbps": {:.0f}, "copy_fraction": {:.3f}, "tflops": {:.1f}, "ok": {}}})",
            v.weights, gemv ? "gemv" : "gemm", v.fast_accum ? "true" : "false",
            fp8 && !gemv && vb.fp8_outer_vec_scales(m, s.n, s.k) ? "true" : "false", s.name, m,
            s.n, s.k, us, gbps, copy_bps > 0 ? gbps * 1e9 / copy_bps : 0.0, tflops,
            v.error.ok() && us > 0 ? "true" : "false"));
      }
      // Speed-ups of one run, same rounds (above 1: the first named is faster).
      const auto ratio = [](double slow, double quick) { return quick > 0 ? slow / quick : 0.0; };
      out.write(fmt::format(
          R"({{"bench": "fp8_linear_ratio", "name": "{}", "m": {}, "n": {}, "k": {}, "bf16_us": {:.2f}, "fp8_us": {:.2f}, "fp8_fast_us": {:.2f}, "fp8_vs_bf16": {:.3f}, "fast_vs_precise": {:.3f}, "fast_vs_bf16": {:.3f}}})",
          s.name, m, s.n, s.k, bf16_us, precise_us, fast_us, ratio(bf16_us, precise_us),
          ratio(precise_us, fast_us), ratio(bf16_us, fast_us)));
    }
  }
}

}  // namespace ls::bench
