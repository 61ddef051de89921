// Index rides on the KV append (attention_policy.h): every registered policy that keeps page
// summaries must place them in the append's params, and every other policy must leave the
// request empty, or summaries would silently go stale (or be written for a policy without them).
#include <gtest/gtest.h>

#include "attention/policy_registry.h"
#include "backend/backend.h"

namespace ls {
namespace {

TEST(IndexRequest, PlacedInTheAppendExactlyByPoliciesThatKeepSummaries) {
  auto backend = make_cpu_backend(1);
  int summary_keepers = 0;
  for (const std::string& name : attention_policy_names()) {
    SCOPED_TRACE(name);
    AttentionConfig c;
    c.policy = name;
    const PolicyModelInfo m{2, 4, 2, 16};
    auto policy = make_attention_policy(c, m);
    ASSERT_TRUE(policy.ok()) << policy.status().to_string();
    ASSERT_TRUE((*policy)->bind(*backend, 2).ok());
    const KvGeometry& g = (*policy)->kv_geometry();
    int32_t kmin = 0, kmax = 0;  // stand-ins: only the pointers travel
    kernels::PageSummaries summaries{&kmin, &kmax, DType::kBF16, g.logical_page_tokens,
                                     g.logical_per_page()};
    for (int32_t layer = 0; layer < m.num_layers; ++layer) {
      kernels::KvAppendParams ap;
      (*policy)->fill_append(layer, summaries, ap);
      EXPECT_NE(ap.head_mode, nullptr);
      EXPECT_NE(ap.head_slot, nullptr);
      if (g.keep_summaries) {
        EXPECT_EQ(ap.summaries.kmin, &kmin) << "layer " << layer;
        EXPECT_EQ(ap.summaries.kmax, &kmax) << "layer " << layer;
        EXPECT_EQ(ap.summaries.logical_page_tokens, g.logical_page_tokens);
      } else {
        EXPECT_EQ(ap.summaries.kmin, nullptr) << "layer " << layer;
      }
    }
    summary_keepers += g.keep_summaries ? 1 : 0;
  }
  EXPECT_GE(summary_keepers, 2);  // quest and lserve
}

}  // namespace
}  // namespace ls
