#pragma once
// A shared-prefix decode step for the kernel tests (CPU and GPU): groups of sequences whose
// first prefix_tokens keys/values are identical, laid out in head-wise pages the way prefix
// caching shares them: every page wholly inside the prefix is ONE block that all members' tables
// name; a page that the prefix ends inside is copied per member (the copy-on-write case: same
// first rows, each member's own rows after them); later pages are each member's own. Sequences
// outside any group, and batch positions shuffled, so groups are not contiguous in the batch.
//
// Everything a kernel must not read is NaN: rows past a sequence's length, a spare head slot per
// block, and a trap block (block 0) that unused table entries name. The reference is dense
// softmax attention in double precision over each sequence's contiguous keys.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/paged_kv.h"
#include "kernels/shared_prefix.h"

namespace ls::shared_prefix_test {

struct GroupSpec {
  int32_t prefix_tokens = 0;
  std::vector<int32_t> suffix_tokens;  // one per member (0: the member's context is the prefix)
};

struct CaseConfig {
  int32_t head_dim = 64;
  int32_t group = 1;  // query heads per kv head
  int32_t num_kv_heads = 2;
  int32_t page_tokens = 16;
  DType kv_dtype = DType::kF32;
  DType q_dtype = DType::kF32;
};

// Values stored in a float dtype, with the exact f32 values they hold.
struct Stored {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  void resize(int64_t n, DType dt) {
    dtype = dt;
    values.assign(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
    bytes.assign(static_cast<size_t>(dtype_nbytes(dt, n)), 0);
    convert_from_f32(values.data(), dt, bytes.data(), n);
  }
  void set(int64_t i, float v) {
    const int64_t sz = dtype_nbytes(dtype, 1);
    convert_from_f32(&v, dtype, bytes.data() + i * sz, 1);
    convert_to_f32(dtype, bytes.data() + i * sz, &values[static_cast<size_t>(i)], 1);
  }
};

class SharedPrefixCase {
 public:
  SharedPrefixCase(std::mt19937& rng, CaseConfig cfg, std::vector<GroupSpec> groups,
                   std::vector<int32_t> loners)
      : cfg_(cfg) {
    const int32_t d = cfg.head_dim, pt = cfg.page_tokens, nkv = cfg.num_kv_heads;
    num_q_ = nkv * cfg.group;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    // Logical sequences in group order, then the loners; batch positions are a shuffle.
    struct Logical {
      int32_t group = -1, prefix = 0, len = 0;
    };
    std::vector<Logical> logical;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int32_t suffix : groups[g].suffix_tokens) {
        logical.push_back(
            {static_cast<int32_t>(g), groups[g].prefix_tokens, groups[g].prefix_tokens + suffix});
      }
    }
    for (int32_t len : loners) logical.push_back({-1, 0, len});
    num_seqs_ = static_cast<int32_t>(logical.size());
    std::vector<int32_t> pos(static_cast<size_t>(num_seqs_));
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);

