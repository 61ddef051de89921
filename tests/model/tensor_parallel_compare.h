#pragma once
// The schedule the tensor-parallel tests (CPU here, CUDA in tests/cuda) run on a one-rank stack
// `a` and a tensor-parallel stack `b` in lockstep: two sequences, prompts of 150 and 40 tokens
// (prefill chunks of at most 64 tokens, the second sequence's prefill beside the first's), then
// 40 decode steps each whose next token is `a`'s greedy choice (teacher-forced into both), every
// row's logits compared.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/model_stack.h"

namespace ls {

// A fixture checkpoint directory (tests/fixtures/models/NAME).
inline std::filesystem::path model_fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

struct TpComparison {
  double worst_relative = 0;   // worst row's max |a - b| / max |a|
  int32_t greedy_checked = 0;  // decode positions whose top-2 margin was clear
  int32_t decoded = 0;         // decode positions
};

// margin_scale: a greedy token is compared where a's top-2 margin exceeds margin_scale times the
// row's largest |logit| (the tolerance the run's numerics allow).
inline TpComparison compare_tp_runs(ModelStack& a, ModelStack& b, double margin_scale) {
  TpComparison out;
  const int32_t vocab = a.executor().vocab_size();
  EXPECT_EQ(b.executor().vocab_size(), vocab);
  auto argmax = [&](const float* row) {
    return static_cast<size_t>(std::max_element(row, row + vocab) - row);
  };
  std::mt19937 rng(7u);
  struct Seq {
    int32_t slot = -1;
    std::vector<int32_t> ids;
    int32_t prompt = 0, done = 0;
  };
  constexpr int32_t kDecode = 40;
  std::vector<Seq> seqs(2);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].prompt = i == 0 ? 150 : 40;
    for (int32_t t = 0; t < seqs[i].prompt; ++t) {
      seqs[i].ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    }
    auto sa = a.kv->add_sequence();
    auto sb = b.kv->add_sequence();
    EXPECT_TRUE(sa.ok() && sb.ok());
    if (!sa.ok() || !sb.ok()) return out;
    EXPECT_EQ(*sa, *sb);
    seqs[i].slot = *sa;
  }
  std::vector<float> la, lb;
  for (int step = 0; step < 200; ++step) {
    StepInput in;
    for (Seq& s : seqs) {
      if (s.done == s.prompt + kDecode) continue;
      const bool prefilling = s.done < s.prompt;
      const int32_t len = prefilling ? std::min(64, s.prompt - s.done) : 1;
      EXPECT_TRUE(a.kv->grow(s.slot, s.done + len).ok());
      EXPECT_TRUE(b.kv->grow(s.slot, s.done + len).ok());
      for (int32_t i = 0; i < len; ++i) {
        in.tokens.push_back(s.ids[static_cast<size_t>(s.done + i)]);
        in.logit_rows.push_back(static_cast<int32_t>(in.tokens.size()) - 1);  // every row
      }
      in.seqs.push_back({s.slot, len, s.done + len, prefilling});
    }
    if (in.seqs.empty()) break;
    const Status sa = a.executor().forward(in, la);
    const Status sb = b.executor().forward(in, lb);
    EXPECT_TRUE(sa.ok()) << sa.to_string();
    EXPECT_TRUE(sb.ok()) << sb.to_string();
    EXPECT_EQ(la.size(), lb.size());
    if (!sa.ok() || !sb.ok() || la.size() != lb.size()) return out;
    for (size_t row = 0; row < in.logit_rows.size(); ++row) {
      const float* ra = la.data() + row * static_cast<size_t>(vocab);
      const float* rb = lb.data() + row * static_cast<size_t>(vocab);
      double diff = 0, scale = 0;
      for (int32_t v = 0; v < vocab; ++v) {
        diff = std::max(diff, std::fabs(static_cast<double>(ra[v]) - rb[v]));
        scale = std::max(scale, std::fabs(static_cast<double>(ra[v])));
      }
      out.worst_relative = std::max(out.worst_relative, diff / std::max(scale, 1e-30));
    }
    size_t row_end = 0;
    for (const StepSequence& ss : in.seqs) {
      Seq& s = *std::find_if(seqs.begin(), seqs.end(),
                             [&](const Seq& q) { return q.slot == ss.slot; });
      row_end += static_cast<size_t>(ss.q_len);
      s.done += ss.q_len;
      if (s.done == s.prompt) {
        a.kv->finish_prefill(s.slot);
        b.kv->finish_prefill(s.slot);
      }
      if (s.done >= s.prompt && s.done < s.prompt + kDecode) {
        const float* ra = la.data() + (row_end - 1) * static_cast<size_t>(vocab);
        const float* rb = lb.data() + (row_end - 1) * static_cast<size_t>(vocab);
        const size_t best = argmax(ra);
        float second = -INFINITY, scale = 0;
        for (int32_t v = 0; v < vocab; ++v) {
          if (static_cast<size_t>(v) != best) second = std::max(second, ra[v]);
          scale = std::max(scale, std::fabs(ra[v]));
        }
        if (ra[best] - second > margin_scale * std::max(1.0f, scale)) {
          EXPECT_EQ(argmax(rb), best) << "greedy token differs at position " << s.done;
          ++out.greedy_checked;
        }
        ++out.decoded;
        s.ids.push_back(static_cast<int32_t>(best));
      }
    }
  }
  for (const Seq& s : seqs) EXPECT_EQ(s.done, s.prompt + kDecode);
  return out;
}

}  // namespace ls
