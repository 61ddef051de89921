#pragma once
// A paged-attention scenario for the GPU tests: random queries, keys and values for a batch of
// sequences, written into head-wise pages by naive indexing (independently of kv_append), with
// device mirrors of every array, plus an independent dense reference in double precision that
// applies each head mode's visibility rule key by key.
//
// Everything a kernel must not read is NaN: unused pool slots, rows past kv_len, a trap block
// (block 0) that unused table entries point to. Selected lists may hold repeated, out-of-order
// and out-of-range entries, which the contract says to skip.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "../common/selection_rows.h"

#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/paged_kv.h"

namespace ls::cuda_test {

struct SeqSpec {
  int32_t kv_len = 1;
  int32_t q_len = 1;
  int32_t local_tokens = 64;                   // streaming window
  int32_t ring_pages = 0;                      // 0: the minimum the contract allows for this chunk
  int32_t selected_row = -1;                   // row of the selection arrays, or -1
  std::vector<std::vector<int32_t>> selected;  // per kv head (kSelected heads), raw list
};

struct ScenarioConfig {
  int32_t head_dim = 64;
  int32_t group = 1;
  int32_t page_tokens = 16;
  std::vector<kernels::HeadMode> modes = {kernels::HeadMode::kCausal};
  int32_t num_sink_pages = 1;
  int32_t sink_tokens = 16;
  DType dtype = DType::kBF16;
  // AttentionParams::selection_just_written: false lets the decode kernel read the selection
  // (uploaded before the call here) before its programmatic-launch wait; results must not change.
  bool selection_just_written = true;
};

class AttentionScenario {
 public:
  AttentionScenario(std::mt19937& rng, ScenarioConfig cfg, std::vector<SeqSpec> seqs)
      : cfg_(std::move(cfg)), seqs_(std::move(seqs)) {
    num_kv_ = static_cast<int32_t>(cfg_.modes.size());
    num_q_ = num_kv_ * cfg_.group;
    const int32_t d = cfg_.head_dim, pt = cfg_.page_tokens;
    const int32_t num_seqs = static_cast<int32_t>(seqs_.size());
    for (auto& s : seqs_) {
      if (s.ring_pages == 0) {
        s.ring_pages = (std::max(1, s.local_tokens + s.q_len - 1) + pt - 1) / pt + 1;
      }
    }
    q_indptr_ = {0};
    for (const auto& s : seqs_) q_indptr_.push_back(q_indptr_.back() + s.q_len);
    num_tokens_ = q_indptr_.back();
    q_ = random_array(rng, int64_t{num_tokens_} * num_q_ * d, cfg_.dtype, -2, 2);
    for (const auto& s : seqs_) {
      kv_lens_.push_back(s.kv_len);
      local_.push_back(s.local_tokens);
      ring_.push_back(s.ring_pages);
      selected_rows_.push_back(s.selected_row);
      for (int32_t g = 0; g < num_kv_; ++g) {
        keys_.push_back(random_array(rng, int64_t{s.kv_len} * d, cfg_.dtype, -1, 1));
        values_.push_back(random_array(rng, int64_t{s.kv_len} * d, cfg_.dtype, -1, 1));
      }
    }
    // Slots in reverse order with one spare slot per pool (NaN, never written).
    int32_t nr = 0, ns = 0;
    for (auto m : cfg_.modes) (m == kernels::HeadMode::kStreaming ? ns : nr)++;
    hpb_r_ = nr + 1;
    hpb_s_ = ns + 1;
    int32_t next_r = hpb_r_ - 1, next_s = hpb_s_ - 1;
    for (auto m : cfg_.modes) {
      mode_.push_back(static_cast<int32_t>(m));
      slot_.push_back(m == kernels::HeadMode::kStreaming ? next_s-- : next_r--);
    }
    // Block tables: a random permutation of blocks 1..; block 0 is the NaN trap.
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
    auto assign = [&](int32_t total, int32_t stride, const std::vector<int32_t>& per_seq) {
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
    nb_r_ = total_r + 1;
    nb_s_ = total_s + 1;
    const int64_t nr_elems = int64_t{nb_r_} * hpb_r_ * pt * d,
                  ns_elems = int64_t{nb_s_} * hpb_s_ * pt * d;
    r_k_ = HostArray(nr_elems, cfg_.dtype);
    r_v_ = HostArray(nr_elems, cfg_.dtype);
    s_k_ = HostArray(ns_elems, cfg_.dtype);
    s_v_ = HostArray(ns_elems, cfg_.dtype);
    for (HostArray* a : {&r_k_, &r_v_, &s_k_, &s_v_}) a->fill(kNaN);
    for (int32_t s = 0; s < num_seqs; ++s) {
      for (int32_t g = 0; g < num_kv_; ++g) {
        for (int32_t pos = 0; pos < seqs_[static_cast<size_t>(s)].kv_len; ++pos)
          write_token(s, g, pos);
      }
    }
    // Selections: rows [num_seqs + 1, kv heads, max_selected] (tests/common/selection_rows.h).
    test_common::SelectionRows sel = test_common::pack_selection_rows(seqs_, num_kv_);
    max_selected_ = sel.max_selected;
    selected_ = std::move(sel.selected);
    num_selected_ = std::move(sel.num_selected);
  }

  int64_t out_numel() const { return int64_t{num_tokens_} * num_q_ * cfg_.head_dim; }
  const ScenarioConfig& config() const { return cfg_; }

  // Params over the host arrays (for kernels/cpu).
  kernels::AttentionParams host_params(void* out) {
    return params(out, q_.data(), r_k_.data(), r_v_.data(), s_k_.data(), s_v_.data(),
                  q_indptr_.data(), kv_lens_.data(), mode_.data(), slot_.data(), r_table_.data(),
                  s_table_.data(), ring_.data(), local_.data(), selected_rows_.data(),
                  selected_.data(), num_selected_.data());
  }

  // Uploads every array (once) and returns params over the device copies.
  kernels::AttentionParams device_params(void* out) {
    if (dev_.empty()) {
      for (const HostArray* a : {&q_, &r_k_, &r_v_, &s_k_, &s_v_})
        dev_.push_back(DeviceArray::of(*a));
      for (const std::vector<int32_t>* v :
           {&q_indptr_, &kv_lens_, &mode_, &slot_, &r_table_, &s_table_, &ring_, &local_,
            &selected_rows_, &selected_, &num_selected_}) {
        dev_.push_back(DeviceArray::of(*v));
      }
    }
    auto i32 = [&](size_t i) { return dev_[i].as<int32_t>(); };
    return params(out, dev_[0].data(), dev_[1].data(), dev_[2].data(), dev_[3].data(),
                  dev_[4].data(), i32(5), i32(6), i32(7), i32(8), i32(9), i32(10), i32(11), i32(12),
                  i32(13), i32(14), i32(15));
  }

  // kernels/cpu on the host arrays, widened to f32.
  std::vector<float> run_cpu() {
    HostArray out(out_numel(), cfg_.dtype);
    out.fill(kNaN);
    kernels::cpu::paged_attention(host_params(out.data()), cpu_pool());
    std::vector<float> f(static_cast<size_t>(out_numel()));
    convert_to_f32(cfg_.dtype, out.data(), f.data(), out_numel());
    return f;
  }

  // The GPU backend on the device copies (output poisoned with NaN first), widened to f32.
  std::vector<float> run_gpu() {
    DeviceArray out(dtype_nbytes(cfg_.dtype, out_numel()));
    out.poison(cfg_.dtype, out_numel());
    gpu()->attention(device_params(out.data()));
    return out.download_floats(cfg_.dtype, out_numel());
  }

  // Dense reference in double: softmax over exactly the keys each mode lets the query see.
  std::vector<double> reference() const {
    const int32_t d = cfg_.head_dim, pt = cfg_.page_tokens;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> out(static_cast<size_t>(out_numel()), 0.0);
    std::vector<double> logits;
    for (size_t s = 0; s < seqs_.size(); ++s) {
      const SeqSpec& sp = seqs_[s];
      const int32_t num_pages = (sp.kv_len + pt - 1) / pt;
      for (int32_t t = 0; t < sp.q_len; ++t) {
        const int64_t pos = int64_t{sp.kv_len} - sp.q_len + t;
        for (int32_t hq = 0; hq < num_q_; ++hq) {
          const int32_t g = hq / cfg_.group;
          const auto mode = cfg_.modes[static_cast<size_t>(g)];
          std::vector<bool> page_ok(static_cast<size_t>(num_pages), true);
          if (mode == kernels::HeadMode::kSelected && sp.selected_row >= 0 &&
              g < static_cast<int32_t>(sp.selected.size()) &&
              !sp.selected[static_cast<size_t>(g)].empty()) {
            // Accepted entries: in range and above every earlier accepted one.
            std::vector<int32_t> accepted;
            for (int32_t j : sp.selected[static_cast<size_t>(g)]) {
              if (j >= 0 && j < num_pages && (accepted.empty() || j > accepted.back()))
                accepted.push_back(j);
            }
            const int32_t last = accepted.empty() ? -1 : accepted.back();
            for (int32_t j = 0; j < num_pages; ++j) page_ok[static_cast<size_t>(j)] = j > last;
            for (int32_t j : accepted) page_ok[static_cast<size_t>(j)] = true;
          }
          const int64_t token = q_indptr_[s] + t;
          const float* qv = &q_.values[static_cast<size_t>((token * num_q_ + hq) * d)];
          const HostArray& K = keys_[s * num_kv_ + g];
          const HostArray& V = values_[s * num_kv_ + g];
          logits.assign(static_cast<size_t>(pos + 1), -INFINITY);
          double mx = -INFINITY;
          for (int64_t k = 0; k <= pos; ++k) {
            bool vis = page_ok[static_cast<size_t>(k / pt)];
            if (mode == kernels::HeadMode::kStreaming) {
              const int64_t page = k / pt, last_page = (sp.kv_len - 1) / pt;
              vis = (k < cfg_.sink_tokens || pos - k < sp.local_tokens) &&
                    (page < cfg_.num_sink_pages || last_page - page < sp.ring_pages);
            }
            if (!vis) continue;
            double dot = 0;
            for (int32_t e = 0; e < d; ++e)
              dot += static_cast<double>(qv[e]) * K.values[static_cast<size_t>(k * d + e)];
            logits[static_cast<size_t>(k)] = dot * scale;
            mx = std::max(mx, dot * scale);
          }
          if (mx == -INFINITY) continue;  // no visible key: 0
          double denom = 0;
          for (double lg : logits) denom += std::exp(lg - mx);
          double* o = &out[static_cast<size_t>((token * num_q_ + hq) * d)];
          for (int64_t k = 0; k <= pos; ++k) {
            const double lg = logits[static_cast<size_t>(k)];
            if (lg == -INFINITY) continue;
            const double w = std::exp(lg - mx) / denom;
            for (int32_t e = 0; e < d; ++e) o[e] += w * V.values[static_cast<size_t>(k * d + e)];
          }
        }
      }
    }
    return out;
  }

  // New random queries, on the host and (if uploaded) on the device, in place: the device
  // pointers stay the same (what a captured graph needs).
  void refresh_queries(std::mt19937& rng) {
    q_ = random_array(rng, q_.size(), cfg_.dtype, -2, 2);
    if (!dev_.empty())
      gpu()->copy_bytes(dev_[0].data(), q_.data(), static_cast<int64_t>(q_.bytes.size()));
  }

  // Multiply-adds of the reference, to keep the slow path for small scenarios.
  int64_t reference_cost() const {
    int64_t c = 0;
    for (const auto& s : seqs_) c += int64_t{s.q_len} * s.kv_len;
    return c * num_q_ * cfg_.head_dim;
  }

 private:
  kernels::AttentionParams params(void* out, const void* q, void* rk, void* rv, void* sk, void* sv,
                                  const int32_t* q_indptr, const int32_t* kv_lens,
                                  const int32_t* mode, const int32_t* slot, const int32_t* r_table,
                                  const int32_t* s_table, const int32_t* ring, const int32_t* local,
                                  const int32_t* selected_rows, const int32_t* selected,
                                  const int32_t* num_selected) const {
    kernels::AttentionParams p;
    p.q = q;
    p.out = out;
    p.q_dtype = cfg_.dtype;
    p.num_tokens = num_tokens_;
    p.num_q_heads = num_q_;
    p.num_kv_heads = num_kv_;
    p.head_dim = cfg_.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    p.num_seqs = static_cast<int32_t>(seqs_.size());
    p.q_indptr = q_indptr;
    p.kv_lens = kv_lens;
    p.head_mode = mode;
    p.head_slot = slot;
    auto pool = [&](void* k, void* v, int32_t blocks, int32_t hpb) {
      kernels::PagedKvPool pl;
      pl.k = k;
      pl.v = v;
      pl.dtype = cfg_.dtype;
      pl.num_blocks = blocks;
      pl.heads_per_block = hpb;
      pl.page_tokens = cfg_.page_tokens;
      pl.head_dim = cfg_.head_dim;
      return pl;
    };
    p.retrieval = pool(rk, rv, nb_r_, hpb_r_);
    p.retrieval_blocks = r_table;
    p.retrieval_blocks_stride = r_stride_;
    p.streaming = pool(sk, sv, nb_s_, hpb_s_);
    p.streaming_blocks = s_table;
    p.streaming_blocks_stride = s_stride_;
    p.num_sink_pages = cfg_.num_sink_pages;
    p.ring_pages = ring;
    p.sink_tokens = cfg_.sink_tokens;
    p.local_tokens = local;
    p.selected_rows = selected_rows;
    p.selected = selected;
    p.num_selected = num_selected;
    p.max_selected = max_selected_;
    p.selection_just_written = cfg_.selection_just_written;
    return p;
  }

  void write_token(int32_t s, int32_t g, int32_t pos) {
    const int32_t pt = cfg_.page_tokens, d = cfg_.head_dim;
    const bool streaming = cfg_.modes[static_cast<size_t>(g)] == kernels::HeadMode::kStreaming;
    const int32_t page = pos / pt;
    int32_t block;
    HostArray& K = streaming ? s_k_ : r_k_;
    HostArray& V = streaming ? s_v_ : r_v_;
    const int32_t hpb = streaming ? hpb_s_ : hpb_r_;
    if (streaming) {
      const int32_t idx =
          kernels::streaming_table_index(page, cfg_.num_sink_pages, ring_[static_cast<size_t>(s)]);
      block = s_table_[static_cast<size_t>(s) * s_stride_ + idx];
    } else {
      block = r_table_[static_cast<size_t>(s) * r_stride_ + page];
    }
    const int64_t row = (int64_t{block} * hpb + slot_[static_cast<size_t>(g)]) * pt + pos % pt;
    const HostArray& src_k = keys_[static_cast<size_t>(s) * num_kv_ + g];
    const HostArray& src_v = values_[static_cast<size_t>(s) * num_kv_ + g];
    for (int32_t e = 0; e < d; ++e) {
      K.set(row * d + e, src_k.values[static_cast<size_t>(int64_t{pos} * d + e)]);
      V.set(row * d + e, src_v.values[static_cast<size_t>(int64_t{pos} * d + e)]);
    }
  }

  ScenarioConfig cfg_;
  std::vector<SeqSpec> seqs_;
  int32_t num_kv_ = 0, num_q_ = 0, num_tokens_ = 0;
  int32_t hpb_r_ = 0, hpb_s_ = 0, nb_r_ = 0, nb_s_ = 0, r_stride_ = 0, s_stride_ = 0;
  int32_t max_selected_ = 1;
  HostArray q_, r_k_, r_v_, s_k_, s_v_;
  std::vector<HostArray> keys_, values_;
  std::vector<int32_t> q_indptr_, kv_lens_, local_, ring_, selected_rows_, mode_, slot_, r_table_,
      s_table_, selected_, num_selected_;
  std::vector<DeviceArray> dev_;
};

}  // namespace ls::cuda_test
