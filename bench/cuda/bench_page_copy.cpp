// Page transfers of the hierarchical KV memory (docs/hierarchical-kv-transfers.md), one JSON line
// per measurement (bench_common.h):
//  - "page_copy", direction h2d: `pages` head-pages of 16 KB and 32 KB from random pages of a large
//    pinned host pool to random slots of a device pool, by the gather kernel at each --sms count
//    (0: all SMs), cudaMemcpyBatchAsync and a per-page cudaMemcpyAsync loop, against bulk pinned
//    H2D of the same bytes (one cudaMemcpyAsync) measured in the same run; direction d2h: the
//    reverse (random device pages to random host pages) against bulk D2H. "of_bulk" is the
//    method's bandwidth over bulk's. The variants alternate, --rounds times; each number is the
//    median over rounds of the median of --reps CUDA-event-timed runs.
//  - "page_save": Backend::save_pages of `pages` device pages to random host pages, from the call
//    to wait_saves' return (host clock): staged scatter (FlashD2H) at each --save-threads count and
//    the gather kernel writing host memory at each --save-sms count, against bulk D2H of the
//    same bytes timed the same way (cudaMemcpyAsync + synchronize).
//  - "page_save_overlap": what a save costs the compute it overlaps: a loop of bf16 GEMMs (8192 x
//    4096 x 4096, the shape of a prefill chunk's projections) timed alone and while saves of
//    --overlap-mib MiB run beside it, per save method and for a bulk D2H on a side stream;
//    "slowdown" = GEMM time with / without.
// Usage: bench_cuda_page_copy [--out FILE] [--sections h2d,d2h,save,overlap]
//        [--page-bytes 16384,32768] [--pages 4096] [--host-pool-mib 4096] [--device-pool-mib 1024]
//        [--sms 8,16,32,0] [--save-sms 8,16] [--save-threads 4,8] [--overlap-mib 2048]
//        [--reps 15] [--rounds 3]

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/page_copy.h"

namespace ls::bench {
namespace {

using kernels::PageCopyMethod;
using kernels::PageCopyParams;

void must_ok(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench: %s: %s\n", what, s.to_string().c_str());
    std::exit(2);
  }
}

// `n` distinct page indices out of [0, total).
std::vector<int32_t> sample(std::mt19937& rng, int64_t total, int64_t n) {
  std::vector<int32_t> all(static_cast<size_t>(total));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(n));
  return all;
}

