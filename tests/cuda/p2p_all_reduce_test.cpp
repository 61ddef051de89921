// The one-shot peer-to-peer all-reduce (backend/cuda/p2p_communicator.h, docs/p2p-all-reduce.md)
// on 2 and 4 GPUs (skipping where fewer are visible or they lack peer access): every rank's
// result against a host sum of the ranks' inputs in f32 in rank order, rounded once, bit for bit
// (the kernel promises exactly that order); bf16, f32 and f16, sizes from 1 element to 1M with
// tails and unaligned buffers; replayed 100 times from a CUDA graph with new inputs each time;
// messages over the buffer going to NCCL; an abort ending a rank's wait for a peer that never
// comes, and the timeout doing the same without an abort.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/p2p_communicator.h"
#include "core/dtype.h"

namespace ls {
namespace {

struct Group {
  std::vector<std::unique_ptr<CudaBackend>> backends;
  std::vector<std::unique_ptr<Communicator>> comms;
};

// A group of n ranks on cuda:0 .. n-1 with the p2p all-reduce required; null with *skip set when
// this machine cannot hold one.
std::unique_ptr<Group> make_group(int n, const DeviceCommOptions& options, std::string* skip) {
  if (cuda_device_count() < n) {
    *skip = fmt::format("needs {} GPUs, {} visible", n, cuda_device_count());
    return nullptr;
  }
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  if (Status s = check_peer_access(devices); !s.ok()) {
    *skip = s.message();
    return nullptr;
  }
  auto g = std::make_unique<Group>();
  std::vector<Backend*> raw;
  for (int r = 0; r < n; ++r) {
    auto b = CudaBackend::create(r);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return nullptr;
    raw.push_back(b->get());
    g->backends.push_back(std::move(*b));
  }
  DeviceCommOptions o = options;
  o.all_reduce = "p2p";
  auto comms = make_device_communicators(raw, o);
  if (!comms.ok() && comms.status().code() == StatusCode::kUnimplemented) {
    *skip = comms.status().message();  // a build without NCCL
    return nullptr;
  }
  EXPECT_TRUE(comms.ok()) << comms.status().to_string();
  if (!comms.ok()) return nullptr;
  g->comms = std::move(*comms);
  for (const auto& c : g->comms) EXPECT_EQ(c->name(), "p2p");
  return g;
}

// Runs fn(r) on one thread per rank, each bound to its rank's device, and waits for all.
void on_ranks(Group& g, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(g.backends.size()); ++r) {
    threads.emplace_back([&g, &fn, r] {
      g.backends[static_cast<size_t>(r)]->bind_thread();
      fn(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Random values of `dtype` (as bytes): mixed magnitudes and signs, so that f32 sums round and the
// order of the sum shows.
std::vector<uint8_t> random_values(std::mt19937& rng, int64_t n, DType dtype) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-6, 6);
  std::vector<float> f(static_cast<size_t>(n));
  for (float& x : f) x = std::ldexp(u(rng), e(rng));
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_nbytes(dtype, n)));
  convert_from_f32(f.data(), dtype, bytes.data(), n);
  return bytes;
}

// The sum of in[0] + in[1] + ... in f32, left to right, rounded once to dtype.
std::vector<uint8_t> rank_order_sum(const std::vector<std::vector<uint8_t>>& in, int64_t n,
                                    DType dtype) {
  std::vector<float> acc(static_cast<size_t>(n)), x(static_cast<size_t>(n));
  convert_to_f32(dtype, in[0].data(), acc.data(), n);
  for (size_t q = 1; q < in.size(); ++q) {
    convert_to_f32(dtype, in[q].data(), x.data(), n);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
  }
  std::vector<uint8_t> out(static_cast<size_t>(dtype_nbytes(dtype, n)));
  convert_from_f32(acc.data(), dtype, out.data(), n);
  return out;
}

// "" when equal, else where the first element differs.
std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                             DType dtype) {
  const int64_t sz = dtype_size(dtype);
  for (size_t i = 0; i < want.size(); i += static_cast<size_t>(sz)) {
    if (std::memcmp(got.data() + i, want.data() + i, static_cast<size_t>(sz)) != 0) {
      float g = 0, w = 0;
      convert_to_f32(dtype, got.data() + i, &g, 1);
      convert_to_f32(dtype, want.data() + i, &w, 1);
      return fmt::format("element {}: got {} want {}", i / static_cast<size_t>(sz), g, w);
    }
  }
  return "";
}

class P2pAllReduce : public ::testing::TestWithParam<int> {};

TEST_P(P2pAllReduce, EqualsTheRankOrderSumBitForBit) {
  const int n_ranks = GetParam();
  DeviceCommOptions o;
  o.p2p_max_bytes = int64_t{4} << 20;  // 1M f32 elements (both grids: up to 256 KiB, above)
  std::string skip;
  auto g = make_group(n_ranks, o, &skip);
  if (!g) GTEST_SKIP() << skip;
  std::mt19937 rng(7 + n_ranks);
  struct Case {
    DType dtype;
    int64_t n;
    int64_t offset;  // elements before the buffer: 1 makes it unaligned
  };
  std::vector<Case> cases;
  for (DType d : {DType::kBF16, DType::kF32}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}, int64_t{1000}, int64_t{4097},
                      int64_t{65543}, int64_t{1} << 20}) {
      cases.push_back({d, n, 0});
    }
    cases.push_back({d, 4097, 1});
    cases.push_back({d, 100003, 3});
  }
  cases.push_back({DType::kF16, 12345, 0});
  cases.push_back({DType::kF16, 7, 1});
  int64_t calls = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(
        fmt::format("{} ranks, {} x {} at offset {}", n_ranks, c.n, dtype_name(c.dtype), c.offset));
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < n_ranks; ++r) in.push_back(random_values(rng, c.n, c.dtype));
    const std::vector<uint8_t> want = rank_order_sum(in, c.n, c.dtype);
    std::vector<std::vector<uint8_t>> got(static_cast<size_t>(n_ranks));
    std::vector<Status> st(static_cast<size_t>(n_ranks));
    on_ranks(*g, [&](int r) {
      CudaBackend& b = *g->backends[static_cast<size_t>(r)];
      const int64_t sz = dtype_size(c.dtype);
      auto buf = b.allocate((c.n + c.offset) * sz);
      if (!buf.ok()) {
        st[static_cast<size_t>(r)] = buf.status();
        return;
      }
      char* p = buf->as<char>() + c.offset * sz;
      b.copy_bytes(p, in[static_cast<size_t>(r)].data(), c.n * sz);
      st[static_cast<size_t>(r)] = g->comms[static_cast<size_t>(r)]->all_reduce_sum(
          TensorView(p, c.dtype, {c.n}, Device::kCuda));
      got[static_cast<size_t>(r)].resize(static_cast<size_t>(c.n * sz));
      b.copy_bytes(got[static_cast<size_t>(r)].data(), p, c.n * sz);
      b.synchronize();
      if (st[static_cast<size_t>(r)].ok()) st[static_cast<size_t>(r)] = b.take_error();
      if (st[static_cast<size_t>(r)].ok()) {
        st[static_cast<size_t>(r)] = g->comms[static_cast<size_t>(r)]->device_error();
      }
    });
    ++calls;
    for (int r = 0; r < n_ranks; ++r) {
      ASSERT_TRUE(st[static_cast<size_t>(r)].ok()) << st[static_cast<size_t>(r)].to_string();
      EXPECT_EQ(first_difference(got[static_cast<size_t>(r)], want, c.dtype), "") << "rank " << r;
    }
  }
  for (const auto& comm : g->comms) {
    EXPECT_EQ(p2p_call_counts(*comm).p2p, calls);  // none went to NCCL
    EXPECT_EQ(p2p_call_counts(*comm).fallback, 0);
    EXPECT_TRUE(comm->reset());
  }
}

