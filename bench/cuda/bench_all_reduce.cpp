// All-reduce latency between the GPUs of one process (docs/p2p-all-reduce.md): NCCL against the
// one-shot peer-to-peer kernel, for bf16 messages of the decode step's sizes ([rows, hidden]: 8 KB
// at batch 1 and hidden 4096, about 1 MB at batch 64 and hidden 8192). Each rank records a CUDA
// graph of --calls back-to-back all-reduces (as a recorded decode step holds them) and replays
// it on its own thread; "us" is the median replay time over --reps divided by --calls, the
// slowest rank's ("us_rank0": rank 0's). The p2p rows say how many calls went to the kernel
// ("p2p_calls", the eager one and the recorded ones; larger messages than --p2p-max-bytes go to
// NCCL). --p2p-blocks B: one grid of B blocks for every size; 0 (default): the engine's two grids
// (DeviceCommOptions). Usage: bench_cuda_all_reduce [--ranks 2,4] [--modes nccl,p2p]
//        [--p2p-blocks 0,16,32,64]
//        [--bytes 8192,32768,131072,524288,1048576,2097152] [--calls 50] [--reps 20]
//        [--p2p-max-bytes 2097152] [--out FILE]

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/p2p_communicator.h"
#include "bench_common.h"

namespace ls::bench {
namespace {

struct Row {
  double us = 0;        // the slowest rank's
  double us_rank0 = 0;  // rank 0's
  int64_t p2p_calls = 0;
  std::string error;
};

// Times `bytes` of bf16 all-reduced over `comms`, one thread per rank.
Row time_all_reduce(std::vector<std::unique_ptr<CudaBackend>>& backends,
                    std::vector<std::unique_ptr<Communicator>>& comms, int64_t bytes, int calls,
                    int reps) {
  const size_t n = backends.size();
  const int64_t p2p_before = p2p_call_counts(*comms[0]).p2p;
  std::vector<double> us(n, 0.0);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CudaBackend& b = *backends[r];
      Communicator& comm = *comms[r];
      b.bind_thread();
      auto buf = b.allocate_zeroed(bytes);  // zeros: the sums stay finite however many calls
      if (!buf.ok()) {
        st[r] = buf.status();
        return;
      }
      const TensorView view(buf->data(), DType::kBF16, {bytes / 2}, Device::kCuda);
      st[r] = comm.all_reduce_sum(view);  // eager once (NCCL sets itself up)
      b.synchronize();
      if (!st[r].ok()) return;
      st[r] = b.begin_capture();
      if (!st[r].ok()) return;
      for (int i = 0; i < calls && st[r].ok(); ++i) st[r] = comm.all_reduce_sum(view);
      auto graph = b.end_capture();
      if (st[r].ok() && !graph.ok()) st[r] = graph.status();
      if (!st[r].ok()) return;
      const double ms = median_ms(b, 2, reps, [&] { (void)b.replay(*graph); });
      us[r] = ms * 1e3 / calls;
      st[r] = b.take_error();
      if (st[r].ok()) st[r] = comm.device_error();
      b.drop_graphs();
    });
  }
  for (std::thread& t : threads) t.join();
  Row row;
  for (size_t r = 0; r < n; ++r) {
    if (!st[r].ok()) {
      row.error = st[r].to_string();
      return row;
    }
  }
  row.us = *std::max_element(us.begin(), us.end());
  row.us_rank0 = us[0];
  row.p2p_calls = p2p_call_counts(*comms[0]).p2p - p2p_before;
  return row;
}

int run(int argc, char** argv) {
  const std::vector<int64_t> ranks_list = parse_list(arg(argc, argv, "--ranks", "2"));
  const std::string modes = arg(argc, argv, "--modes", "nccl,p2p");
  const std::vector<int64_t> blocks_list = parse_list(arg(argc, argv, "--p2p-blocks", "0"));
  const std::vector<int64_t> sizes = parse_list(
      arg(argc, argv, "--bytes", "8192,16384,32768,65536,131072,262144,524288,1048576,2097152"));
  const int calls = static_cast<int>(std::atoll(arg(argc, argv, "--calls", "50").c_str()));
  const int reps = static_cast<int>(std::atoll(arg(argc, argv, "--reps", "20").c_str()));
  const int64_t max_bytes = std::atoll(arg(argc, argv, "--p2p-max-bytes", "2097152").c_str());
  JsonLines out(arg(argc, argv, "--out", ""));
  if (calls < 1 || reps < 1) {
    std::fprintf(stderr, "bench_cuda_all_reduce: --calls and --reps must be >= 1\n");
    return 2;
  }
  for (int64_t bytes : sizes) {
    if (bytes < 2 || bytes % 2 != 0) {
      std::fprintf(stderr, "bench_cuda_all_reduce: --bytes must be even (bf16), got %lld\n",
                   static_cast<long long>(bytes));
      return 2;
    }
  }
  const int visible = cuda_device_count();
  for (int64_t ranks : ranks_list) {
    if (ranks > visible) {
      std::fprintf(stderr, "bench_cuda_all_reduce: skipping %lld ranks (%d GPUs visible)\n",
                   static_cast<long long>(ranks), visible);
      continue;
    }
    std::vector<std::unique_ptr<CudaBackend>> backends;
    std::vector<Backend*> raw;
    for (int r = 0; r < ranks; ++r) {
      auto b = CudaBackend::create(r);
      if (!b.ok()) {
        std::fprintf(stderr, "bench_cuda_all_reduce: %s\n", b.status().to_string().c_str());
        return 1;
      }
      raw.push_back(b->get());
      backends.push_back(std::move(*b));
    }
    // (mode, blocks) configurations: NCCL once, p2p per grid size.
    std::vector<std::pair<std::string, int64_t>> configs;
    if (modes.find("nccl") != std::string::npos) configs.emplace_back("nccl", 0);
    if (modes.find("p2p") != std::string::npos) {
      for (int64_t b : blocks_list) configs.emplace_back("p2p", b);
    }
    for (const auto& [mode, blocks] : configs) {
      DeviceCommOptions o;
      o.all_reduce = mode;
      o.p2p_max_bytes = max_bytes;
      if (blocks > 0) {  // one grid of that many blocks; 0: the engine's two grids
        o.p2p_small_bytes = 0;
        o.p2p_large_blocks = static_cast<int32_t>(blocks);
      }
      auto comms = make_device_communicators(raw, o);
      if (!comms.ok()) {
        out.write(fmt::format(R"({{"bench":"all_reduce","ranks":{},"mode":"{}","error":"{}"}})",
                              ranks, mode, json_safe(comms.status().to_string())));
        continue;
      }
      for (int64_t bytes : sizes) {
        const Row row = time_all_reduce(backends, *comms, bytes, calls, reps);
        if (!row.error.empty()) {
          out.write(fmt::format(
              R"({{"bench":"all_reduce","ranks":{},"mode":"{}","bytes":{},"error":"{}"}})", ranks,
              mode, bytes, json_safe(row.error)));
          break;  // a failed group cannot be used again
        }
        out.write(fmt::format(
            R"({{"bench":"all_reduce","ranks":{},"mode":"{}","p2p_blocks":{},"bytes":{},)"
            R"("dtype":"bf16","calls":{},"us":{:.2f},"us_rank0":{:.2f},"p2p_calls":{}}})",
            ranks, mode, blocks, bytes, calls, row.us, row.us_rank0, row.p2p_calls));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace ls::bench

int main(int argc, char** argv) {
  return ls::bench::run(argc, argv);
}
