#pragma once
// Helpers shared by the GPU benchmarks: command-line lists, CUDA-event timing (warm-up, then the
// median of repeats), JSON-lines output, and the device-to-device copy ceiling.

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench_fill.h"

namespace ls::bench {

inline std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::atoll(s.substr(pos, comma - pos).c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// "a,b,c" -> {"a", "b", "c"} (empty entries dropped).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// `s` safe inside a JSON string (quotes and backslashes become apostrophes and slashes).
inline std::string json_safe(std::string s) {
  for (char& c : s) {
    if (c == '"') c = '\'';
    if (c == '\\') c = '/';
    if (c == '\n') c = ' ';
  }
  return s;
}

// "--name value" or "--name=value" from argv, else `fallback`.
inline std::string arg(int argc, char** argv, const std::string& name,
                       const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == name && i + 1 < argc) return argv[i + 1];
    if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
  }
  return fallback;
}

inline void die_on(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "bench: %s failed: %s\n", what, cudaGetErrorString(err));
    std::exit(2);
  }
}

// The Llama-3-8B linear layers (out_features n, in_features k): the fused qkv and gate_up the
// model runs, q / o and k / v as separate projections, and down.
struct LinearShape {
  const char* name;
  int64_t n, k;
};
inline constexpr LinearShape kLlama3LinearShapes[] = {{"q_or_o", 4096, 4096},
                                                      {"k_or_v", 1024, 4096},
                                                      {"qkv", 6144, 4096},
                                                      {"gate_up", 28672, 4096},
                                                      {"down", 4096, 14336}};

// An allocation of at least 256 bytes (so empty shapes still get a valid pointer) or the end of
// the benchmark with the reason.
inline Buffer must_alloc(CudaBackend& b, int64_t bytes, MemoryTier tier = MemoryTier::kDevice) {
  auto buf = b.allocate(std::max<int64_t>(bytes, 256), tier);
  if (!buf.ok()) {
    std::fprintf(stderr, "bench: %s\n", buf.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*buf);
}

// Milliseconds of fn() on the backend's stream: `warmup` untimed runs, then the median of `reps`
// runs timed with CUDA events.
template <class Fn>
double median_ms(CudaBackend& b, int warmup, int reps, Fn&& fn) {
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  for (int i = 0; i < warmup; ++i) fn();
  b.synchronize();
  cudaEvent_t e0, e1;
  die_on(cudaEventCreate(&e0), "cudaEventCreate");
  die_on(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    die_on(cudaEventRecord(e0, stream), "cudaEventRecord");
    fn();
    die_on(cudaEventRecord(e1, stream), "cudaEventRecord");
    die_on(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    die_on(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t.empty() ? 0.0 : static_cast<double>(t[t.size() / 2]);
}

// Appends JSON lines to a file (and echoes them to stdout).
class JsonLines {
 public:
  explicit JsonLines(const std::string& path)
      : f_(path.empty() ? nullptr : std::fopen(path.c_str(), "a")) {}
  ~JsonLines() {
    if (f_) std::fclose(f_);
  }
  void write(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (f_) {
      std::fprintf(f_, "%s\n", line.c_str());
      std::fflush(f_);
    }
  }

 private:
  std::FILE* f_;
};

// Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written, over two
// buffers of `bytes` each (large enough to defeat the L2).
inline double copy_bandwidth(CudaBackend& b, int64_t bytes) {
  auto src = b.allocate(bytes), dst = b.allocate(bytes);
  if (!src.ok() || !dst.ok()) return 0.0;
  auto stream = static_cast<cudaStream_t>(b.stream_handle());
  die_on(fill_uniform_bf16(src->data(), bytes / 2, 1, -1, 1, stream), "fill");
  const double ms = median_ms(b, 3, 10, [&] {
    die_on(cudaMemcpyAsync(dst->data(), src->data(), static_cast<size_t>(bytes),
                           cudaMemcpyDeviceToDevice, stream),
           "cudaMemcpyAsync");
  });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

}  // namespace ls::bench
