#include "kernels/cpu/kv_append.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/page_summary.h"
#include "kernels/cpu/simd.h"
#include "kernels/kv_quant.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace ls::kernels::cpu {

namespace {
std::atomic<int64_t> g_f16_saturated{0};
}  // namespace

void kv_store_f16(const float* src, uint16_t* dst, int64_t n) {
  constexpr float kMax = 65504.0f;  // largest finite f16
  int64_t i = 0;
  int64_t saturated = 0;
#if defined(__F16C__) && defined(__AVX__)
  // min/max return their second operand when either is NaN: x goes second so NaN survives.
  const __m256 hi = _mm256_set1_ps(kMax), lo = _mm256_set1_ps(-kMax);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const int over = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), hi, _CMP_GT_OQ));
    if (over != 0) saturated += __builtin_popcount(static_cast<unsigned>(over));
    const __m256 x = _mm256_max_ps(lo, _mm256_min_ps(hi, v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) {
    const float x = src[i];
    const bool over = x > kMax || x < -kMax;  // NaN compares false
    saturated += over;
    dst[i] = f32_to_f16(over ? (x > 0 ? kMax : -kMax) : x);
  }
  if (saturated != 0) g_f16_saturated.fetch_add(saturated, std::memory_order_relaxed);
}

int64_t kv_f16_saturated_total() { return g_f16_saturated.load(std::memory_order_relaxed); }

namespace {

// Converts one row of head_dim elements between float dtypes (f32 in between, exact widening,
// round-to-nearest-even narrowing as core/dtype does; f16 pages saturate, kv_store_f16).
void copy_row(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t head_dim,
              float* tmp) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(dtype_nbytes(dst_dtype, head_dim)));
    return;
  }
  simd::dispatch_isa(best_isa(),
                     [&]<class S>() { simd::widen_to_f32<S>(src_dtype, src, tmp, head_dim); });
  if (dst_dtype == DType::kF16) {
    kv_store_f16(tmp, static_cast<uint16_t*>(dst), head_dim);
    return;
  }
  convert_from_f32(tmp, dst_dtype, dst, head_dim);
}

}  // namespace

