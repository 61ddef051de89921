#pragma once
// A paged-attention test scenario: random keys/values/queries for a batch of sequences, laid
// out in head-wise pages exactly as kernels/paged_kv.h describes (written here by naive
// indexing, independently of kv_append), plus a dense double-precision reference that applies
// each head mode's visibility rule token by token over contiguous K/V.
//
// Everything the kernel must not read is NaN: unused pool slots, unwritten token rows, a "trap"
// block that every unused block-table entry points to, and the selected-list entries past
// num_selected. A visit to the wrong page therefore shows up as NaN in the output.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "../common/selection_rows.h"

#include "kernel_test_util.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::test {

struct SeqSpec {
  int32_t kv_len = 1;
  int32_t q_len = 1;
  int32_t local_tokens = 32;  // streaming window of this sequence
  int32_t ring_pages = 0;     // 0: the minimum the contract allows for this chunk
  int32_t selected_row = -1;  // row of the selection arrays, or -1
  // Per kv head (used by kSelected heads when selected_row >= 0): ascending logical pages.
  std::vector<std::vector<int32_t>> selected;
};

struct CaseConfig {
  int32_t head_dim = 64;
  int32_t group = 1;  // query heads per kv head
  int32_t page_tokens = 16;
  std::vector<HeadMode> modes = {HeadMode::kCausal};  // one per kv head
  int32_t num_sink_pages = 1;
  int32_t sink_tokens = 16;
  DType kv_dtype = DType::kF32;
  DType q_dtype = DType::kF32;
};

inline int32_t min_ring_pages(int32_t local, int32_t q_len, int32_t page_tokens) {
  return (std::max(1, local + q_len - 1) + page_tokens - 1) / page_tokens + 1;
}

class AttentionCase {
 public:
  AttentionCase(std::mt19937& rng, CaseConfig cfg, std::vector<SeqSpec> seqs)
      : cfg_(std::move(cfg)), seqs_(std::move(seqs)) {
    num_kv_heads_ = static_cast<int32_t>(cfg_.modes.size());
    num_q_heads_ = num_kv_heads_ * cfg_.group;
    const int32_t d = cfg_.head_dim, pt = cfg_.page_tokens;
    const int32_t num_seqs = static_cast<int32_t>(seqs_.size());
    for (auto& s : seqs_) {
      if (s.ring_pages == 0) s.ring_pages = min_ring_pages(s.local_tokens, s.q_len, pt);
    }

    // Queries, keys, values (keys/values of every position, per sequence and kv head).
    q_indptr_.assign(1, 0);
    for (const auto& s : seqs_) q_indptr_.push_back(q_indptr_.back() + s.q_len);
    num_tokens_ = q_indptr_.back();
    q_ = random_array(rng, int64_t{num_tokens_} * num_q_heads_ * d, cfg_.q_dtype, -3, 3);
    for (const auto& s : seqs_) {
      kv_lens_.push_back(s.kv_len);
      local_.push_back(s.local_tokens);
      ring_.push_back(s.ring_pages);
      selected_rows_.push_back(s.selected_row);
      for (int32_t g = 0; g < num_kv_heads_; ++g) {
        keys_.push_back(random_array(rng, int64_t{s.kv_len} * d, cfg_.kv_dtype, -1, 1));
        values_.push_back(random_array(rng, int64_t{s.kv_len} * d, cfg_.kv_dtype, -1, 1));
      }
    }

    // Head slots: each pool has one spare slot; slots are assigned in reverse so a kernel
    // that confuses head index and slot reads the NaN spare or another head.
    int32_t num_retrieval = 0, num_streaming = 0;
    for (HeadMode m : cfg_.modes) (m == HeadMode::kStreaming ? num_streaming : num_retrieval)++;
    const int32_t hpb_r = num_retrieval + 1, hpb_s = num_streaming + 1;
    int32_t next_r = hpb_r - 1, next_s = hpb_s - 1;
    for (HeadMode m : cfg_.modes) {
      head_mode_.push_back(static_cast<int32_t>(m));
      head_slot_.push_back(m == HeadMode::kStreaming ? next_s-- : next_r--);
    }

    // Block tables: blocks are a random permutation; block 0 is the trap (never written), and
    // every unused table entry points at it.
    int32_t max_pages = 1, max_stream = 1, total_r = 0, total_s = 0;
    for (const auto& s : seqs_) {
      const int32_t pages = (s.kv_len + pt - 1) / pt;
      max_pages = std::max(max_pages, pages);
      total_r += pages;
      max_stream = std::max(max_stream, cfg_.num_sink_pages + s.ring_pages);
      total_s += cfg_.num_sink_pages + s.ring_pages;
    }
    r_stride_ = max_pages + 2;
    s_stride_ = max_stream + 1;
    const auto assign = [&](int32_t total, int32_t stride, const std::vector<int32_t>& per_seq) {
      std::vector<int32_t> ids(static_cast<size_t>(total));
      std::iota(ids.begin(), ids.end(), 1);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<int32_t> table(static_cast<size_t>(num_seqs) * stride, 0);
      size_t next = 0;
      for (int32_t s = 0; s < num_seqs; ++s) {
        for (int32_t i = 0; i < per_seq[static_cast<size_t>(s)]; ++i)
          table[static_cast<size_t>(s) * stride + i] = ids[next++];
      }
      return table;
    };
    std::vector<int32_t> pages_r, pages_s;
    for (const auto& s : seqs_) {
      pages_r.push_back((s.kv_len + pt - 1) / pt);
      pages_s.push_back(cfg_.num_sink_pages + s.ring_pages);
    }
    r_table_ = assign(total_r, r_stride_, pages_r);
    s_table_ = assign(total_s, s_stride_, pages_s);

    init_pool(retrieval_, r_k_, r_v_, total_r + 1, hpb_r);
    init_pool(streaming_, s_k_, s_v_, total_s + 1, hpb_s);
    for (int32_t s = 0; s < num_seqs; ++s) {
      for (int32_t g = 0; g < num_kv_heads_; ++g) {
        for (int32_t pos = 0; pos < seqs_[static_cast<size_t>(s)].kv_len; ++pos)
          write_token(s, g, pos);
      }
    }

    // Selections: rows [num_seqs + 1, kv heads, max_selected] (tests/common/selection_rows.h).
    test_common::SelectionRows sel = test_common::pack_selection_rows(seqs_, num_kv_heads_);
    max_selected_ = sel.max_selected;
    selected_ = std::move(sel.selected);
    num_selected_ = std::move(sel.num_selected);
  }

