// Helpers of the tensor-parallel failure tests (CPU: tensor_parallel_failure_test.cpp; CUDA:
// tests/cuda/tensor_parallel_test.cpp): a hang guard that ends the binary, one sequence run step
// by step through a stack's executor, and the logits' worst relative difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/status.h"
#include "model/model_stack.h"

namespace ls {

// Runs `body` on its own thread; if it has not returned after `seconds` (a hang), the test binary
// fails at once instead of blocking CI (or the GPU run).
inline void within_seconds(int seconds, const std::function<void()>& body) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread t([&body, done] {
    body();
    done->set_value();
  });
  if (finished.wait_for(std::chrono::seconds(seconds)) == std::future_status::timeout) {
    std::fprintf(stderr, "FAILED: the case did not finish within %d s (a hang)\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  t.join();
}

// One sequence's prompt in chunks of 16 tokens, then `decodes` decode steps (token ids fixed by
// the seed); returns the first failing step's error (ok if none) and every step's logits.
struct TpSeqRun {
  Status error;
  int32_t steps_run = 0;
  std::vector<std::vector<float>> logits;  // [steps][vocab] the last row of each step
};

inline TpSeqRun run_tp_sequence(ModelStack& st, int32_t prompt, int32_t decodes, uint32_t seed) {
  TpSeqRun out;
  const int32_t vocab = st.executor().vocab_size();
  auto slot = st.kv->add_sequence();
  EXPECT_TRUE(slot.ok());
  if (!slot.ok()) return out;
  std::mt19937 rng(seed);
  int32_t done = 0;
  while (done < prompt + decodes) {
    const bool prefilling = done < prompt;
    const int32_t len = prefilling ? std::min(16, prompt - done) : 1;
    EXPECT_TRUE(st.kv->grow(*slot, done + len).ok());
    StepInput in;
    for (int32_t i = 0; i < len; ++i) {
      in.tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    }
    in.seqs.push_back({*slot, len, done + len, prefilling});
    in.logit_rows = {len - 1};
    std::vector<float> logits;
    const Status s = st.executor().forward(in, logits);
    ++out.steps_run;
    if (!s.ok()) {
      out.error = s;
      break;
    }
    out.logits.push_back(logits);
    done += len;
    if (done == prompt) st.kv->finish_prefill(*slot);
  }
  st.kv->remove_sequence(*slot);
  return out;
}

// The largest |a - b| over each step's logits, relative to that step's largest |a|; the worst
// step's. Compares the first min(a, b) steps.
inline double tp_worst_relative(const std::vector<std::vector<float>>& a,
                                const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    EXPECT_EQ(a[s].size(), b[s].size());
    double diff = 0, scale = 0;
    for (size_t v = 0; v < std::min(a[s].size(), b[s].size()); ++v) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[s][v]) - b[s][v]));
      scale = std::max(scale, std::fabs(static_cast<double>(a[s][v])));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-30));
  }
  return worst;
}

}  // namespace ls
