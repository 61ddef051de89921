#include "kernels/cpu/shared_prefix_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/kv_dequant.h"
#include "kernels/cpu/simd.h"

namespace ls::kernels::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Partial results of every (sequence, query head, slot): o normalised by its own sum,
// [num_seqs, num_q_heads, max_parts, head_dim] f32, and lse [num_seqs, num_q_heads, max_parts].
struct Partials {
  std::vector<float> o;
  std::vector<float> lse;
};

Partials& caller_partials() {
  thread_local Partials partials;
  return partials;
}

// Per-thread tile buffers, grown on demand and kept across calls (one call per layer per step).
struct Scratch {
  std::vector<float> q, s, kf, vf, o, m, l, alpha, row;
  TileState bind(int32_t rows, int32_t head_dim, int32_t page_tokens, int32_t width, bool lanes) {
    const auto grow = [](std::vector<float>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    };
    TileState t;
    t.rows = rows;
    t.lanes = lanes;
    t.padded_rows = lanes ? (rows + width - 1) / width * width : rows;
    t.head_dim = head_dim;
    t.ld_s = (page_tokens + width - 1) / width * width;
    grow(q, int64_t{t.padded_rows} * head_dim);
    grow(s, lanes ? int64_t{page_tokens} * t.padded_rows : int64_t{rows} * t.ld_s);
    grow(kf, int64_t{page_tokens} * head_dim);
    grow(vf, int64_t{page_tokens} * head_dim);
    grow(o, int64_t{rows} * head_dim);
    grow(m, t.padded_rows);
    grow(l, t.padded_rows);
    grow(alpha, t.padded_rows);
    grow(row, head_dim);
    t.q = q.data();
    t.s = s.data();
    t.kf = kf.data();
    t.o = o.data();
    t.m = m.data();
    t.l = l.data();
    t.alpha = alpha.data();
    return t;
  }
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

struct Geometry {
  int32_t group = 0;  // query heads per kv head
  int32_t head_dim = 0;
  int64_t q_row_bytes = 0;
};

int64_t part_index(const SharedPrefixParams& sp, int32_t seq, int32_t q_head, int32_t part) {
  return (int64_t{seq} * sp.attn.num_q_heads + q_head) * sp.max_parts + part;
}

// Row r of an item: sequence item_seqs[seq_begin + r / group], query head kv_head * group + r %
// group.
int32_t row_seq(const SharedPrefixParams& sp, const SharedPrefixItem& it, const Geometry& geo,
                int32_t r) {
  return sp.item_seqs[it.seq_begin + r / geo.group];
}

// Scaled queries of the item's rows in t's layout (see kernels/cpu/attention_tile.h).
template <class S>
void load_queries(const SharedPrefixParams& sp, const Geometry& geo, const SharedPrefixItem& it,
                  int32_t kv_head, const TileState& t, float* tmp) {
  const AttentionParams& p = sp.attn;
  const int64_t d = geo.head_dim;
  if (t.lanes) std::fill(t.q, t.q + d * t.padded_rows, 0.0f);
  for (int32_t r = 0; r < t.rows; ++r) {
    const int32_t seq = row_seq(sp, it, geo, r);
    const int32_t h = kv_head * geo.group + r % geo.group;
    const auto* src = static_cast<const char*>(p.q) +
                      (int64_t{p.q_indptr[seq]} * p.num_q_heads + h) * geo.q_row_bytes;
    float* dst = t.lanes ? tmp : t.q + int64_t{r} * d;
    simd::widen_to_f32<S>(p.q_dtype, src, dst, d);
    if (t.lanes) {
      for (int64_t e = 0; e < d; ++e) t.q[e * t.padded_rows + r] = dst[e] * p.scale;
    } else {
      for (int64_t e = 0; e < d; ++e) dst[e] *= p.scale;
    }
  }
}

// One item for one kv head: online softmax over the keys [key_begin, key_end) of table_seq's
// pages, then o / l and lse = m + log l of every row into its partial slot. kKv is the pool's
// float dtype, f32 for quantized pools (pages dequantized into the tile's buffers).
template <class S, DType kKv>
void run_item(const SharedPrefixParams& sp, const Geometry& geo, const SharedPrefixItem& it,
              int32_t kv_head, Partials& partials) {
  const AttentionParams& p = sp.attn;
  Scratch& scratch = thread_scratch();
  const PagedKvPool& kv = p.retrieval;
  const int32_t pt = kv.page_tokens;
  const int64_t d = geo.head_dim;
  const int32_t rows = it.num_seqs * geo.group;
  const bool lanes = rows >= kLanesMinRows;
  const bool dequant = kv.quant != KvQuant::kNone;
  TileState t = scratch.bind(rows, geo.head_dim, pt, S::kWidth, lanes);
  float* vf = scratch.vf.data();
  load_queries<S>(sp, geo, it, kv_head, t, scratch.row.data());
  std::fill(t.m, t.m + t.padded_rows, kNegInf);
  std::fill(t.l, t.l + t.padded_rows, 0.0f);
  std::fill(t.o, t.o + int64_t{rows} * d, 0.0f);

  const int32_t slot = p.head_slot[kv_head];
  const int32_t* table = p.retrieval_blocks + int64_t{it.table_seq} * p.retrieval_blocks_stride;
  const bool slot_ok = slot >= 0 && slot < kv.heads_per_block;
  for (int64_t pos = it.key_begin; slot_ok && pos < it.key_end;) {
    const int64_t lp = pos / pt;
    const int32_t lo = static_cast<int32_t>(pos - lp * pt);
    const int32_t hi = static_cast<int32_t>(std::min<int64_t>(pt, it.key_end - lp * pt));
    pos = (lp + 1) * pt;
    if (lp >= p.retrieval_blocks_stride) break;
    const int32_t block = table[lp];
    if (block < 0 || block >= kv.num_blocks) continue;  // no page: its keys are not visible
    const int64_t page = storage_page(kv, int64_t{block} * kv.heads_per_block + slot);
    if (page < 0) continue;
    const int32_t keys = hi - lo;
    const void* k_base = kv.k;
    const void* v_base = kv.v;
    int64_t key_row0 = page * pt + lo;
    if (dequant) {
      dequantize_page_rows(kv.quant, kv.k, page, pt, geo.head_dim, hi, t.kf);
      k_base = t.kf;
      v_base = vf;
      key_row0 = lo;
    }
    if (lanes) {
      const float* kf = t.kf;
      if constexpr (kKv == DType::kF32) {
        kf = static_cast<const float*>(k_base) + key_row0 * d;
      } else {
        simd::widen_to_f32<S>(kKv, static_cast<const char*>(kv.k) + dtype_nbytes(kKv, key_row0 * d),
                              t.kf, int64_t{keys} * d);
      }
      lanes_scores<S>(t, kf, keys);
      lanes_softmax<S>(t, keys);
    } else {
      dot_tile<S, kKv>(t.q, d, rows, k_base, key_row0, d, keys, d, t.s, t.ld_s);
      for (int32_t r = 0; r < rows; ++r) {
        std::fill(t.s + int64_t{r} * t.ld_s + keys, t.s + int64_t{r + 1} * t.ld_s, kNegInf);
      }
      rows_softmax<S>(t);
    }
    if (dequant) dequantize_page_rows(kv.quant, kv.v, page, pt, geo.head_dim, hi, vf);
    pv_update<S, kKv>(t, keys, v_base, key_row0);
  }

  for (int32_t r = 0; r < rows; ++r) {
    const int32_t seq = row_seq(sp, it, geo, r);
    const int32_t h = kv_head * geo.group + r % geo.group;
    const int64_t idx = part_index(sp, seq, h, it.part);
    const float l = t.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    partials.lse[static_cast<size_t>(idx)] = l > 0.0f ? t.m[r] + std::log(l) : kNegInf;
    float* dst = partials.o.data() + idx * d;
    const float* src = t.o + int64_t{r} * d;
    for (int64_t e = 0; e < d; ++e) dst[e] = src[e] * inv;
  }
}

// out row of (seq, h) = sum_j e^(lse_j - M) o_j / sum_j e^(lse_j - M) over the sequence's parts.
void merge_row(const SharedPrefixParams& sp, const Geometry& geo, const Partials& partials,
               int32_t seq, int32_t h, float* acc) {
  const AttentionParams& p = sp.attn;
  const int64_t d = geo.head_dim;
  const int32_t n = sp.num_parts[seq];
  float mx = kNegInf;
  for (int32_t j = 0; j < n; ++j) {
    mx = std::max(mx, partials.lse[static_cast<size_t>(part_index(sp, seq, h, j))]);
  }
  std::fill(acc, acc + d, 0.0f);
  float sum = 0.0f;
  if (mx != kNegInf) {
    for (int32_t j = 0; j < n; ++j) {
      const int64_t idx = part_index(sp, seq, h, j);
      const float lse = partials.lse[static_cast<size_t>(idx)];
      if (lse == kNegInf) continue;
      const float w = std::exp(lse - mx);
      sum += w;
      const float* o = partials.o.data() + idx * d;
      for (int64_t e = 0; e < d; ++e) acc[e] += w * o[e];
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t e = 0; e < d; ++e) acc[e] *= inv;
  void* dst =
      static_cast<char*>(p.out) + (int64_t{p.q_indptr[seq]} * p.num_q_heads + h) * geo.q_row_bytes;
  convert_from_f32(acc, p.q_dtype, dst, d);
}

Status validate(const SharedPrefixParams& sp) {
  const AttentionParams& p = sp.attn;
  const PagedKvPool& kv = p.retrieval;
  if (p.num_seqs < 0 || p.num_q_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.num_q_heads % p.num_kv_heads != 0 || !simd::is_float_dtype(p.q_dtype) ||
      (p.num_seqs > 0 && (!p.q || !p.out || !p.q_indptr || !p.head_slot || !sp.num_parts))) {
    return invalid_argument("shared-prefix attention: bad attention params");
  }
  const bool format_ok =
      kv.quant == KvQuant::kNone
          ? simd::is_float_dtype(kv.dtype)
          : kv.quant == KvQuant::kFp8 || kv.quant == KvQuant::kInt8 || kv.quant == KvQuant::kInt4;
  if (sp.num_items > 0 && (!kv.k || !kv.v || kv.page_tokens <= 0 || kv.head_dim != p.head_dim ||
                           kv.heads_per_block <= 0 || !format_ok || !p.retrieval_blocks ||
                           !sp.items || !sp.item_seqs)) {
    return invalid_argument("shared-prefix attention: bad retrieval pool or plan");
  }
  if (sp.max_parts <= 0) return invalid_argument("shared-prefix attention: max_parts <= 0");
  for (int32_t s = 0; s < p.num_seqs; ++s) {
    if (sp.num_parts[s] < 0 || sp.num_parts[s] > sp.max_parts) {
      return invalid_argument("shared-prefix attention: sequence {} has {} parts of {}", s,
                              sp.num_parts[s], sp.max_parts);
    }
  }
  for (int32_t i = 0; i < sp.num_items; ++i) {
    const SharedPrefixItem& it = sp.items[i];
    bool ok = it.num_seqs > 0 && it.seq_begin >= 0 && it.part >= 0 && it.key_begin >= 0 &&
              it.key_end >= it.key_begin && it.table_seq >= 0 && it.table_seq < p.num_seqs;
    for (int32_t j = 0; ok && j < it.num_seqs; ++j) {
      const int32_t s = sp.item_seqs[it.seq_begin + j];
      ok = s >= 0 && s < p.num_seqs && it.part < sp.num_parts[s];
    }
    if (!ok) return invalid_argument("shared-prefix attention: plan item {} is out of range", i);
  }
  return Status::ok_status();
}

template <class S>
void run(const SharedPrefixParams& sp, ThreadPool& pool) {
  const AttentionParams& p = sp.attn;
  Geometry geo;
  geo.group = p.num_q_heads / p.num_kv_heads;
  geo.head_dim = p.head_dim;
  geo.q_row_bytes = dtype_nbytes(p.q_dtype, p.head_dim);
  Partials& partials = caller_partials();
  const int64_t slots = int64_t{p.num_seqs} * p.num_q_heads * sp.max_parts;
  if (static_cast<int64_t>(partials.lse.size()) < slots) {
    partials.lse.resize(static_cast<size_t>(slots));
    partials.o.resize(static_cast<size_t>(slots * p.head_dim));
  }
  // Items are listed longest first by the plan (prefix, then suffix); threads pull (item, kv head)
  // pairs from a shared counter.
  const int64_t work_items = int64_t{sp.num_items} * p.num_kv_heads;
  std::atomic<int64_t> next{0};
  const auto work = [&](int) {
    for (int64_t w = next.fetch_add(1); w < work_items; w = next.fetch_add(1)) {
      const SharedPrefixItem& it = sp.items[w / p.num_kv_heads];
      const int32_t g = static_cast<int32_t>(w % p.num_kv_heads);
      if (p.retrieval.quant != KvQuant::kNone) {
        run_item<S, DType::kF32>(sp, geo, it, g, partials);
        continue;
      }
      simd::dispatch_float_dtype(p.retrieval.dtype,
                                 [&]<DType kKv>() { run_item<S, kKv>(sp, geo, it, g, partials); });
    }
  };
  if (work_items <= 1) {
    work(0);
  } else {
    pool.run_on_all(work);
  }
  const int64_t rows = int64_t{p.num_seqs} * p.num_q_heads;
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    float* acc = thread_scratch().bind(1, geo.head_dim, 1, S::kWidth, false).o;
    for (int64_t r = r0; r < r1; ++r) {
      merge_row(sp, geo, partials, static_cast<int32_t>(r / p.num_q_heads),
                static_cast<int32_t>(r % p.num_q_heads), acc);
    }
  });
}

}  // namespace

Status shared_prefix_attention(const SharedPrefixParams& sp, ThreadPool& pool, Isa isa) {
  if (Status st = validate(sp); !st.ok()) return st;
  if (sp.attn.num_seqs == 0) return Status::ok_status();
  simd::dispatch_isa(isa, [&]<class S>() {
    if (sp.attn.head_dim % S::kWidth != 0) {
      run<simd::Scalar>(sp, pool);  // vector kernels assume whole vectors per head row
    } else {
      run<S>(sp, pool);
    }
  });
  return Status::ok_status();
}

Status shared_prefix_attention(const SharedPrefixParams& sp, ThreadPool& pool) {
  return shared_prefix_attention(sp, pool, best_isa());
}

}  // namespace ls::kernels::cpu