struct Variant {
  std::string method;  // "bulk", "gather", "memcpy_batch", "per_page", "staged"
  int sms = 0;         // gather: --sms value (0: all); staged: host threads
  std::function<void()> run;
  std::vector<double> ms;  // per round
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Pools {
  Buffer host, device;  // [host_pages, page_bytes], [device_pages, page_bytes] for any page size
  int64_t host_bytes = 0, device_bytes = 0;
};

// ---- scattered copies: h2d and d2h ----

void bench_direction(CudaBackend& b, JsonLines& out, Pools& pools, bool h2d, int64_t page_bytes,
                     int64_t pages, const std::vector<int64_t>& sms_list, int reps, int rounds) {
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  std::mt19937 rng(static_cast<uint32_t>(page_bytes + (h2d ? 1 : 2)));
  const int64_t host_pages = pools.host_bytes / page_bytes;
  const int64_t device_pages = pools.device_bytes / page_bytes;
  const int64_t n = std::min({pages, host_pages, device_pages});
  const std::vector<int32_t> host_list = sample(rng, host_pages, n);
  const std::vector<int32_t> device_list = sample(rng, device_pages, n);
  const std::vector<int32_t>& src_list = h2d ? host_list : device_list;
  const std::vector<int32_t>& dst_list = h2d ? device_list : host_list;
  Buffer src_dev = must_alloc(b, n * 4, MemoryTier::kDevice);
  Buffer dst_dev = must_alloc(b, n * 4, MemoryTier::kDevice);
  b.copy_bytes(src_dev.data(), src_list.data(), n * 4);
  b.copy_bytes(dst_dev.data(), dst_list.data(), n * 4);
  void* src = h2d ? pools.host.data() : pools.device.data();
  void* dst = h2d ? pools.device.data() : pools.host.data();
  const int64_t bytes = n * page_bytes;

  PageCopyParams base;
  base.src[0] = src;
  base.dst[0] = dst;
  base.page_bytes = base.src_stride_bytes = base.dst_stride_bytes = page_bytes;
  base.num_pages = base.max_pages = static_cast<int32_t>(n);

  std::vector<Variant> variants;
  variants.push_back(
      {"bulk",
       0,
       [&, src, dst] {
         die_on(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream),
                "cudaMemcpyAsync");
       },
       {}});
  for (const int64_t sms : sms_list) {
    PageCopyParams p = base;
    p.method = PageCopyMethod::kGatherKernel;
    p.max_sms = static_cast<int32_t>(sms);
    p.src_pages = src_dev.as<int32_t>();
    p.dst_pages = dst_dev.as<int32_t>();
    variants.push_back({"gather", static_cast<int>(sms), [&b, p] { b.copy_pages(p); }, {}});
  }
  for (const PageCopyMethod m : {PageCopyMethod::kMemcpyBatch, PageCopyMethod::kPerPageMemcpy}) {
    PageCopyParams p = base;
    p.method = m;
    p.src_pages = src_list.data();
    p.dst_pages = dst_list.data();
    variants.push_back({m == PageCopyMethod::kMemcpyBatch ? "memcpy_batch" : "per_page",
                        0,
                        [&b, p] { b.copy_pages(p); },
                        {}});
  }
  std::vector<std::string> errors(variants.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t v = 0; v < variants.size(); ++v) {
      variants[v].ms.push_back(median_ms(b, 2, reps, variants[v].run));
      b.synchronize();
      const Status s = b.take_error();
      if (!s.ok() && errors[v].empty()) errors[v] = s.to_string();
    }
  }
  const double bulk_gbps = static_cast<double>(bytes) / (median(variants[0].ms) * 1e-3) / 1e9;
  for (size_t v = 0; v < variants.size(); ++v) {
    const double gbps = static_cast<double>(bytes) / (median(variants[v].ms) * 1e-3) / 1e9;
    out.write(fmt::format(
        R"({{"bench": "page_copy", "direction": "{}", "method": "{}", "sms": {}, "page_bytes": {}, "pages": {}, "us": {:.1f}, "gbps": {:.2f}, "bulk_gbps": {:.2f}, "of_bulk": {:.3f}{}}})",
        h2d ? "h2d" : "d2h", variants[v].method, variants[v].sms, page_bytes, n,
        median(variants[v].ms) * 1e3, gbps, bulk_gbps, gbps / bulk_gbps,
        errors[v].empty() ? "" : fmt::format(R"(, "error": "{}")", json_safe(errors[v]))));
  }
}

// ---- saves ----

