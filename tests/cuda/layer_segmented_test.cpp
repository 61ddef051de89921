// Layer-segmented prefill on the CUDA backend (docs/layer-segmented-prefill.md): the last prompt
// token's logits and the teacher-forced decode logits after it equal, bit for bit, chunked
// prefill of the same prompt alone at the same boundaries (kChunk), for dense and lserve, with the
// host KV tier off and on, prompts that are and are not multiples of the segment, shares of a few
// units with a decoding neighbour between them. A unit issues the chunk's own kernels on the same
// shapes (GEMMs of the segment's rows, the prefill attention over the same pages), so only a
// kernel whose result depended on something else (the residual's address, the block-table
// stride) could make them differ.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "kv/kv_tier_config.h"
#include "model/model_stack.h"

namespace ls::cuda_test {
namespace {

constexpr int32_t kChunk = 512;
constexpr int32_t kMaxModelLen = 4352;

std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

std::unique_ptr<ModelStack> make_stack(const std::string& model, const std::string& policy,
                                       bool layer_segmented, bool offload) {
  ModelStackOptions o;
  o.model_dir = fixture_dir(model);
  o.device = "cuda";
  o.attention.policy = policy;
  o.attention.streaming_ratio = 0.5;
  o.attention.token_budget = 256;
  o.attention.select_interval = 3;
  o.attention.sink_tokens = 64;
  o.attention.prefill_local_tokens = 256;
  o.attention.decode_local_tokens = 128;
  o.max_num_seqs = 2;
  o.max_step_tokens = kChunk;
  o.max_logit_rows = 2;
  o.max_model_len = kMaxModelLen;
  o.kv_cache_bytes = int64_t{256} << 20;
  o.layer_segmented_prefill = layer_segmented;
  o.kv_offload = offload;
  o.offload_buffer_ratio = 0;  // the smallest cache: one layer of a max-length request
  auto stack = build_model_stack(o);
  EXPECT_TRUE(stack.ok()) << model << ": " << stack.status().to_string();
  return stack.ok() ? std::move(*stack) : nullptr;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaLayerSegmented
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, bool>> {};

TEST_P(CudaLayerSegmented, LogitsIdenticalToChunkedPrefill) {
  LS_REQUIRE_CUDA();
  const auto& [model, policy, offload] = GetParam();
  auto a = make_stack(model, policy, false, false);
  auto b = make_stack(model, policy, true, offload);
  ASSERT_TRUE(a && b);
  const int32_t vocab = a->runner->vocab_size();
  const int32_t layers = b->runner->num_layers();
  std::mt19937 rng(3);
  std::vector<float> la, lb, prompt_logits;

  // A decoding neighbour in both stacks (slot 0), stepped between the shares.
  std::vector<int32_t> bg(700);
  for (auto& t : bg) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  auto sa = a->kv->add_sequence();
  auto sb = b->kv->add_sequence();
  ASSERT_TRUE(sa.ok() && sb.ok() && *sa == *sb);
  const int32_t bg_slot = *sa;
  int32_t bg_done = 0;
  for (; bg_done < 600; bg_done += kChunk) {
    const int32_t len = std::min(kChunk, 600 - bg_done);
    StepInput in;
    in.tokens.assign(bg.begin() + bg_done, bg.begin() + bg_done + len);
    in.seqs.push_back({bg_slot, len, bg_done + len, true});
    in.logit_rows.push_back(len - 1);
    ASSERT_TRUE(a->kv->grow(bg_slot, bg_done + len).ok() && b->kv->grow(bg_slot, bg_done + len).ok());
    ASSERT_TRUE(a->runner->forward(in, la).ok() && b->runner->forward(in, lb).ok());
  }
  bg_done = 600;
  a->kv->finish_prefill(bg_slot);
  b->kv->finish_prefill(bg_slot);

  for (int32_t len : {2 * kChunk, 3 * kChunk + 77, 3000}) {
    std::vector<int32_t> ids(static_cast<size_t>(len + 16));
    for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    auto ra = a->kv->add_sequence();
    auto rb = b->kv->add_sequence();
    ASSERT_TRUE(ra.ok() && rb.ok() && *ra == *rb);
    const int32_t slot = *ra;
    for (int32_t n = 0; n < len;) {
      n = std::min(len, n + kChunk);
      ASSERT_TRUE(b->kv->grow(slot, n).ok());
    }
    LayerSegmentInput in;
    in.slot = slot;
    in.num_tokens = len;
    in.segment_tokens = kChunk;
    const int32_t units = in.num_segments() * layers;
    for (int32_t u = 0; u < units; u = in.unit_end) {
      in.unit_begin = u;
      in.unit_end = std::min(units, u + 1 + static_cast<int32_t>(rng() % 4));
      in.tokens.clear();
      if (u < in.num_segments()) in.tokens.assign(ids.begin(), ids.begin() + len);
      const Status st = b->runner->forward_layer_segments(in, prompt_logits);
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (bg_done < static_cast<int32_t>(bg.size())) {  // the neighbour decodes in between
        StepInput d;
        d.tokens = {bg[static_cast<size_t>(bg_done)]};
        d.seqs.push_back({bg_slot, 1, bg_done + 1, false});
        d.logit_rows = {0};
        ASSERT_TRUE(a->kv->grow(bg_slot, bg_done + 1).ok() && b->kv->grow(bg_slot, bg_done + 1).ok());
        ASSERT_TRUE(a->runner->forward(d, la).ok() && b->runner->forward(d, lb).ok());
        EXPECT_TRUE(same(la, lb)) << "the neighbour's decode moved";
        ++bg_done;
      }
    }
    for (int32_t begin = 0; begin < len; begin += kChunk) {
      const int32_t n = std::min(kChunk, len - begin);
      ASSERT_TRUE(a->kv->grow(slot, begin + n).ok());
      StepInput c;
      c.tokens.assign(ids.begin() + begin, ids.begin() + begin + n);
      c.seqs.push_back({slot, n, begin + n, true});
      c.logit_rows.push_back(n - 1);
      ASSERT_TRUE(a->runner->forward(c, la).ok());
    }
    ASSERT_EQ(la.size(), static_cast<size_t>(vocab));
    EXPECT_TRUE(same(la, prompt_logits)) << model << " " << policy << " prompt " << len;
    a->kv->finish_prefill(slot);
    b->kv->finish_prefill(slot);
    for (int32_t d = 0; d < 16; ++d) {
      StepInput s;
      s.tokens = {ids[static_cast<size_t>(len + d)]};
      s.seqs.push_back({slot, 1, len + d + 1, false});
      s.logit_rows = {0};
      ASSERT_TRUE(a->kv->grow(slot, len + d + 1).ok() && b->kv->grow(slot, len + d + 1).ok());
      ASSERT_TRUE(a->runner->forward(s, la).ok() && b->runner->forward(s, lb).ok());
      EXPECT_TRUE(same(la, lb)) << model << " " << policy << " prompt " << len << " decode " << d;
    }
    a->kv->remove_sequence(slot);
    b->kv->remove_sequence(slot);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaLayerSegmented,
    ::testing::Combine(::testing::Values("llama3", "qwen3"), ::testing::Values("dense", "lserve"),
                       ::testing::Values(false, true)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param) +
             (std::get<2>(info.param) ? "_tier" : "_resident");
    });

}  // namespace
}  // namespace ls::cuda_test