  AttentionParams params(void* out) const {
    AttentionParams p;
    p.q = q_.data();
    p.out = out;
    p.q_dtype = cfg_.q_dtype;
    p.num_tokens = num_tokens_;
    p.num_q_heads = num_q_heads_;
    p.num_kv_heads = num_kv_heads_;
    p.head_dim = cfg_.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    p.num_seqs = static_cast<int32_t>(seqs_.size());
    p.q_indptr = q_indptr_.data();
    p.kv_lens = kv_lens_.data();
    p.head_mode = head_mode_.data();
    p.head_slot = head_slot_.data();
    p.retrieval = retrieval_;
    p.retrieval_blocks = r_table_.data();
    p.retrieval_blocks_stride = r_stride_;
    p.streaming = streaming_;
    p.streaming_blocks = s_table_.data();
    p.streaming_blocks_stride = s_stride_;
    p.num_sink_pages = cfg_.num_sink_pages;
    p.ring_pages = ring_.data();
    p.sink_tokens = cfg_.sink_tokens;
    p.local_tokens = local_.data();
    p.selected_rows = selected_rows_.data();
    p.selected = selected_.data();
    p.num_selected = num_selected_.data();
    p.max_selected = max_selected_;
    return p;
  }

  int64_t out_numel() const { return int64_t{num_tokens_} * num_q_heads_ * cfg_.head_dim; }

  // Dense reference: softmax over exactly the keys each head mode lets the query see.
  std::vector<double> reference() const {
    const int32_t d = cfg_.head_dim, pt = cfg_.page_tokens;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> out(static_cast<size_t>(out_numel()), 0.0);
    for (size_t s = 0; s < seqs_.size(); ++s) {
      const SeqSpec& sp = seqs_[s];
      for (int32_t t = 0; t < sp.q_len; ++t) {
        const int64_t pos = int64_t{sp.kv_len} - sp.q_len + t;
        for (int32_t hq = 0; hq < num_q_heads_; ++hq) {
          const int32_t g = hq / cfg_.group;
          const HeadMode mode = cfg_.modes[static_cast<size_t>(g)];
          std::vector<bool> page_ok((sp.kv_len + pt - 1) / pt, true);
          if (mode == HeadMode::kSelected && sp.selected_row >= 0 &&
              g < static_cast<int32_t>(sp.selected.size()) &&
              !sp.selected[static_cast<size_t>(g)].empty()) {
            const auto& l = sp.selected[static_cast<size_t>(g)];
            for (size_t j = 0; j < page_ok.size(); ++j)
              page_ok[j] = static_cast<int32_t>(j) > l.back();
            for (int32_t j : l) page_ok[static_cast<size_t>(j)] = true;
          }
          const int64_t token = q_indptr_[s] + t;
          const float* qv = &q_.values[static_cast<size_t>((token * num_q_heads_ + hq) * d)];
          const TypedArray& K = keys_[s * num_kv_heads_ + g];
          const TypedArray& V = values_[s * num_kv_heads_ + g];
          std::vector<std::pair<int64_t, double>> logits;
          double mx = -INFINITY;
          for (int64_t k = 0; k <= pos; ++k) {
            bool vis = page_ok[static_cast<size_t>(k / pt)];
            if (mode == HeadMode::kStreaming) {
              vis = k < cfg_.sink_tokens || pos - k < sp.local_tokens;  // Λ: sink or window
              // ... and still stored: sink pages, or the newest ring_pages pages (only an
              // undersized ring makes a difference).
              const int64_t page = k / pt, last_page = (sp.kv_len - 1) / pt;
              vis = vis && (page < cfg_.num_sink_pages || last_page - page < sp.ring_pages);
            }
            if (!vis) continue;
            double dot = 0;
            for (int32_t e = 0; e < d; ++e)
              dot += double(qv[e]) * K.values[static_cast<size_t>(k * d + e)];
            logits.emplace_back(k, dot * scale);
            mx = std::max(mx, dot * scale);
          }
          double denom = 0;
          for (auto& [k, lg] : logits) denom += std::exp(lg - mx);
          double* o = &out[static_cast<size_t>((token * num_q_heads_ + hq) * d)];
          for (auto& [k, lg] : logits) {
            const double w = std::exp(lg - mx) / denom;
            for (int32_t e = 0; e < d; ++e) o[e] += w * V.values[static_cast<size_t>(k * d + e)];
          }
        }
      }
    }
    return out;
  }