double wall_ms(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

struct SaveVariant {
  std::string method;  // "bulk", "staged", "gather"
  int knob = 0;        // staged: host threads; gather: SMs
  PageSaveOptions options;
};

std::vector<SaveVariant> save_variants(const std::vector<int64_t>& threads,
                                       const std::vector<int64_t>& sms) {
  std::vector<SaveVariant> v;
  v.push_back({"bulk", 0, {}});
  for (const int64_t t : threads) {
    PageSaveOptions o;
    o.method = PageSaveMethod::kStagedScatter;
    o.host_threads = static_cast<int32_t>(t);
    v.push_back({"staged", static_cast<int>(t), o});
  }
  for (const int64_t s : sms) {
    PageSaveOptions o;
    o.method = PageSaveMethod::kGatherKernel;
    o.max_sms = static_cast<int32_t>(s);
    v.push_back({"gather", static_cast<int>(s), o});
  }
  return v;
}

void bench_save(CudaBackend& b, JsonLines& out, Pools& pools, int64_t page_bytes, int64_t pages,
                const std::vector<SaveVariant>& variants, int reps, int rounds) {
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  std::mt19937 rng(static_cast<uint32_t>(page_bytes + 3));
  const int64_t n =
      std::min({pages, pools.host_bytes / page_bytes, pools.device_bytes / page_bytes});
  const std::vector<int32_t> src = sample(rng, pools.device_bytes / page_bytes, n);
  const std::vector<int32_t> dst = sample(rng, pools.host_bytes / page_bytes, n);
  const int64_t bytes = n * page_bytes;
  PageCopyParams p;
  p.src[0] = pools.device.data();
  p.dst[0] = pools.host.data();
  p.page_bytes = p.src_stride_bytes = p.dst_stride_bytes = page_bytes;
  p.src_pages = src.data();
  p.dst_pages = dst.data();
  p.num_pages = p.max_pages = static_cast<int32_t>(n);
  std::vector<std::vector<double>> ms(variants.size());
  std::vector<std::string> errors(variants.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t v = 0; v < variants.size(); ++v) {
      std::function<void()> once;
      if (variants[v].method == "bulk") {
        once = [&] {
          die_on(cudaMemcpyAsync(pools.host.data(), pools.device.data(), static_cast<size_t>(bytes),
                                 cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync");
          b.synchronize();
        };
      } else {
        must_ok(b.set_save_options(variants[v].options), "set_save_options");
        once = [&, v] {
          auto t = b.save_pages(p);
          Status s = t.ok() ? b.wait_saves(*t) : t.status();
          if (!s.ok() && errors[v].empty()) errors[v] = s.to_string();
        };
      }
      b.synchronize();
      for (int w = 0; w < 2; ++w) once();
      std::vector<double> t;
      for (int i = 0; i < reps; ++i) t.push_back(wall_ms(once));
      ms[v].push_back(median(t));
    }
  }
  const double bulk_gbps = static_cast<double>(bytes) / (median(ms[0]) * 1e-3) / 1e9;
  for (size_t v = 0; v < variants.size(); ++v) {
    const double gbps = static_cast<double>(bytes) / (median(ms[v]) * 1e-3) / 1e9;
    out.write(fmt::format(
        R"({{"bench": "page_save", "method": "{}", "knob": {}, "page_bytes": {}, "pages": {}, "us": {:.1f}, "gbps": {:.2f}, "bulk_gbps": {:.2f}, "of_bulk": {:.3f}{}}})",
        variants[v].method, variants[v].knob, page_bytes, n, median(ms[v]) * 1e3, gbps, bulk_gbps,
        gbps / bulk_gbps,
        errors[v].empty() ? "" : fmt::format(R"(, "error": "{}")", json_safe(errors[v]))));
  }
  must_ok(b.set_save_options(PageSaveOptions{}), "set_save_options");
}

// A GEMM loop on the backend's stream, timed alone and beside saves of `overlap_bytes`.
void bench_overlap(CudaBackend& b, JsonLines& out, Pools& pools, int64_t page_bytes,
                   int64_t overlap_bytes, const std::vector<SaveVariant>& variants, int rounds) {
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  constexpr int64_t kM = 8192, kN = 4096, kK = 4096;
  constexpr int kGemms = 100;
  Buffer x = must_alloc(b, kM * kK * 2, MemoryTier::kDevice);
  Buffer w = must_alloc(b, kN * kK * 2, MemoryTier::kDevice);
  Buffer y = must_alloc(b, kM * kN * 2, MemoryTier::kDevice);
  die_on(fill_uniform_bf16(x.data(), kM * kK, 1, -1, 1, stream), "fill");
  die_on(fill_uniform_bf16(w.data(), kN * kK, 2, -0.05f, 0.05f, stream), "fill");
  LinearWeight lw;
  lw.w = w.view(DType::kBF16, {kN, kK});
  const TensorView xv = x.view(DType::kBF16, {kM, kK}), yv = y.view(DType::kBF16, {kM, kN});
  const auto gemms = [&] {
    for (int i = 0; i < kGemms; ++i) b.linear(xv, lw, yv);
  };
  std::mt19937 rng(7);
  const int64_t n = std::min(pools.host_bytes, pools.device_bytes) / page_bytes / 2;
  const std::vector<int32_t> src = sample(rng, pools.device_bytes / page_bytes, n);
  const std::vector<int32_t> dst = sample(rng, pools.host_bytes / page_bytes, n);
  const int64_t saves = std::max<int64_t>(1, overlap_bytes / (n * page_bytes));
  PageCopyParams p;
  p.src[0] = pools.device.data();
  p.dst[0] = pools.host.data();
  p.page_bytes = p.src_stride_bytes = p.dst_stride_bytes = page_bytes;
  p.src_pages = src.data();
  p.dst_pages = dst.data();
  p.num_pages = p.max_pages = static_cast<int32_t>(n);
  cudaStream_t side = nullptr;
  die_on(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1;
  die_on(cudaEventCreate(&e0), "cudaEventCreate");
  die_on(cudaEventCreate(&e1), "cudaEventCreate");
  const auto time_gemms = [&] {
    die_on(cudaEventRecord(e0, stream), "cudaEventRecord");
    gemms();
    die_on(cudaEventRecord(e1, stream), "cudaEventRecord");
    die_on(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    die_on(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    return static_cast<double>(ms);
  };
  gemms();  // warm-up (cuBLASLt heuristics, clocks)
  b.synchronize();
  std::vector<std::vector<double>> alone(variants.size()), with(variants.size()),
      save_ms(variants.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t v = 0; v < variants.size(); ++v) {
      const bool bulk = variants[v].method == "bulk";
      if (!bulk) must_ok(b.set_save_options(variants[v].options), "set_save_options");
      b.synchronize();
      alone[v].push_back(time_gemms());
      // Saves first (they follow only the work queued before them), then the GEMMs beside them.
      const auto t0 = std::chrono::steady_clock::now();
      int64_t last = 0;
      for (int64_t s = 0; s < saves; ++s) {
        if (bulk) {
          die_on(cudaMemcpyAsync(pools.host.data(), pools.device.data(),
                                 static_cast<size_t>(n * page_bytes), cudaMemcpyDeviceToHost, side),
                 "cudaMemcpyAsync");
        } else {
          auto t = b.save_pages(p);
          must_ok(t.status(), "save_pages");
          last = *t;
        }
      }
      with[v].push_back(time_gemms());
      if (bulk) {
        die_on(cudaStreamSynchronize(side), "cudaStreamSynchronize");
      } else {
        must_ok(b.wait_saves(last), "wait_saves");
      }
      save_ms[v].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    const double a = median(alone[v]), wv = median(with[v]), s = median(save_ms[v]);
    out.write(fmt::format(
        R"({{"bench": "page_save_overlap", "method": "{}", "knob": {}, "page_bytes": {}, "save_bytes": {}, "gemm_ms_alone": {:.2f}, "gemm_ms_with": {:.2f}, "slowdown": {:.3f}, "save_ms": {:.2f}, "save_gbps": {:.2f}}})",
        variants[v].method, variants[v].knob, page_bytes, saves * n * page_bytes, a, wv, wv / a, s,
        static_cast<double>(saves * n * page_bytes) / (s * 1e-3) / 1e9));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(side);
  must_ok(b.set_save_options(PageSaveOptions{}), "set_save_options");
}

int run(int argc, char** argv) {
  auto backend = CudaBackend::create(0);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_cuda_page_copy: %s\n", backend.status().to_string().c_str());
    return 2;
  }
  CudaBackend& b = **backend;
  JsonLines out(arg(argc, argv, "--out", ""));
  const std::string sections = arg(argc, argv, "--sections", "h2d,d2h,save,overlap");
  const auto has = [&](const char* s) { return sections.find(s) != std::string::npos; };
  const std::vector<int64_t> page_sizes =
      parse_list(arg(argc, argv, "--page-bytes", "16384,32768"));
  const int64_t pages = parse_list(arg(argc, argv, "--pages", "4096"))[0];
  const std::vector<int64_t> sms = parse_list(arg(argc, argv, "--sms", "8,16,32,0"));
  const int reps = static_cast<int>(parse_list(arg(argc, argv, "--reps", "15"))[0]);
  const int rounds = static_cast<int>(parse_list(arg(argc, argv, "--rounds", "3"))[0]);
  Pools pools;
  pools.host_bytes = parse_list(arg(argc, argv, "--host-pool-mib", "4096"))[0] << 20;
  pools.device_bytes = parse_list(arg(argc, argv, "--device-pool-mib", "1024"))[0] << 20;
  std::printf("# %s\n", b.name().c_str());
  pools.host = must_alloc(b, pools.host_bytes, MemoryTier::kHost);
  pools.device = must_alloc(b, pools.device_bytes, MemoryTier::kDevice);
  const HostMemoryStats hs = b.host_memory_stats();
  out.write(fmt::format(
      R"({{"bench": "page_copy_setup", "device": "{}", "host_pool_bytes": {}, "pinned_bytes": {}, "pageable_bytes": {}}})",
      json_safe(b.name()), pools.host_bytes, hs.pinned_bytes, hs.pageable_bytes));
  die_on(fill_uniform_bf16(pools.device.data(), pools.device_bytes / 2, 5, -1, 1,
                           static_cast<cudaStream_t>(b.stream_handle())),
         "fill");
  b.synchronize();
  for (const int64_t pb : page_sizes) {
    if (has("h2d")) bench_direction(b, out, pools, true, pb, pages, sms, reps, rounds);
    if (has("d2h")) bench_direction(b, out, pools, false, pb, pages, sms, reps, rounds);
  }
  const std::vector<SaveVariant> sv =
      save_variants(parse_list(arg(argc, argv, "--save-threads", "4,8")),
                    parse_list(arg(argc, argv, "--save-sms", "8,16")));
  if (has("save")) {
    for (const int64_t pb : page_sizes) bench_save(b, out, pools, pb, pages, sv, reps, rounds);
  }
  if (has("overlap")) {
    const int64_t mib = parse_list(arg(argc, argv, "--overlap-mib", "2048"))[0];
    bench_overlap(b, out, pools, page_sizes.front(), mib << 20, sv, rounds);
  }
  return 0;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  return ls::bench::run(argc, argv);
}
