// The paged-KV ops on the GPU against kernels/cpu on identical inputs: kv_append (retrieval and
// streaming heads, a ring that wraps inside one call, dtype conversion) and page_summary_update
// (chunked prefill then decode, partial logical pages) must leave byte-identical pools, and so
// must kv_append carrying an index request (one launch) against the two CPU ops;
// page_select must choose exactly the CPU's pages on integer data (every bound exact, many ties)
// and pages optimal up to rounding on continuous data.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "kernels/cpu/kv_append.h"
#include "kernels/cpu/page_select.h"
#include "kernels/cpu/page_summary.h"
#include "kernels/kv_quant.h"

namespace ls::cuda_test {
namespace {

using kernels::HeadMode;

// A batch appended into two pools whose contents start as identical random garbage on the host
// and the device.
struct AppendCase {
  int32_t d = 64, pt = 16, lpt = 16, nsp = 1;
  DType pool_dt = DType::kBF16, src_dt = DType::kBF16, sum_dt = DType::kBF16;
  std::vector<int32_t> mode = {0, 1, 2, 1};  // HeadMode per kv head
  std::vector<int32_t> slot;
  int32_t hpb_r = 0, hpb_s = 0, nb_r = 0, nb_s = 0, stride_r = 0, stride_s = 0;
  std::vector<int32_t> q_lens, kv_lens, ring, q_indptr, table_r, table_s;
  HostArray k, v;                        // [tokens, kv heads, d]
  HostArray rk, rv, sk, sv, kmin, kmax;  // pools and summaries (garbage-initialised)