  // Runs `fn(params)` on an output poisoned with NaN; returns the output widened to f32.
  template <class Fn>
  std::vector<float> run(Fn&& fn) const {
    std::vector<uint8_t> out(static_cast<size_t>(dtype_nbytes(cfg_.q_dtype, out_numel())));
    poison(out.data(), cfg_.q_dtype, out_numel());
    fn(params(out.data()));
    std::vector<float> f(static_cast<size_t>(out_numel()));
    convert_to_f32(cfg_.q_dtype, out.data(), f.data(), out_numel());
    return f;
  }

  const CaseConfig& config() const { return cfg_; }

 private:
  void init_pool(PagedKvPool& pool, std::vector<uint8_t>& k, std::vector<uint8_t>& v,
                 int32_t num_blocks, int32_t hpb) {
    const int64_t n = int64_t{num_blocks} * hpb * cfg_.page_tokens * cfg_.head_dim;
    k.assign(static_cast<size_t>(dtype_nbytes(cfg_.kv_dtype, n)), 0);
    v.assign(k.size(), 0);
    poison(k.data(), cfg_.kv_dtype, n);
    poison(v.data(), cfg_.kv_dtype, n);
    pool.k = k.data();
    pool.v = v.data();
    pool.dtype = cfg_.kv_dtype;
    pool.num_blocks = num_blocks;
    pool.heads_per_block = hpb;
    pool.page_tokens = cfg_.page_tokens;
    pool.head_dim = cfg_.head_dim;
  }

  void write_token(int32_t s, int32_t g, int32_t pos) {
    const int32_t pt = cfg_.page_tokens, d = cfg_.head_dim;
    const bool streaming = cfg_.modes[static_cast<size_t>(g)] == HeadMode::kStreaming;
    const int32_t page = pos / pt;
    int32_t block;
    PagedKvPool& pool = streaming ? streaming_ : retrieval_;
    if (streaming) {
      const int32_t idx =
          page < cfg_.num_sink_pages
              ? page
              : cfg_.num_sink_pages + (page - cfg_.num_sink_pages) % ring_[static_cast<size_t>(s)];
      block = s_table_[static_cast<size_t>(s) * s_stride_ + idx];
    } else {
      block = r_table_[static_cast<size_t>(s) * r_stride_ + page];
    }
    const int64_t row =
        (int64_t{block} * pool.heads_per_block + head_slot_[static_cast<size_t>(g)]) * pt +
        pos % pt;
    const int64_t bytes = dtype_nbytes(cfg_.kv_dtype, d);
    const TypedArray& K = keys_[static_cast<size_t>(s) * num_kv_heads_ + g];
    const TypedArray& V = values_[static_cast<size_t>(s) * num_kv_heads_ + g];
    std::memcpy(static_cast<uint8_t*>(pool.k) + row * bytes, K.bytes.data() + int64_t{pos} * bytes,
                static_cast<size_t>(bytes));
    std::memcpy(static_cast<uint8_t*>(pool.v) + row * bytes, V.bytes.data() + int64_t{pos} * bytes,
                static_cast<size_t>(bytes));
  }

  CaseConfig cfg_;
  std::vector<SeqSpec> seqs_;
  int32_t num_kv_heads_ = 0, num_q_heads_ = 0, num_tokens_ = 0;
  TypedArray q_;
  std::vector<TypedArray> keys_, values_;  // [seq * kv_heads + g] -> [kv_len, head_dim]
  std::vector<int32_t> q_indptr_, kv_lens_, local_, ring_, selected_rows_;
  std::vector<int32_t> head_mode_, head_slot_;
  std::vector<int32_t> r_table_, s_table_;
  int32_t r_stride_ = 0, s_stride_ = 0;
  std::vector<uint8_t> r_k_, r_v_, s_k_, s_v_;
  PagedKvPool retrieval_, streaming_;
  std::vector<int32_t> selected_, num_selected_;
  int32_t max_selected_ = 1;
};

}  // namespace ls::kernels::test