TEST_P(P2pAllReduce, ReplaysFromAGraphWithNewInputs) {
  const int n_ranks = GetParam();
  std::string skip;
  auto g = make_group(n_ranks, {}, &skip);
  if (!g) GTEST_SKIP() << skip;
  constexpr int kReplays = 100;
  constexpr int64_t kN = 20011;  // 2501 bf16 units and a tail of 3
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(fmt::format("{} ranks, {}", n_ranks, dtype_name(dtype)));
    std::mt19937 rng(11);
    std::vector<std::vector<std::vector<uint8_t>>> in(kReplays);  // [replay][rank]
    std::vector<std::vector<uint8_t>> want(kReplays);
    for (int i = 0; i < kReplays; ++i) {
      for (int r = 0; r < n_ranks; ++r) in[i].push_back(random_values(rng, kN, dtype));
      want[static_cast<size_t>(i)] = rank_order_sum(in[static_cast<size_t>(i)], kN, dtype);
    }
    // The group outlives the dtype loop: count this dtype's calls only.
    std::vector<int64_t> calls_before;
    for (const auto& comm : g->comms) calls_before.push_back(p2p_call_counts(*comm).p2p);
    std::vector<int> mismatches(static_cast<size_t>(n_ranks), 0);
    std::vector<std::string> first(static_cast<size_t>(n_ranks));
    std::vector<Status> st(static_cast<size_t>(n_ranks));
    on_ranks(*g, [&](int r) {
      const auto ri = static_cast<size_t>(r);
      CudaBackend& b = *g->backends[ri];
      Communicator& comm = *g->comms[ri];
      const int64_t bytes = dtype_nbytes(dtype, kN);
      auto buf = b.allocate(bytes);
      if (!buf.ok()) {
        st[ri] = buf.status();
        return;
      }
      const TensorView view(buf->data(), dtype, {kN}, Device::kCuda);
      st[ri] = b.begin_capture();
      if (!st[ri].ok()) return;
      st[ri] = comm.all_reduce_sum(view);
      auto graph = b.end_capture();
      if (st[ri].ok() && !graph.ok()) st[ri] = graph.status();
      if (!st[ri].ok()) return;
      std::vector<uint8_t> got(static_cast<size_t>(bytes));
      for (int i = 0; i < kReplays && st[ri].ok(); ++i) {
        b.copy_bytes(buf->data(), in[static_cast<size_t>(i)][ri].data(), bytes);
        st[ri] = b.replay(*graph);
        b.copy_bytes(got.data(), buf->data(), bytes);
        b.synchronize();
        if (st[ri].ok()) st[ri] = b.take_error();
        if (st[ri].ok()) st[ri] = comm.device_error();
        const std::string d = first_difference(got, want[static_cast<size_t>(i)], dtype);
        if (!d.empty() && mismatches[ri]++ == 0) first[ri] = fmt::format("replay {}: {}", i, d);
      }
    });
    for (int r = 0; r < n_ranks; ++r) {
      const auto ri = static_cast<size_t>(r);
      ASSERT_TRUE(st[ri].ok()) << st[ri].to_string();
      EXPECT_EQ(mismatches[ri], 0) << "rank " << r << ", first: " << first[ri];
      // Recorded once, replayed kReplays times.
      EXPECT_EQ(p2p_call_counts(*g->comms[ri]).p2p - calls_before[ri], 1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2pAllReduce, ::testing::Values(2, 4),
                         [](const auto& info) { return fmt::format("tp{}", info.param); });

TEST(P2pAllReduceFallback, LargerMessagesGoToNccl) {
  DeviceCommOptions o;
  o.p2p_max_bytes = 4096;
  o.p2p_small_bytes = 0;  // one grid
  std::string skip;
  auto g = make_group(2, o, &skip);
  if (!g) GTEST_SKIP() << skip;
  std::mt19937 rng(3);
  for (int64_t n : {int64_t{2048}, int64_t{2049}}) {  // bf16: 4096 bytes fit, 4098 do not
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < 2; ++r) in.push_back(random_values(rng, n, DType::kBF16));
    // Two addends: any order gives the same f32 sum, so NCCL's result is exact too.
    const std::vector<uint8_t> want = rank_order_sum(in, n, DType::kBF16);
    std::vector<std::vector<uint8_t>> got(2);
    std::vector<Status> st(2);
    on_ranks(*g, [&](int r) {
      const auto ri = static_cast<size_t>(r);
      CudaBackend& b = *g->backends[ri];
      auto buf = b.allocate(n * 2);
      if (!buf.ok()) {
        st[ri] = buf.status();
        return;
      }
      b.copy_bytes(buf->data(), in[ri].data(), n * 2);
      st[ri] =
          g->comms[ri]->all_reduce_sum(TensorView(buf->data(), DType::kBF16, {n}, Device::kCuda));
      got[ri].resize(static_cast<size_t>(n * 2));
      b.copy_bytes(got[ri].data(), buf->data(), n * 2);
      b.synchronize();
      if (st[ri].ok()) st[ri] = b.take_error();
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[static_cast<size_t>(r)].ok()) << st[static_cast<size_t>(r)].to_string();
      EXPECT_EQ(first_difference(got[static_cast<size_t>(r)], want, DType::kBF16), "")
          << n << " elements, rank " << r;
    }
  }
  for (const auto& comm : g->comms) {
    EXPECT_EQ(p2p_call_counts(*comm).p2p, 1);
    EXPECT_EQ(p2p_call_counts(*comm).fallback, 1);
  }
}

// Rank 0 all-reduces alone (rank 1 never arrives); `end` is what ends its wait. Returns rank 0's
// device error.
Status lone_rank_error(Group& g, const std::function<void()>& end) {
  CudaBackend& b = *g.backends[0];
  b.bind_thread();
  auto buf = b.allocate_zeroed(4096);
  EXPECT_TRUE(buf.ok());
  if (!buf.ok()) return buf.status();
  Status launched =
      g.comms[0]->all_reduce_sum(TensorView(buf->data(), DType::kBF16, {2048}, Device::kCuda));
  EXPECT_TRUE(launched.ok()) << launched.to_string();
  end();
  b.synchronize();  // returns only once the kernel gave up waiting
  EXPECT_TRUE(b.take_error().ok());
  return g.comms[0]->device_error();
}

TEST(P2pAllReduceFailure, AbortEndsAWaitForARankThatNeverComes) {
  DeviceCommOptions o;
  o.p2p_timeout_s = 60;  // far longer than the test: only the abort can end the wait
  std::string skip;
  auto g = make_group(2, o, &skip);
  if (!g) GTEST_SKIP() << skip;
  const Status s = lone_rank_error(*g, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g->comms[1]->abort("rank 1 failed on purpose");
  });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("aborted while waiting for rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 1 failed on purpose"), std::string::npos) << s.message();
  for (const auto& comm : g->comms) {
    EXPECT_FALSE(comm->reset());
    auto buf = g->backends[0]->allocate(64);
    ASSERT_TRUE(buf.ok());
    EXPECT_FALSE(
        comm->all_reduce_sum(TensorView(buf->data(), DType::kF32, {16}, Device::kCuda)).ok());
  }
}

TEST(P2pAllReduceFailure, TimeoutEndsAWaitWithoutAnAbort) {
  DeviceCommOptions o;
  o.p2p_timeout_s = 0.2;
  std::string skip;
  auto g = make_group(2, o, &skip);
  if (!g) GTEST_SKIP() << skip;
  const Status s = lone_rank_error(*g, [] {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gave up waiting for rank 1"), std::string::npos) << s.message();
  // Rank 1's next call fails at once instead of waiting for a group that is out of step.
  g->backends[1]->bind_thread();
  auto buf = g->backends[1]->allocate(64);
  ASSERT_TRUE(buf.ok());
  EXPECT_FALSE(
      g->comms[1]->all_reduce_sum(TensorView(buf->data(), DType::kF32, {16}, Device::kCuda)).ok());
  EXPECT_FALSE(g->comms[1]->reset());
}

}  // namespace
}  // namespace ls
