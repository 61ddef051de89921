// Shared-prefix decode attention in the model runner on the CUDA backend
// (docs/shared-prefix-attention.md): the bundled model (models/tiny-longctx, head_dim 64, the
// tensor-core kernel's shape) with prefix caching in the KV manager; sequences over one cached
// prefix with own suffixes of different lengths (the prefix ends inside their pages) decode
// together; one leaves the batch midway (finished or aborted: its blocks released), one is
// preempted (removed, then re-added: it hits the cache again and recomputes its tokens by
// prefill) and rejoins the group. Every decode step runs twice with the same inputs, first with
// the per-sequence kernel, then with shared-prefix attention: the second rewrites the same K/V
// rows, so the two logit sets differ only by the attention kernels (bf16 P, different summation
// order). Decode steps are recorded as CUDA graphs, so the runner's step key with and without a
// plan is exercised too. Skips without a CUDA device.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kv/prefix_key.h"
#include "model/model_stack.h"

namespace ls::cuda_test {
namespace {

// Largest |logit difference| between the two kernels over a step's rows, relative to the step's
// largest |logit|. bf16 activations: the attention output is rounded to bf16 by both kernels
// after different summation orders (and P rounded to bf16 over different key blocks), so
// elements differ by about one bf16 ulp (0.4%), which the following layers carry into the
// logits; a wrong key range, table or merge weight moves them by tens of percent. The bound is
// the one-token CUDA-vs-f32 tolerance of model_test.cpp (bf16 GEMMs and norms alone).
constexpr float kLogitTol = 2e-2f;

TEST(CudaSharedPrefixModel, DecodeStepsEqualPerSequenceAttention) {
  LS_REQUIRE_CUDA();
  ModelStackOptions o;
  o.model_dir = std::filesystem::path(LONGSERVE_SOURCE_DIR) / "models/tiny-longctx";
  o.device = "cuda";
  o.max_num_seqs = 8;
  o.max_step_tokens = 512;
  o.max_logit_rows = 8;
  o.max_model_len = 4096;
  o.kv_cache_bytes = int64_t{256} << 20;
  auto stack_or = build_model_stack(o);
  ASSERT_TRUE(stack_or.ok()) << stack_or.status().to_string();
  ModelStack& st = **stack_or;
  KvManager& kv = *st.kv;
  ModelRunner& runner = *st.runner;
  kv.enable_prefix_caching(prefix_seed("cuda shared-prefix model test"));
  const int32_t vocab = runner.vocab_size();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<int32_t> doc(1500);  // 23 full pages of 64 and a partial one
  for (int32_t& t : doc) t = tok(rng);

  struct Seq {
    int32_t slot = -1;
    std::vector<int32_t> ids;  // prompt then generated tokens
  };
  std::vector<float> logits;
  // Prefills `s` from its longest cached prefix (the first one computes the document).
  auto admit = [&](Seq& s) {
    auto slot = kv.add_sequence();
    ASSERT_TRUE(slot.ok());
    s.slot = *slot;
    const TokenView view{s.ids, {}};
    const PrefixHit hit = kv.match_prefix(view, static_cast<int32_t>(s.ids.size()) - 1);
    kv.attach_prefix(s.slot, hit);
    const auto n = static_cast<int32_t>(s.ids.size());
    for (int32_t begin = hit.num_tokens; begin < n;) {
      const int32_t len = std::min(o.max_step_tokens, n - begin);
      StepInput in;
      in.tokens.assign(s.ids.begin() + begin, s.ids.begin() + begin + len);
      in.seqs.push_back({s.slot, len, begin + len, true});
      in.logit_rows.push_back(len - 1);
      ASSERT_TRUE(kv.grow(s.slot, begin + len).ok());
      ASSERT_TRUE(runner.forward(in, logits).ok());
      begin += len;
      kv.register_pages(s.slot, view, begin);
    }
    kv.finish_prefill(s.slot);
  };
  std::vector<Seq> seqs(6);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].ids = doc;
    for (size_t j = 0; j < 3 + 29 * i; ++j) seqs[i].ids.push_back(tok(rng));
    admit(seqs[i]);
    if (HasFatalFailure()) return;
  }
  std::vector<size_t> batch = {0, 1, 2, 3, 4, 5};
  const int64_t shared0 = runner.shared_prefix_stats().steps;
  float worst = 0, worst_abs = 0, worst_scale = 0;
  for (int32_t step = 0; step < 40; ++step) {
    if (step == 12) {  // seq 2 leaves (finished or aborted)
      kv.remove_sequence(seqs[2].slot);
      batch.erase(std::find(batch.begin(), batch.end(), size_t{2}));
    }
    if (step == 20) {  // seq 4 is preempted and recomputes, hitting the cached document
      kv.remove_sequence(seqs[4].slot);
      admit(seqs[4]);
      if (HasFatalFailure()) return;
    }
    StepInput in;
    for (size_t b = 0; b < batch.size(); ++b) {
      Seq& s = seqs[batch[b]];
      const auto len = static_cast<int32_t>(s.ids.size());
      in.tokens.push_back(s.ids.back());
      in.seqs.push_back({s.slot, 1, len, false});
      in.logit_rows.push_back(static_cast<int32_t>(b));
    }
    // The step's token is the last of ids: its K/V row is position len - 1, already reserved.
    runner.set_shared_prefix_attention(false);
    ASSERT_TRUE(runner.forward(in, logits).ok());
    const std::vector<float> off = logits;
    runner.set_shared_prefix_attention(true);
    ASSERT_TRUE(runner.forward(in, logits).ok());
    ASSERT_EQ(off.size(), logits.size());
    float diff = 0, scale = 1e-6f;
    for (size_t i = 0; i < off.size(); ++i) {
      ASSERT_TRUE(std::isfinite(logits[i])) << "step " << step << " element " << i;
      diff = std::max(diff, std::abs(off[i] - logits[i]));
      scale = std::max(scale, std::abs(off[i]));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      worst_abs = diff;
      worst_scale = scale;
    }
    // Teacher forcing with the per-sequence run's argmax: both kernels see the same inputs.
    for (size_t b = 0; b < batch.size(); ++b) {
      Seq& s = seqs[batch[b]];
      const float* row = off.data() + b * static_cast<size_t>(vocab);
      s.ids.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
      ASSERT_TRUE(kv.grow(s.slot, static_cast<int32_t>(s.ids.size())).ok());
    }
  }
  // Logits come back in bf16 on CUDA: a difference of exactly one bf16 ulp of the largest
  // logits (0.125 in [16, 32)) is rounding, not a wrong attention.
  EXPECT_LT(worst, kLogitTol) << "largest |logit difference| " << worst_abs
                              << " at a step whose largest |logit| is " << worst_scale;
  // Every step had a group sharing the document's 23 pages.
  EXPECT_EQ(runner.shared_prefix_stats().steps - shared0, 40);
  for (size_t b : batch) kv.remove_sequence(seqs[b].slot);
}

}  // namespace
}  // namespace ls::cuda_test
