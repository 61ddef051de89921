#pragma once
// Shared set-up for the kernel benchmarks: one process-wide pool (all cores of this machine),
// fast pseudo-random fills for large buffers, and a single-sequence paged KV layout.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kv_quant.h"
#include "kernels/paged_kv.h"

namespace ls::bench {

// All cores, or LS_BENCH_THREADS of them.
inline ThreadPool& bench_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("LS_BENCH_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

// A 64-byte-aligned anonymous mapping with transparent huge pages asked for: weights as the CPU
// backend holds them (its large allocations are such mappings), so TLB behaviour matches.
class HugeBuffer {
 public:
  explicit HugeBuffer(int64_t bytes) : bytes_(std::max<int64_t>(bytes, 1)) {
    void* p = mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    madvise(p, static_cast<size_t>(bytes_), MADV_HUGEPAGE);
    data_ = static_cast<uint8_t*>(p);
  }
  ~HugeBuffer() { munmap(data_, static_cast<size_t>(bytes_)); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  uint8_t* data() { return data_; }

 private:
  int64_t bytes_;
  uint8_t* data_;
};

// xorshift fill in [-1, 1), stored as dtype.
inline void fill_random(void* data, DType dtype, int64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<float> chunk(4096);
  for (int64_t i = 0; i < n; i += 4096) {
    const int64_t m = std::min<int64_t>(4096, n - i);
    for (int64_t j = 0; j < m; ++j) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      chunk[static_cast<size_t>(j)] =
          static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / (1 << 23);
    }
    convert_from_f32(chunk.data(), dtype, static_cast<char*>(data) + dtype_nbytes(dtype, i), m);
  }
}

// One sequence of `context` tokens in head-wise pages for `num_kv_heads` heads (blocks in
// order; heads_per_block = num_kv_heads), plus the summaries page_select reads.
struct PagedSequence {
  int32_t context = 0, num_kv_heads = 0, head_dim = 0, page_tokens = 0, logical_tokens = 0;
  DType dtype = DType::kF32;
  std::vector<uint8_t> k, v, kmin, kmax;
  std::vector<int32_t> blocks;  // [num_pages]

  PagedSequence(int32_t ctx, int32_t kv_heads, int32_t dim, int32_t pt, int32_t lpt, DType dt)
      : context(ctx),
        num_kv_heads(kv_heads),
        head_dim(dim),
        page_tokens(pt),
        logical_tokens(lpt),
        dtype(dt) {
    const int32_t pages = num_pages();
    const int64_t n = int64_t{pages} * kv_heads * pt * dim;
    k.resize(static_cast<size_t>(dtype_nbytes(dt, n)));
    v.resize(k.size());
    fill_random(k.data(), dt, n, 1);
    fill_random(v.data(), dt, n, 2);
    const int64_t ns = int64_t{pages} * kv_heads * (pt / lpt) * dim;
    kmin.resize(static_cast<size_t>(dtype_nbytes(dt, ns)));
    kmax.resize(kmin.size());
    fill_random(kmin.data(), dt, ns, 3);
    fill_random(kmax.data(), dt, ns, 4);
    for (size_t i = 0; i < static_cast<size_t>(ns); ++i) {  // keep kmin <= kmax
      float a, b;
      convert_to_f32(dt, kmin.data() + dtype_nbytes(dt, static_cast<int64_t>(i)), &a, 1);
      convert_to_f32(dt, kmax.data() + dtype_nbytes(dt, static_cast<int64_t>(i)), &b, 1);
      if (a > b) {
        convert_from_f32(&b, dt, kmin.data() + dtype_nbytes(dt, static_cast<int64_t>(i)), 1);
        convert_from_f32(&a, dt, kmax.data() + dtype_nbytes(dt, static_cast<int64_t>(i)), 1);
      }
    }
    blocks.resize(static_cast<size_t>(pages));
    for (int32_t i = 0; i < pages; ++i) blocks[static_cast<size_t>(i)] = i;
  }
  int32_t num_pages() const { return (context + page_tokens - 1) / page_tokens; }
  kernels::PagedKvPool pool() {
    return kernels::PagedKvPool{k.data(),     v.data(),    dtype,   num_pages(),
                                num_kv_heads, page_tokens, head_dim};
  }
  kernels::PageSummaries summaries() {
    return kernels::PageSummaries{kmin.data(), kmax.data(), dtype, logical_tokens,
                                  page_tokens / logical_tokens};
  }
};

// K and V head-pages of `quant` (kNone: bf16) filled from random f32 rows, quantized as kv_append
// would: k, v are resized to [head_pages, page bytes]. Returns the bytes of one head-page.
inline int64_t fill_kv_pages(kernels::KvQuant quant, int64_t head_pages, int32_t page_tokens,
                             int32_t head_dim, std::vector<uint8_t>& k, std::vector<uint8_t>& v) {
  const int64_t page_bytes =
      quant == kernels::KvQuant::kNone
          ? dtype_nbytes(DType::kBF16, int64_t{page_tokens} * head_dim)
          : kernels::kv_quant_page_bytes(quant, page_tokens, head_dim);
  k.assign(static_cast<size_t>(head_pages * page_bytes), 0);
  v.assign(k.size(), 0);
  std::vector<float> row(static_cast<size_t>(page_tokens) * head_dim);
  uint8_t* dst[2] = {k.data(), v.data()};
  for (int a = 0; a < 2; ++a) {
    for (int64_t hp = 0; hp < head_pages; ++hp) {
      fill_random(row.data(), DType::kF32, static_cast<int64_t>(row.size()),
                  static_cast<uint64_t>(hp * 2 + a + 1));
      if (quant == kernels::KvQuant::kNone) {
        convert_from_f32(row.data(), DType::kBF16, dst[a] + hp * page_bytes,
                         static_cast<int64_t>(row.size()));
        continue;
      }
      for (int32_t r = 0; r < page_tokens; ++r) {
        const kernels::KvQuantRow at =
            kernels::kv_quant_row(quant, dst[a], hp, r, page_tokens, head_dim);
        kernels::kv_quantize_row(quant, row.data() + int64_t{r} * head_dim, head_dim, at.codes,
                                 at.params);
      }
    }
  }
  return page_bytes;
}

}  // namespace ls::bench