  int32_t num_kv() const { return static_cast<int32_t>(mode.size()); }
  int32_t tokens() const { return q_indptr.back(); }
};

AppendCase make_append_case(std::mt19937& rng, int32_t d, int32_t pt, DType src_dt,
                            std::vector<int32_t> q_lens, std::vector<int32_t> kv_lens,
                            std::vector<int32_t> ring, DType sum_dt = DType::kBF16,
                            int32_t lpt = 16) {
  AppendCase c;
  c.d = d;
  c.pt = pt;
  c.lpt = std::min(lpt, pt);
  c.src_dt = src_dt;
  c.sum_dt = sum_dt;
  c.q_lens = std::move(q_lens);
  c.kv_lens = std::move(kv_lens);
  c.ring = std::move(ring);
  // Slots assigned in reverse, one spare slot per pool (never written).
  int32_t nr = 0, ns = 0;
  for (int32_t m : c.mode) (m == 1 ? ns : nr)++;
  c.hpb_r = nr + 1;
  c.hpb_s = ns + 1;
  int32_t next_r = c.hpb_r - 1, next_s = c.hpb_s - 1;
  for (int32_t m : c.mode) c.slot.push_back(m == 1 ? next_s-- : next_r--);
  const int32_t seqs = static_cast<int32_t>(c.q_lens.size());
  c.q_indptr = {0};
  for (int32_t q : c.q_lens) c.q_indptr.push_back(c.q_indptr.back() + q);
  for (int32_t s = 0; s < seqs; ++s) {
    c.stride_r = std::max(c.stride_r, (c.kv_lens[static_cast<size_t>(s)] + pt - 1) / pt + 1);
    c.stride_s = std::max(c.stride_s, c.nsp + c.ring[static_cast<size_t>(s)]);
  }
  c.nb_r = seqs * c.stride_r + 1;
  c.nb_s = seqs * c.stride_s + 1;
  std::vector<int32_t> perm_r(static_cast<size_t>(c.nb_r)), perm_s(static_cast<size_t>(c.nb_s));
  std::iota(perm_r.begin(), perm_r.end(), 0);
  std::iota(perm_s.begin(), perm_s.end(), 0);
  std::shuffle(perm_r.begin(), perm_r.end(), rng);
  std::shuffle(perm_s.begin(), perm_s.end(), rng);
  c.table_r.assign(static_cast<size_t>(seqs * c.stride_r), -1);
  c.table_s.assign(static_cast<size_t>(seqs * c.stride_s), -1);
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t pages = (c.kv_lens[static_cast<size_t>(s)] + pt - 1) / pt;
    for (int32_t j = 0; j < pages; ++j)
      c.table_r[static_cast<size_t>(s * c.stride_r + j)] =
          perm_r[static_cast<size_t>(s * c.stride_r + j)];
    for (int32_t j = 0; j < c.nsp + c.ring[static_cast<size_t>(s)]; ++j)
      c.table_s[static_cast<size_t>(s * c.stride_s + j)] =
          perm_s[static_cast<size_t>(s * c.stride_s + j)];
  }
  const int64_t n = int64_t{c.tokens()} * c.num_kv() * d;
  c.k = random_array(rng, n, src_dt, -2, 2);
  c.v = random_array(rng, n, src_dt, -2, 2);
  c.rk = random_array(rng, int64_t{c.nb_r} * c.hpb_r * pt * d, c.pool_dt, -9, 9);
  c.rv = random_array(rng, int64_t{c.nb_r} * c.hpb_r * pt * d, c.pool_dt, -9, 9);
  c.sk = random_array(rng, int64_t{c.nb_s} * c.hpb_s * pt * d, c.pool_dt, -9, 9);
  c.sv = random_array(rng, int64_t{c.nb_s} * c.hpb_s * pt * d, c.pool_dt, -9, 9);
  const int64_t sum_n = int64_t{c.nb_r} * c.hpb_r * (pt / c.lpt) * d;
  c.kmin = random_array(rng, sum_n, c.sum_dt, -9, 9);
  c.kmax = random_array(rng, sum_n, c.sum_dt, -9, 9);
  return c;
}

// Device mirrors of an AppendCase's arrays.
struct DeviceAppend {
  DeviceArray k, v, rk, rv, sk, sv, kmin, kmax, q_indptr, kv_lens, ring, mode, slot, table_r,
      table_s;
  explicit DeviceAppend(const AppendCase& c)
      : k(DeviceArray::of(c.k)),
        v(DeviceArray::of(c.v)),
        rk(DeviceArray::of(c.rk)),
        rv(DeviceArray::of(c.rv)),
        sk(DeviceArray::of(c.sk)),
        sv(DeviceArray::of(c.sv)),
        kmin(DeviceArray::of(c.kmin)),
        kmax(DeviceArray::of(c.kmax)),
        q_indptr(DeviceArray::of(c.q_indptr)),
        kv_lens(DeviceArray::of(c.kv_lens)),
        ring(DeviceArray::of(c.ring)),
        mode(DeviceArray::of(c.mode)),
        slot(DeviceArray::of(c.slot)),
        table_r(DeviceArray::of(c.table_r)),
        table_s(DeviceArray::of(c.table_s)) {}
};

// Makes the next step of a one-sequence case its input: q_len new random bf16 tokens (K and V)
// ending at kv_len, on the host and on the device.
void next_step(std::mt19937& rng, AppendCase& c, DeviceAppend& dev, int32_t q_len, int32_t kv_len) {
  c.q_lens = {q_len};
  c.kv_lens = {kv_len};
  c.q_indptr = {0, q_len};
  const int64_t n = int64_t{q_len} * c.num_kv() * c.d;
  c.k = random_array(rng, n, DType::kBF16, -2, 2);
  c.v = random_array(rng, n, DType::kBF16, -2, 2);
  dev.k = DeviceArray::of(c.k);
  dev.v = DeviceArray::of(c.v);
  dev.q_indptr = DeviceArray::of(c.q_indptr);
  dev.kv_lens = DeviceArray::of(c.kv_lens);
}

kernels::PagedKvPool pool_view(void* k, void* v, DType dt, int32_t blocks, int32_t hpb, int32_t pt,
                               int32_t d) {
  kernels::PagedKvPool p;
  p.k = k;
  p.v = v;
  p.dtype = dt;
  p.num_blocks = blocks;
  p.heads_per_block = hpb;
  p.page_tokens = pt;
  p.head_dim = d;
  return p;
}

// Append params over either the host arrays (dev == nullptr) or their device mirrors.
kernels::KvAppendParams append_params(AppendCase& c, const DeviceAppend* dev) {
  kernels::KvAppendParams p;
  p.k = dev ? dev->k.data() : c.k.data();
  p.v = dev ? dev->v.data() : c.v.data();
  p.src_dtype = c.src_dt;
  p.num_tokens = c.tokens();
  p.num_kv_heads = c.num_kv();
  p.head_dim = c.d;
  p.num_seqs = static_cast<int32_t>(c.q_lens.size());
  p.q_indptr = dev ? dev->q_indptr.as<int32_t>() : c.q_indptr.data();
  p.kv_lens = dev ? dev->kv_lens.as<int32_t>() : c.kv_lens.data();
  p.head_mode = dev ? dev->mode.as<int32_t>() : c.mode.data();
  p.head_slot = dev ? dev->slot.as<int32_t>() : c.slot.data();
  p.retrieval = pool_view(dev ? dev->rk.data() : c.rk.data(), dev ? dev->rv.data() : c.rv.data(),
                          c.pool_dt, c.nb_r, c.hpb_r, c.pt, c.d);
  p.retrieval_blocks = dev ? dev->table_r.as<int32_t>() : c.table_r.data();
  p.retrieval_blocks_stride = c.stride_r;
  p.streaming = pool_view(dev ? dev->sk.data() : c.sk.data(), dev ? dev->sv.data() : c.sv.data(),
                          c.pool_dt, c.nb_s, c.hpb_s, c.pt, c.d);
  p.streaming_blocks = dev ? dev->table_s.as<int32_t>() : c.table_s.data();
  p.streaming_blocks_stride = c.stride_s;
  p.num_sink_pages = c.nsp;
  p.ring_pages = dev ? dev->ring.as<int32_t>() : c.ring.data();
  return p;
}

kernels::SummaryUpdateParams summary_params(AppendCase& c, const DeviceAppend* dev) {
  const kernels::KvAppendParams a = append_params(c, dev);
  kernels::SummaryUpdateParams p;
  p.k = a.k;
  p.src_dtype = c.src_dt;
  p.num_tokens = a.num_tokens;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = c.d;
  p.num_seqs = a.num_seqs;
  p.q_indptr = a.q_indptr;
  p.kv_lens = a.kv_lens;
  p.head_mode = a.head_mode;
  p.head_slot = a.head_slot;
  p.page_tokens = c.pt;
  p.heads_per_block = c.hpb_r;
  p.retrieval_blocks = a.retrieval_blocks;
  p.retrieval_blocks_stride = c.stride_r;
  p.summaries.kmin = dev ? dev->kmin.data() : c.kmin.data();
  p.summaries.kmax = dev ? dev->kmax.data() : c.kmax.data();
  p.summaries.dtype = c.sum_dt;
  p.summaries.logical_page_tokens = c.lpt;
  p.summaries.logical_per_page = c.pt / c.lpt;
  return p;
}

// The append with the index request a selecting policy places: summary_params' summaries.
kernels::KvAppendParams indexed_append_params(AppendCase& c, const DeviceAppend* dev) {
  kernels::KvAppendParams p = append_params(c, dev);
  p.summaries = summary_params(c, dev).summaries;
  return p;
}

// The GPU's pools and summaries equal the CPU's byte for byte.
void expect_same_arrays(const DeviceAppend& dev, const AppendCase& c, const std::string& label) {
  EXPECT_EQ(dev.rk.download(), c.rk.bytes) << "retrieval K, " << label;
  EXPECT_EQ(dev.rv.download(), c.rv.bytes) << "retrieval V, " << label;
  EXPECT_EQ(dev.sk.download(), c.sk.bytes) << "streaming K, " << label;
  EXPECT_EQ(dev.sv.download(), c.sv.bytes) << "streaming V, " << label;
  EXPECT_EQ(dev.kmin.download(), c.kmin.bytes) << "kmin, " << label;
  EXPECT_EQ(dev.kmax.download(), c.kmax.bytes) << "kmax, " << label;
}

TEST(CudaPagedOps, KvAppendAndSummariesEqualCpuBytewise) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(21);
  for (int32_t d : {64, 128}) {
    for (int32_t pt : {16, 64}) {
      for (DType src : {DType::kBF16, DType::kF32}) {
        // A prefill from 0, a decode token, a chunk longer than its ring (wraps inside the call),
        // and a chunk that starts mid logical page.
        AppendCase c = make_append_case(rng, d, pt, src, {40, 1, pt * 6, 7},
                                        {40, 300, pt * 9 + 5, 3 * pt + 9}, {4, 5, 3, 6});
        DeviceAppend dev(c);
        kernels::cpu::kv_append(append_params(c, nullptr), cpu_pool());
        kernels::cpu::page_summary_update(summary_params(c, nullptr), cpu_pool());
        gpu()->kv_append(append_params(c, &dev));
        gpu()->page_summary_update(summary_params(c, &dev));
        const std::string label =
            "d " + std::to_string(d) + " page " + std::to_string(pt) + " src " + dtype_label(src);
        expect_same_arrays(dev, c, label);
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// Quantized pools (kernels/kv_quant.h): the GPU append quantizes every row exactly as the CPU
// append does (codes and per-token parameters, byte for byte, the random bytes it must not touch
// included), prefill chunks, decode tokens and ring wraps, every format, with the index request.
TEST(CudaPagedOps, QuantizedKvAppendEqualsCpuBytewise) {
  LS_REQUIRE_CUDA();
  using kernels::KvQuant;
  std::mt19937 rng(29);
  for (KvQuant q : {KvQuant::kFp8, KvQuant::kInt8, KvQuant::kInt4}) {
    for (int32_t d : {64, 128}) {
      for (int32_t pt : {16, 64}) {
        for (DType src : {DType::kBF16, DType::kF32}) {
          AppendCase c = make_append_case(rng, d, pt, src, {40, 1, pt * 6, 7},
                                          {40, 300, pt * 9 + 5, 3 * pt + 9}, {4, 5, 3, 6});
          DeviceAppend dev(c);
          const int64_t page_bytes = kernels::kv_quant_page_bytes(q, pt, d);
          std::uniform_int_distribution<int> byte(0, 255);
          auto garbage = [&](int64_t pages) {
            std::vector<uint8_t> b(static_cast<size_t>(pages * page_bytes));
            for (auto& x : b) x = static_cast<uint8_t>(byte(rng));
            return b;
          };
          std::vector<uint8_t> host[4] = {garbage(int64_t{c.nb_r} * c.hpb_r),
                                          garbage(int64_t{c.nb_r} * c.hpb_r),
                                          garbage(int64_t{c.nb_s} * c.hpb_s),
                                          garbage(int64_t{c.nb_s} * c.hpb_s)};
          DeviceArray devq[4] = {DeviceArray::of(host[0]), DeviceArray::of(host[1]),
                                 DeviceArray::of(host[2]), DeviceArray::of(host[3])};
          auto quantized = [&](kernels::KvAppendParams p, bool on_device) {
            void* a[4];
            for (int i = 0; i < 4; ++i) a[i] = on_device ? devq[i].data() : host[i].data();
            p.retrieval.k = a[0];
            p.retrieval.v = a[1];
            p.streaming.k = a[2];
            p.streaming.v = a[3];
            for (kernels::PagedKvPool* pool : {&p.retrieval, &p.streaming}) {
              pool->quant = q;
              pool->dtype = DType::kU8;
            }
            return p;
          };
          kernels::cpu::kv_append(quantized(indexed_append_params(c, nullptr), false), cpu_pool());
          gpu()->kv_append(quantized(indexed_append_params(c, &dev), true));
          const std::string label = std::string(kernels::kv_quant_name(q)) + " d " +
                                    std::to_string(d) + " page " + std::to_string(pt) + " src " +
                                    dtype_label(src);
          for (int i = 0; i < 4; ++i) EXPECT_EQ(devq[i].download(), host[i]) << i << " " << label;
          EXPECT_EQ(dev.kmin.download(), c.kmin.bytes) << "kmin, " << label;
          EXPECT_EQ(dev.kmax.download(), c.kmax.bytes) << "kmax, " << label;
        }
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

TEST(CudaPagedOps, SummariesStayExactAcrossChunksAndDecodeSteps) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(22);
  const int32_t pt = 64, d = 128;
  // One sequence grows 0 -> 37 -> 38 -> 45 -> 110 tokens in four calls (partial logical pages
  // continued by the next call, a page started by a decode token).
  const std::vector<std::pair<int32_t, int32_t>> steps = {{37, 37}, {1, 38}, {7, 45}, {65, 110}};
  AppendCase c = make_append_case(rng, d, pt, DType::kBF16, {37}, {110}, {3});
  DeviceAppend dev(c);
  for (auto [q_len, kv_len] : steps) {
    next_step(rng, c, dev, q_len, kv_len);
    kernels::cpu::page_summary_update(summary_params(c, nullptr), cpu_pool());
    gpu()->page_summary_update(summary_params(c, &dev));
    EXPECT_EQ(dev.kmin.download(), c.kmin.bytes) << "kmin after kv_len " << kv_len;
    EXPECT_EQ(dev.kmax.download(), c.kmax.bytes) << "kmax after kv_len " << kv_len;
  }
}

// The append with an index request, one launch on the GPU, against kernels/cpu's append then
// summary update: decode batches (runs of one token into partly filled logical pages, a token that
// starts a logical page, one that starts a physical page) and prefill batches (runs across
// logical and physical pages, a ring that wraps inside the call, a chunk starting mid page), keys
// bf16 (16-byte copies) and f16 (converted into the bf16 pool), summaries f32 and bf16.
TEST(CudaPagedOps, KvAppendWithIndexRequestEqualsCpuAppendThenSummaries) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(27);
  struct Shape {
    const char* name;
    int32_t pt, lpt;
    std::vector<int32_t> q_lens, kv_lens, ring;
  };
  const std::vector<Shape> shapes = {
      {"decode 1 seq", 64, 16, {1}, {4101}, {5}},
      {"decode batch",
       64,
       16,
       {1, 1, 1, 1, 1},
       {300, 17, 64 * 3 + 1, 16 * 5 + 1, 5},
       {5, 5, 5, 5, 5}},
      {"decode flat pages", 16, 16, {1, 1, 1}, {33, 40, 7}, {4, 4, 4}},
      {"prefill", 64, 16, {40, 64 * 6, 7, 130}, {40, 64 * 9 + 5, 3 * 64 + 9, 130}, {4, 3, 6, 5}},
      {"prefill flat pages", 16, 16, {100, 1, 37}, {100, 250, 16 * 4 + 3}, {3, 4, 5}},
  };
  for (const Shape& sh : shapes) {
    for (DType src : {DType::kBF16, DType::kF16}) {
      for (DType sum : {DType::kF32, DType::kBF16}) {
        AppendCase c =
            make_append_case(rng, 128, sh.pt, src, sh.q_lens, sh.kv_lens, sh.ring, sum, sh.lpt);
        DeviceAppend dev(c);
        kernels::cpu::kv_append(append_params(c, nullptr), cpu_pool());
        kernels::cpu::page_summary_update(summary_params(c, nullptr), cpu_pool());
        gpu()->kv_append(indexed_append_params(c, &dev));
        const std::string label =
            std::string(sh.name) + ", keys " + dtype_label(src) + ", summaries " + dtype_label(sum);
        expect_same_arrays(dev, c, label);
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// One sequence grows over several fused calls, prefill chunks then decode steps, as a layer sees
// it: the summaries stay equal to the CPU's two ops after every call, including the partly filled
// logical pages continued by the next call.
TEST(CudaPagedOps, KvAppendWithIndexRequestStaysExactAcrossSteps) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(28);
  const int32_t pt = 64, d = 128;
  std::vector<std::pair<int32_t, int32_t>> steps = {{37, 37}, {1, 38}, {7, 45}, {65, 110}};
  for (int32_t len = 111; len <= 130; ++len) steps.emplace_back(1, len);  // crosses 112 and 128
  AppendCase c = make_append_case(rng, d, pt, DType::kBF16, {37}, {130}, {3}, DType::kF32);
  DeviceAppend dev(c);
  for (auto [q_len, kv_len] : steps) {
    next_step(rng, c, dev, q_len, kv_len);
    kernels::cpu::kv_append(append_params(c, nullptr), cpu_pool());
    kernels::cpu::page_summary_update(summary_params(c, nullptr), cpu_pool());
    gpu()->kv_append(indexed_append_params(c, &dev));
    EXPECT_EQ(dev.rk.download(), c.rk.bytes) << "retrieval K after kv_len " << kv_len;
    EXPECT_EQ(dev.sk.download(), c.sk.bytes) << "streaming K after kv_len " << kv_len;
    EXPECT_EQ(dev.kmin.download(), c.kmin.bytes) << "kmin after kv_len " << kv_len;
    EXPECT_EQ(dev.kmax.download(), c.kmax.bytes) << "kmax after kv_len " << kv_len;
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// ---- page_select ----

struct SelectCase {
  int32_t d = 64, group = 1, pt = 16, lpt = 16, budget = 4, num_kv = 3, hpb = 2;
  int32_t keep_first = 0;         // PageSelectParams::keep_first_page
  int32_t max_bounds_blocks = 0;  // PageSelectParams::max_bounds_blocks
  DType dt = DType::kBF16;
  std::vector<int32_t> kv_lens, q_lens, out_rows, mode, slot, table, q_indptr;
  int32_t stride = 0, num_blocks = 0, num_rows = 6, max_selected = 0, max_pages = 0;
  HostArray q, kmin, kmax;
};

// `lens`: the sequences' kv lengths (one decode token each, every row written); empty: a fixed
// mix of short sequences, prefill chunks, a reused selection and an empty sequence. `dt`: the
// queries' and the summaries' type.
SelectCase make_select_case(std::mt19937& rng, int32_t d, int32_t group, int32_t pt, int32_t lpt,
                            int32_t budget, bool integers, const std::vector<int32_t>& lens = {},
                            DType dt = DType::kBF16) {
  SelectCase c;
  c.dt = dt;
  c.d = d;
  c.group = group;
  c.pt = pt;
  c.lpt = lpt;
  c.budget = budget;
  c.mode = {static_cast<int32_t>(HeadMode::kSelected), static_cast<int32_t>(HeadMode::kStreaming),
            static_cast<int32_t>(HeadMode::kSelected)};
  c.slot = {1, 0, 0};
  c.kv_lens = {1, budget * pt, budget * pt + 1, 7 * pt + lpt / 2 + 1, 23 * pt - 3, 0, 61 * pt + 5};
  c.q_lens = {1, 1, 5, 1, 1, 0, 1};
  c.out_rows = {4, 0, 2, -1, 5, 1, 3};  // sequence 3 reuses its selection: untouched
  c.num_rows = 7;
  if (!lens.empty()) {
    c.kv_lens = lens;
    c.q_lens.assign(lens.size(), 1);
    c.out_rows.resize(lens.size());
    std::iota(c.out_rows.begin(), c.out_rows.end(), 0);
    c.num_rows = static_cast<int32_t>(lens.size());
  }
  c.q_indptr = {0};
  for (int32_t q : c.q_lens) c.q_indptr.push_back(c.q_indptr.back() + q);
  int32_t max_pages = 1;
  for (int32_t l : c.kv_lens) max_pages = std::max(max_pages, (l + pt - 1) / pt);
  c.stride = max_pages;
  const int32_t seqs = static_cast<int32_t>(c.kv_lens.size());
  c.num_blocks = seqs * max_pages;
  c.table.resize(static_cast<size_t>(c.num_blocks));
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  if (seqs > 4 && c.stride > 5) {
    c.table[static_cast<size_t>(4 * c.stride + 5)] = -1;  // a hole: its bounds are -inf
  } else {
    c.table[static_cast<size_t>(c.stride / 2)] = -1;
  }
  c.max_selected = std::max(3, budget) + 2;
  c.max_pages = max_pages + 3;
  const int64_t q_n = int64_t{c.q_indptr.back()} * c.num_kv * group * d;
  const int64_t s_n = int64_t{c.num_blocks} * c.hpb * (pt / lpt) * d;
  c.q = HostArray(q_n, c.dt);
  c.kmin = HostArray(s_n, c.dt);
  c.kmax = HostArray(s_n, c.dt);
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  for (int64_t i = 0; i < q_n; ++i)
    c.q.set(i, integers ? static_cast<float>(small(rng)) : real(rng));
  for (int64_t i = 0; i < s_n; ++i) {
    float a = integers ? static_cast<float>(small(rng)) : real(rng);
    float b = integers ? static_cast<float>(small(rng)) : real(rng);
    if (a > b) std::swap(a, b);
    c.kmin.set(i, a);
    c.kmax.set(i, b);
  }
  if (integers) {  // copy some logical pages' summaries verbatim: exact ties across pages
    const int64_t rows = int64_t{c.num_blocks} * c.hpb * (pt / lpt);
    for (int64_t row = 1; row < rows; row += 3) {
      for (int32_t e = 0; e < d; ++e) {
        c.kmin.set(row * d + e, c.kmin.values[static_cast<size_t>((row - 1) * d + e)]);
        c.kmax.set(row * d + e, c.kmax.values[static_cast<size_t>((row - 1) * d + e)]);
      }
    }
  }
  return c;
}

struct SelectOutputs {
  std::vector<int32_t> selected, num_selected;
  std::vector<float> scores;
};

// Device mirrors of a SelectCase's arrays and of the outputs `o` (their initial contents), and
// the params `p` pointed at them.
struct DeviceSelect {
  DeviceArray q, indptr, lens, mode, slot, table, kmin, kmax, rows, sel, num, scores;
  kernels::PageSelectParams p;
  DeviceSelect(const SelectCase& c, const SelectOutputs& o, const kernels::PageSelectParams& base)
      : q(DeviceArray::of(c.q)),
        indptr(DeviceArray::of(c.q_indptr)),
        lens(DeviceArray::of(c.kv_lens)),
        mode(DeviceArray::of(c.mode)),
        slot(DeviceArray::of(c.slot)),
        table(DeviceArray::of(c.table)),
        kmin(DeviceArray::of(c.kmin)),
        kmax(DeviceArray::of(c.kmax)),
        rows(DeviceArray::of(c.out_rows)),
        sel(DeviceArray::of(o.selected)),
        num(DeviceArray::of(o.num_selected)),
        scores(DeviceArray::of(o.scores)),
        p(base) {
    p.q = q.data();
    p.q_indptr = indptr.as<int32_t>();
    p.kv_lens = lens.as<int32_t>();
    p.head_mode = mode.as<int32_t>();
    p.head_slot = slot.as<int32_t>();
    p.retrieval_blocks = table.as<int32_t>();
    p.summaries.kmin = kmin.data();
    p.summaries.kmax = kmax.data();
    p.out_rows = rows.as<int32_t>();
    p.selected = sel.as<int32_t>();
    p.num_selected = num.as<int32_t>();
    p.page_scores = scores.as<float>();
  }
  // Rewrites the outputs in place with `o`'s contents (the captured pointers stay valid).
  void reset(const SelectOutputs& o) {
    gpu()->copy_bytes(sel.data(), o.selected.data(), static_cast<int64_t>(o.selected.size() * 4));
    gpu()->copy_bytes(num.data(), o.num_selected.data(),
                      static_cast<int64_t>(o.num_selected.size() * 4));
    gpu()->copy_bytes(scores.data(), o.scores.data(), static_cast<int64_t>(o.scores.size() * 4));
  }
};

// The CPU reference (on_gpu false) or the GPU selection of `c`, outputs initialised to sentinels.
// Outputs of `c`'s shape filled with sentinels (no selector writes these values).
SelectOutputs sentinel_outputs(const SelectCase& c) {
  const auto seqs = static_cast<int64_t>(c.kv_lens.size());
  SelectOutputs o;
  o.selected.assign(static_cast<size_t>(c.num_rows * c.num_kv * c.max_selected), 12345);
  o.num_selected.assign(static_cast<size_t>(c.num_rows * c.num_kv), 777);
  o.scores.assign(static_cast<size_t>(seqs * c.num_kv * c.max_pages), 99.0f);
  return o;
}

// The sizes of `c` in PageSelectParams (arrays left for the caller to point at).
kernels::PageSelectParams select_sizes(const SelectCase& c) {
  kernels::PageSelectParams p;
  p.q_dtype = c.dt;
  p.num_seqs = static_cast<int32_t>(c.kv_lens.size());
  p.num_q_heads = c.num_kv * c.group;
  p.num_kv_heads = c.num_kv;
  p.head_dim = c.d;
  p.page_tokens = c.pt;
  p.retrieval_blocks_stride = c.stride;
  p.heads_per_block = c.hpb;
  p.summaries.dtype = c.dt;
  p.summaries.logical_page_tokens = c.lpt;
  p.summaries.logical_per_page = c.pt / c.lpt;
  p.budget_pages = c.budget;
  p.keep_first_page = c.keep_first;
  p.max_selected = c.max_selected;
  p.max_pages = c.max_pages;
  p.max_bounds_blocks = c.max_bounds_blocks;
  return p;
}

SelectOutputs run_select(const SelectCase& c, bool on_gpu) {
  SelectOutputs o = sentinel_outputs(c);
  kernels::PageSelectParams p = select_sizes(c);
  if (!on_gpu) {
    p.q = c.q.data();
    p.q_indptr = c.q_indptr.data();
    p.kv_lens = c.kv_lens.data();
    p.head_mode = c.mode.data();
    p.head_slot = c.slot.data();
    p.retrieval_blocks = c.table.data();
    p.summaries.kmin = const_cast<void*>(c.kmin.data());
    p.summaries.kmax = const_cast<void*>(c.kmax.data());
    p.out_rows = c.out_rows.data();
    p.selected = o.selected.data();
    p.num_selected = o.num_selected.data();
    p.page_scores = o.scores.data();
    kernels::cpu::page_select(p, cpu_pool());
    return o;
  }
  DeviceSelect dev(c, o, p);
  gpu()->page_select(dev.p);
  o.selected = dev.sel.download_as<int32_t>();
  o.num_selected = dev.num.download_as<int32_t>();
  o.scores = dev.scores.download_as<float>();
  return o;
}

// The (row, kv head) lists on which two selections differ, for a readable failure message.
std::string selection_diff(const SelectCase& c, const SelectOutputs& got,
                           const SelectOutputs& want) {
  std::string msg;
  for (int32_t r = 0; r < c.num_rows; ++r) {
    for (int32_t g = 0; g < c.num_kv; ++g) {
      const size_t base = static_cast<size_t>((r * c.num_kv + g) * c.max_selected);
      const auto list = [&](const SelectOutputs& o) {
        std::string t = "n=" + std::to_string(o.num_selected[base / c.max_selected]) + " [";
        for (int32_t i = 0; i < c.max_selected; ++i)
          t += std::to_string(o.selected[base + static_cast<size_t>(i)]) + " ";
        return t + "]";
      };
      const std::string a = list(got), b = list(want);
      if (a != b)
        msg += "row " + std::to_string(r) + " head " + std::to_string(g) + ": gpu " + a + " cpu " +
               b + "\n";
    }
  }
  return msg;
}

TEST(CudaPageSelect, EqualsCpuExactlyOnIntegerDataWithTies) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(23);
  struct Config {
    int32_t d, group, pt, lpt, budget;
  };
  // group 16: two passes of 8 heads in both kernels. bf16 / f16 at head_dim 64 / 128, groups up
  // to 8 and logical pages per page dividing 16 take the tensor-core bounds
  // (page_select_mma.cuh): rep 3 runs them on f16 queries and summaries; the others (head_dim 96,
  // group 16) the f32 bounds kernel.
  for (Config cf :
       {Config{64, 1, 16, 16, 4}, Config{128, 4, 64, 16, 4}, Config{96, 8, 64, 16, 6},
        Config{128, 4, 16, 16, 3}, Config{64, 2, 32, 8, 10}, Config{64, 16, 64, 16, 5},
        Config{128, 8, 64, 4, 7}}) {
    for (int rep = 0; rep < 4; ++rep) {
      SelectCase c = make_select_case(rng, cf.d, cf.group, cf.pt, cf.lpt, cf.budget, true, {},
                                      rep == 3 ? DType::kF16 : DType::kBF16);
      c.keep_first = rep % 2;  // both selection rules
      const SelectOutputs want = run_select(c, false), got = run_select(c, true);
      const std::string label = "d " + std::to_string(cf.d) + " group " + std::to_string(cf.group) +
                                " page " + std::to_string(cf.pt) + " budget " +
                                std::to_string(cf.budget) + " keep first " +
                                std::to_string(c.keep_first) + " " + dtype_label(c.dt);
      EXPECT_EQ(got.selected, want.selected) << label << "\n" << selection_diff(c, got, want);
      EXPECT_EQ(got.num_selected, want.num_selected) << label;
      EXPECT_EQ(got.scores, want.scores) << label;
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// Long contexts (thousands of pages: many bounds blocks per item, several chunks of the choose
// block, scores beyond the shared-memory cap) on integer data with many exact ties, batch 1 and
// a batch of uneven lengths, logical pages per physical page 4 (lanes per page), 3 and 1 (one
// lane, several logical pages), 64 (32 lanes of 2), and the Llama-3-8B budget of 64 pages; odd
// groups and page counts.
TEST(CudaPageSelect, EqualsCpuExactlyOnLongContextsWithTies) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(25);
  struct Config {
    int32_t d, group, pt, lpt, budget;
    std::vector<int32_t> lens;
  };
  const std::vector<Config> configs = {
      {128, 4, 64, 16, 64, {131072}},
      {128, 4, 64, 16, 64, {64 * 2048 + 17, 5000, 64 * 64, 64 * 64 + 1, 1, 70000}},
      {64, 2, 48, 16, 20, {48 * 3000 + 7, 900}},
      {64, 4, 16, 16, 64, {16 * 5000 + 3}},
      {32, 1, 64, 1, 8, {64 * 300 + 63, 64 * 9}},
      {128, 4, 16, 16, 64, {16 * 14000 + 5}},  // 14001 pages: scores in the workspace
      // group 3 (a partial pass of 4 heads), head_dim 256 (two rounds of loads per thread), page
      // counts off the multiples of 4 (the choose kernel's float4 reads of the bounds)
      {256, 3, 64, 16, 64, {64 * 2049 + 1, 64 * 4097 + 5, 64 * 66 + 2}},
      {64, 8, 64, 16, 64, {64 * 3001 + 9}},  // group 8: eight heads per pass
  };
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& cf = configs[ci];
    SelectCase c = make_select_case(rng, cf.d, cf.group, cf.pt, cf.lpt, cf.budget, true, cf.lens);
    c.keep_first = static_cast<int32_t>(ci % 2);  // both selection rules
    const SelectOutputs want = run_select(c, false), got = run_select(c, true);
    const std::string label = "d " + std::to_string(cf.d) + " group " + std::to_string(cf.group) +
                              " page " + std::to_string(cf.pt) + " logical " +
                              std::to_string(cf.lpt) + " first len " + std::to_string(cf.lens[0]);
    EXPECT_EQ(got.selected, want.selected) << label << "\n" << selection_diff(c, got, want);
    EXPECT_EQ(got.num_selected, want.num_selected) << label;
    EXPECT_EQ(got.scores, want.scores) << label;
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// The bounds kernels with one to three blocks per (sequence, kv head), so that every warp loops
// over many tiles (the tensor-core kernel's copies of tile t + stride in flight while tile t is
// scored, the table entries a tile further ahead): integer data with ties, head_dim 64 / 128,
// bf16 / f16, 1 to 16 logical pages per physical page, groups 1 / 4 / 8 (tensor cores) and 16
// (f32 bounds), sequences of a few to a few hundred pages; pages, counts and scores equal the
// CPU's exactly.
TEST(CudaPageSelect, EqualsCpuWithManyTilesPerWarp) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(27);
  for (int32_t d : {64, 128}) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (int32_t pt : {16, 32, 64, 128, 256}) {
        for (int32_t group : {1, 4, 8, 16}) {
          if (group == 16 && (dt == DType::kF16 || pt > 64)) continue;  // a few f32-bounds cases
          for (int32_t blocks : {1, 3}) {
            const int32_t lpt = 16;
            const std::vector<int32_t> lens = {pt * 203 + 7, pt * 41 + 1, 1, 2 * pt,
                                               lpt * (3 * 16 * 4 + 5) + 3};
            SelectCase c = make_select_case(rng, d, group, pt, lpt, 8, true, lens, dt);
            c.keep_first = (pt / 16 + blocks) % 2;
            c.max_bounds_blocks = blocks;
            const SelectOutputs want = run_select(c, false), got = run_select(c, true);
            const std::string label = "d " + std::to_string(d) + " " + dtype_label(dt) + " page " +
                                      std::to_string(pt) + " group " + std::to_string(group) +
                                      " blocks " + std::to_string(blocks);
            EXPECT_EQ(got.selected, want.selected) << label << "\n" << selection_diff(c, got, want);
            EXPECT_EQ(got.num_selected, want.num_selected) << label;
            EXPECT_EQ(got.scores, want.scores) << label;
          }
        }
      }
    }
  }
  EXPECT_TRUE(gpu()->take_error().ok());
}

// The selection captured in a CUDA graph replays to the CPU's result, outputs reset to sentinels
// before every replay: no scratch state carries over from one call to the next.
TEST(CudaPageSelect, CapturedSelectionReplaysToTheCpuResult) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(26);
  const SelectCase c =
      make_select_case(rng, 128, 4, 64, 16, 64, true, {131072, 64 * 70 + 3, 20000, 64 * 64});
  const SelectOutputs want = run_select(c, false);
  const SelectOutputs init = sentinel_outputs(c);
  DeviceSelect dev(c, init, select_sizes(c));
  gpu()->page_select(dev.p);  // eager: sizes the scratch
  ASSERT_TRUE(gpu()->begin_capture().ok());
  gpu()->page_select(dev.p);
  auto graph = gpu()->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (int round = 0; round < 2; ++round) {
    dev.reset(init);
    ASSERT_TRUE(gpu()->replay(*graph).ok());
    SelectOutputs got;
    got.selected = dev.sel.download_as<int32_t>();
    got.num_selected = dev.num.download_as<int32_t>();
    got.scores = dev.scores.download_as<float>();
    EXPECT_EQ(got.selected, want.selected) << "round " << round << "\n"
                                           << selection_diff(c, got, want);
    EXPECT_EQ(got.num_selected, want.num_selected) << "round " << round;
    EXPECT_EQ(got.scores, want.scores) << "round " << round;
  }
  gpu()->drop_graphs();
  EXPECT_TRUE(gpu()->take_error().ok());
}

TEST(CudaPageSelect, OptimalUpToRoundingOnContinuousData) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(24);
  for (int rep = 0; rep < 4; ++rep) {
    const SelectCase c = make_select_case(rng, 128, 4, 64, 16, 5, false);
    const SelectOutputs want = run_select(c, false), got = run_select(c, true);
    EXPECT_EQ(got.num_selected, want.num_selected);
    SCOPED_TRACE(selection_diff(c, got, want));
    // Scores agree to f32 summation order; every chosen page scores at least the CPU's k-th best
    // (minus rounding), and the newest page is always last.
    ASSERT_EQ(got.scores.size(), want.scores.size());
    for (size_t i = 0; i < got.scores.size(); ++i) {
      if (std::isinf(want.scores[i])) {
        EXPECT_EQ(got.scores[i], want.scores[i]) << i;
      } else {
        EXPECT_NEAR(got.scores[i], want.scores[i], 1e-3 * (1.0 + std::fabs(want.scores[i]))) << i;
      }
    }
    const int32_t seqs = static_cast<int32_t>(c.kv_lens.size());
    for (int32_t s = 0; s < seqs; ++s) {
      const int32_t row = c.out_rows[static_cast<size_t>(s)];
      if (row < 0) continue;
      for (int32_t g = 0; g < c.num_kv; ++g) {
        const size_t base = static_cast<size_t>(row * c.num_kv + g);
        const int32_t n = got.num_selected[base];
        if (n == 0) continue;
        const int32_t* gs = got.selected.data() + base * static_cast<size_t>(c.max_selected);
        const int32_t* ws = want.selected.data() + base * static_cast<size_t>(c.max_selected);
        EXPECT_EQ(gs[n - 1], ws[n - 1]) << "newest page, seq " << s;
        const float* sc =
            want.scores.data() + static_cast<size_t>((s * c.num_kv + g) * c.max_pages);
        float kth = INFINITY;
        for (int32_t i = 0; i + 1 < n; ++i) kth = std::min(kth, sc[ws[i]]);
        for (int32_t i = 0; i + 1 < n; ++i) {
          EXPECT_GE(sc[gs[i]], kth - 1e-3f) << "seq " << s << " head " << g << " page " << gs[i];
          if (i > 0) {
            EXPECT_LT(gs[i - 1], gs[i]) << "ascending";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ls::cuda_test