void kv_append(const KvAppendParams& p, ThreadPool& pool) {
  if (p.num_tokens <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.num_seqs <= 0) return;
  const int64_t d = p.head_dim;
  const int64_t src_row_bytes = dtype_nbytes(p.src_dtype, d);
  const auto* k_src = static_cast<const char*>(p.k);
  const auto* v_src = static_cast<const char*>(p.v);

  // One item per (sequence, kv head). The pools end up exactly as if every token were written
  // in order through the tables: when a streaming ring wraps inside one call, a token whose
  // ring row is written again later in the call is skipped (its write would be dead).
  const int64_t num_items = static_cast<int64_t>(p.num_seqs) * p.num_kv_heads;
  pool.parallel_for(num_items, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> tmp(static_cast<size_t>(d));
    for (int64_t item = i0; item < i1; ++item) {
      const int32_t s = static_cast<int32_t>(item / p.num_kv_heads);
      const int32_t g = static_cast<int32_t>(item % p.num_kv_heads);
      const int32_t q_begin = p.q_indptr[s], q_end = p.q_indptr[s + 1];
      const int32_t q_len = q_end - q_begin;
      if (q_len <= 0) continue;
      const int64_t first_pos = static_cast<int64_t>(p.kv_lens[s]) - q_len;
      if (first_pos < 0) continue;  // inconsistent lengths: write nothing
      const bool streaming = p.head_mode[g] == static_cast<int32_t>(HeadMode::kStreaming);
      const PagedKvPool& pool_g = streaming ? p.streaming : p.retrieval;
      if (pool_g.page_tokens <= 0 || pool_g.head_dim != p.head_dim || !pool_g.k || !pool_g.v ||
          (pool_g.page_slot && (!pool_g.home_k || !pool_g.home_v)))
        continue;
      const int32_t slot = p.head_slot[g];
      if (slot < 0 || slot >= pool_g.heads_per_block) continue;
      const int32_t pt = pool_g.page_tokens;
      const int32_t* table = streaming ? p.streaming_blocks : p.retrieval_blocks;
      const int32_t stride = streaming ? p.streaming_blocks_stride : p.retrieval_blocks_stride;
      const int32_t ring = streaming ? p.ring_pages[s] : 0;
      if (streaming && ring <= 0) continue;
      const KvQuant quant = pool_g.quant;
      const int64_t dst_row_bytes =
          quant == KvQuant::kNone ? dtype_nbytes(pool_g.dtype, d)
                                  : kv_quant_row_code_bytes(quant, p.head_dim);
      const int64_t page_bytes = pool_page_bytes(pool_g);
      for (int32_t t = 0; t < q_len; ++t) {
        const int64_t pos = first_pos + t;
        const int64_t page = pos / pt;
        int64_t table_index = page;
        if (streaming) {
          // The same ring row is written again later in this call: skip the dead write.
          if (page >= p.num_sink_pages && pos + int64_t{ring} * pt < p.kv_lens[s]) continue;
          table_index = streaming_table_index(static_cast<int32_t>(page), p.num_sink_pages, ring);
        }
        if (table_index >= stride) continue;
        const int32_t block = table[static_cast<int64_t>(s) * stride + table_index];
        if (block < 0 || block >= pool_g.num_blocks) continue;
        const int64_t head_page = static_cast<int64_t>(block) * pool_g.heads_per_block + slot;
        const int64_t row_offset = (pos % pt) * dst_row_bytes;
        const int64_t src_offset =
            ((q_begin + t) * static_cast<int64_t>(p.num_kv_heads) + g) * src_row_bytes;
        // Untiered: the page itself. Tiered: write-through to the home and, when the head-page
        // is resident, to its cache slot, so a slot never differs from its home.
        void* dst_k = pool_g.page_slot ? pool_g.home_k : pool_g.k;
        void* dst_v = pool_g.page_slot ? pool_g.home_v : pool_g.v;
        const int32_t cache_slot = pool_g.page_slot ? pool_g.page_slot[head_page] : -1;
        const bool cached = cache_slot >= 0 && cache_slot < pool_g.num_cache_slots;
        if (quant != KvQuant::kNone) {
          // Quantize on the way in: codes and this token's parameters, both inside the page.
          const int32_t row = static_cast<int32_t>(pos % pt);
          const int64_t param_bytes = 4 * int64_t{kv_quant_params_per_token(quant)};
          const char* srcs[2] = {k_src + src_offset, v_src + src_offset};
          void* homes[2] = {dst_k, dst_v};
          void* caches[2] = {pool_g.k, pool_g.v};
          for (int a = 0; a < 2; ++a) {
            simd::dispatch_isa(best_isa(), [&]<class S>() {
              simd::widen_to_f32<S>(p.src_dtype, srcs[a], tmp.data(), d);
            });
            const KvQuantRow home = kv_quant_row(quant, homes[a], head_page, row, pt, p.head_dim);
            kv_quantize_row(quant, tmp.data(), p.head_dim, home.codes, home.params);
            if (cached) {
              const KvQuantRow c = kv_quant_row(quant, caches[a], cache_slot, row, pt, p.head_dim);
              std::memcpy(c.codes, home.codes, static_cast<size_t>(dst_row_bytes));
              std::memcpy(c.params, home.params, static_cast<size_t>(param_bytes));
            }
          }
          continue;
        }
        const int64_t offset = head_page * page_bytes + row_offset;
        if (pool_g.page_slot != nullptr && !p.write_homes) {  // benchmarks: the resident slot only
          if (cached) {
            const int64_t cache_offset = cache_slot * page_bytes + row_offset;
            copy_row(k_src + src_offset, p.src_dtype, static_cast<char*>(pool_g.k) + cache_offset,
                     pool_g.dtype, d, tmp.data());
            copy_row(v_src + src_offset, p.src_dtype, static_cast<char*>(pool_g.v) + cache_offset,
                     pool_g.dtype, d, tmp.data());
          }
          continue;
        }
        copy_row(k_src + src_offset, p.src_dtype, static_cast<char*>(dst_k) + offset, pool_g.dtype,
                 d, tmp.data());
        copy_row(v_src + src_offset, p.src_dtype, static_cast<char*>(dst_v) + offset, pool_g.dtype,
                 d, tmp.data());
        if (cached) {
          const int64_t cache_offset = cache_slot * page_bytes + row_offset;
          std::memcpy(static_cast<char*>(pool_g.k) + cache_offset,
                      static_cast<const char*>(dst_k) + offset,
                      static_cast<size_t>(dst_row_bytes));
          std::memcpy(static_cast<char*>(pool_g.v) + cache_offset,
                      static_cast<const char*>(dst_v) + offset,
                      static_cast<size_t>(dst_row_bytes));
        }
      }
    }
  });
  if (p.summaries.kmin) page_summary_update(summary_update_of(p), pool);
}

}  // namespace ls::kernels::cpu