    // Keys/values per (logical sequence, kv head): [len, d] f32 values (rounded to kv_dtype).
    const auto rounded = [&](float v) {
      uint8_t buf[4];
      convert_from_f32(&v, cfg.kv_dtype, buf, 1);
      float r = 0.0f;
      convert_to_f32(cfg.kv_dtype, buf, &r, 1);
      return r;
    };
    std::vector<std::vector<float>> gk(groups.size() * nkv), gv(groups.size() * nkv);
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int32_t h = 0; h < nkv; ++h) {
        for (int64_t i = 0; i < int64_t{groups[g].prefix_tokens} * d; ++i) {
          gk[g * nkv + h].push_back(rounded(dist(rng)));
          gv[g * nkv + h].push_back(rounded(dist(rng)));
        }
      }
    }
    keys_.assign(static_cast<size_t>(num_seqs_) * nkv, {});
    values_.assign(static_cast<size_t>(num_seqs_) * nkv, {});
    kv_lens_.assign(static_cast<size_t>(num_seqs_), 0);
    for (size_t i = 0; i < logical.size(); ++i) {
      const int32_t s = pos[i];
      const Logical& l = logical[i];
      kv_lens_[static_cast<size_t>(s)] = l.len;
      for (int32_t h = 0; h < nkv; ++h) {
        auto& k = keys_[static_cast<size_t>(s) * nkv + h];
        auto& v = values_[static_cast<size_t>(s) * nkv + h];
        if (l.group >= 0) {
          k = gk[static_cast<size_t>(l.group) * nkv + h];
          v = gv[static_cast<size_t>(l.group) * nkv + h];
        }
        while (static_cast<int64_t>(k.size()) < int64_t{l.len} * d) {
          k.push_back(rounded(dist(rng)));
          v.push_back(rounded(dist(rng)));
        }
      }
    }

    // Blocks: 0 is the trap; shared full prefix pages per group; then each sequence's own pages.
    int32_t max_pages = 1;
    for (int32_t len : kv_lens_) max_pages = std::max(max_pages, (len + pt - 1) / pt);
    stride_ = max_pages + 1;
    blocks_.assign(static_cast<size_t>(num_seqs_) * stride_, 0);
    std::vector<std::vector<int32_t>> shared(groups.size());
    int32_t next_block = 1;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int32_t lp = 0; lp < groups[g].prefix_tokens / pt; ++lp)
        shared[g].push_back(next_block++);
    }
    struct Fill {
      int32_t block, seq, lp;
    };
    std::vector<Fill> fills;
    for (size_t g = 0; g < groups.size(); ++g) {
      // The first member (in group order) provides the shared pages' contents.
      const size_t first = std::find_if(logical.begin(), logical.end(),
                                        [&](const Logical& l) { return l.group == int32_t(g); }) -
                           logical.begin();
      for (int32_t lp = 0; lp < static_cast<int32_t>(shared[g].size()); ++lp)
        fills.push_back({shared[g][static_cast<size_t>(lp)], pos[first], lp});
    }
    for (size_t i = 0; i < logical.size(); ++i) {
      const int32_t s = pos[i];
      const Logical& l = logical[i];
      const int32_t own_from = l.group >= 0 ? l.prefix / pt : 0;
      for (int32_t lp = 0; lp < (l.len + pt - 1) / pt; ++lp) {
        int32_t b = 0;
        if (lp < own_from) {
          b = shared[static_cast<size_t>(l.group)][static_cast<size_t>(lp)];
        } else {
          b = next_block++;
          fills.push_back({b, s, lp});
        }
        blocks_[static_cast<size_t>(s) * stride_ + lp] = b;
      }
    }
    num_blocks_ = next_block;
    hpb_ = nkv + 1;  // one spare (NaN) slot per block
    for (int32_t h = 0; h < nkv; ++h) head_slot_.push_back(nkv - h);  // slots reversed
    head_mode_.assign(static_cast<size_t>(nkv), static_cast<int32_t>(kernels::HeadMode::kCausal));
    const int64_t pool_elems = int64_t{num_blocks_} * hpb_ * pt * d;
    k_.resize(pool_elems, cfg.kv_dtype);
    v_.resize(pool_elems, cfg.kv_dtype);
    for (const Fill& f : fills) {
      const int32_t len = kv_lens_[static_cast<size_t>(f.seq)];
      for (int32_t h = 0; h < nkv; ++h) {
        const auto& k = keys_[static_cast<size_t>(f.seq) * nkv + h];
        const auto& v = values_[static_cast<size_t>(f.seq) * nkv + h];
        const int64_t page = int64_t{f.block} * hpb_ + head_slot_[static_cast<size_t>(h)];
        for (int32_t r = 0; r < pt && f.lp * pt + r < len; ++r) {
          for (int32_t e = 0; e < d; ++e) {
            const int64_t src = (int64_t{f.lp} * pt + r) * d + e;
            k_.set((page * pt + r) * d + e, k[static_cast<size_t>(src)]);
            v_.set((page * pt + r) * d + e, v[static_cast<size_t>(src)]);
          }
        }
      }
    }

    q_.resize(int64_t{num_seqs_} * num_q_ * d, cfg.q_dtype);
    for (size_t i = 0; i < q_.values.size(); ++i) q_.set(static_cast<int64_t>(i), 2.0f * dist(rng));
    q_indptr_.resize(static_cast<size_t>(num_seqs_) + 1);
    std::iota(q_indptr_.begin(), q_indptr_.end(), 0);
    out_.resize(int64_t{num_seqs_} * num_q_ * d, cfg.q_dtype);

    groups_.group_indptr = {0};
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < logical.size(); ++i)
        if (logical[i].group == static_cast<int32_t>(g)) groups_.seqs.push_back(pos[i]);
      groups_.group_indptr.push_back(static_cast<int32_t>(groups_.seqs.size()));
      groups_.prefix_tokens.push_back(groups[g].prefix_tokens);
    }
  }

  const CaseConfig& config() const { return cfg_; }
  int32_t num_seqs() const { return num_seqs_; }
  int32_t num_q_heads() const { return num_q_; }
  const kernels::SharedPrefixGroups& groups() const { return groups_; }
  const std::vector<int32_t>& kv_lens() const { return kv_lens_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  const std::vector<int32_t>& head_mode() const { return head_mode_; }
  const std::vector<int32_t>& head_slot() const { return head_slot_; }
  const std::vector<int32_t>& q_indptr() const { return q_indptr_; }
  int32_t stride() const { return stride_; }
  const Stored& k() const { return k_; }
  const Stored& v() const { return v_; }
  const Stored& q() const { return q_; }
  Stored& out() { return out_; }

  // The decode step over host memory (retrieval pool, every head dense).
  kernels::AttentionParams params() {
    kernels::AttentionParams p;
    p.q = q_.bytes.data();
    p.out = out_.bytes.data();
    p.q_dtype = cfg_.q_dtype;
    p.num_tokens = num_seqs_;
    p.num_q_heads = num_q_;
    p.num_kv_heads = cfg_.num_kv_heads;
    p.head_dim = cfg_.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    p.num_seqs = num_seqs_;
    p.q_indptr = q_indptr_.data();
    p.kv_lens = kv_lens_.data();
    p.head_mode = head_mode_.data();
    p.head_slot = head_slot_.data();
    p.retrieval.k = k_.bytes.data();
    p.retrieval.v = v_.bytes.data();
    p.retrieval.dtype = cfg_.kv_dtype;
    p.retrieval.num_blocks = num_blocks_;
    p.retrieval.heads_per_block = hpb_;
    p.retrieval.page_tokens = cfg_.page_tokens;
    p.retrieval.head_dim = cfg_.head_dim;
    p.retrieval_blocks = blocks_.data();
    p.retrieval_blocks_stride = stride_;
    return p;
  }

  Result<kernels::SharedPrefixPlan> plan(const kernels::SharedPrefixPlanConfig& pc = {}) const {
    return kernels::plan_shared_prefix(num_seqs_, kv_lens_.data(), num_q_, cfg_.num_kv_heads,
                                       head_mode_.data(), nullptr, blocks_.data(), stride_,
                                       cfg_.page_tokens, groups_, pc);
  }

  // Dense softmax attention in double precision, [num_seqs, num_q_heads, head_dim].
  std::vector<double> reference() const {
    const int32_t d = cfg_.head_dim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> out(static_cast<size_t>(num_seqs_) * num_q_ * d, 0.0);
    for (int32_t s = 0; s < num_seqs_; ++s) {
      const int32_t len = kv_lens_[static_cast<size_t>(s)];
      for (int32_t h = 0; h < num_q_; ++h) {
        const auto& k = keys_[static_cast<size_t>(s) * cfg_.num_kv_heads + h / cfg_.group];
        const auto& v = values_[static_cast<size_t>(s) * cfg_.num_kv_heads + h / cfg_.group];
        const float* q = q_.values.data() + (int64_t{s} * num_q_ + h) * d;
        std::vector<double> w(static_cast<size_t>(len));
        double mx = -1e300;
        for (int32_t j = 0; j < len; ++j) {
          double dot = 0;
          for (int32_t e = 0; e < d; ++e) dot += double{q[e]} * k[static_cast<size_t>(j) * d + e];
          w[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, w[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        double* o = out.data() + (int64_t{s} * num_q_ + h) * d;
        for (int32_t j = 0; j < len; ++j) {
          for (int32_t e = 0; e < d; ++e)
            o[e] += w[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(j) * d + e];
        }
      }
    }
    return out;
  }

  std::vector<float> out_values() {
    std::vector<float> f(out_.values.size());
    convert_to_f32(cfg_.q_dtype, out_.bytes.data(), f.data(), static_cast<int64_t>(f.size()));
    return f;
  }

 private:
  CaseConfig cfg_;
  int32_t num_seqs_ = 0, num_q_ = 0, stride_ = 0, num_blocks_ = 0, hpb_ = 0;
  std::vector<std::vector<float>> keys_, values_;  // [seq * kv heads] -> [len, d]
  std::vector<int32_t> kv_lens_, blocks_, head_mode_, head_slot_, q_indptr_;
  Stored k_, v_, q_, out_;
  kernels::SharedPrefixGroups groups_;
};

}  // namespace ls::shared_prefix_test
