// SelectingPolicy's selection hook (attention/selection_hook.h, used by bench_locality) records
// exactly what page selection chose: on a fixture model decoding two sequences in one batch, every
// recorded row equals a brute-force Quest selection recomputed from the step's own query and page
// summaries (bounds in double, the group's per-head-normalized max, top-(k-1) of all pages but the
// last, plus the last). Rows whose cut falls on a near-tie (float vs double) are checked for
// optimality within the tolerance instead; most rows must compare exactly. With a select interval
// the hook fires only on the steps that reselect, and without a hook nothing is recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention/selecting_policy.h"
#include "attention/selection_hook.h"
#include "core/dtype.h"
#include "model/model_stack.h"

namespace ls {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

// The brute-force page scores of one (sequence, kv head) and the pages the kernel should choose.
struct Expected {
  std::vector<double> score;  // [physical pages]
  std::vector<int32_t> pages;
};

Expected brute_force(const kernels::PageSelectParams& p, int32_t s, int32_t g) {
  Expected e;
  const int32_t d = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  const int32_t kv_len = p.kv_lens[s];
  const int32_t pt = p.page_tokens, lpp = p.summaries.logical_per_page;
  const int32_t lpt = p.summaries.logical_page_tokens;
  const int32_t pages = (kv_len + pt - 1) / pt, logical = (kv_len + lpt - 1) / lpt;
  const int64_t token = p.q_indptr[s + 1] - 1;
  std::vector<float> q(static_cast<size_t>(d)), kmax(static_cast<size_t>(d)),
      kmin(static_cast<size_t>(d));
  e.score.assign(static_cast<size_t>(pages), -INFINITY);
  const size_t qbytes = static_cast<size_t>(dtype_nbytes(p.q_dtype, 1));
  const size_t sbytes = static_cast<size_t>(dtype_nbytes(p.summaries.dtype, 1));
  for (int32_t h = 0; h < group; ++h) {
    const int64_t q_off = (token * p.num_q_heads + g * group + h) * d;
    convert_to_f32(p.q_dtype, static_cast<const char*>(p.q) + q_off * static_cast<int64_t>(qbytes),
                   q.data(), d);
    std::vector<double> bound(static_cast<size_t>(logical));
    for (int32_t lp = 0; lp < logical; ++lp) {
      const int32_t block = p.retrieval_blocks[s * p.retrieval_blocks_stride + lp / lpp];
      const int64_t row =
          ((int64_t{block} * p.heads_per_block + p.head_slot[g]) * lpp + lp % lpp) * d;
      convert_to_f32(p.summaries.dtype,
                     static_cast<const char*>(p.summaries.kmax) + row * static_cast<int64_t>(sbytes),
                     kmax.data(), d);
      convert_to_f32(p.summaries.dtype,
                     static_cast<const char*>(p.summaries.kmin) + row * static_cast<int64_t>(sbytes),
                     kmin.data(), d);
      double b = 0;
      for (int32_t c = 0; c < d; ++c) {
        b += std::max(double{q[c]} * kmax[c], double{q[c]} * kmin[c]);
      }
      bound[static_cast<size_t>(lp)] = b;
    }
    const double best = *std::max_element(bound.begin(), bound.end());
    for (int32_t lp = 0; lp < logical; ++lp) {
      double& sc = e.score[static_cast<size_t>(lp / lpp)];
      sc = std::max(sc, bound[static_cast<size_t>(lp)] - best);
    }
  }
  if (pages <= p.budget_pages) {
    e.pages.resize(static_cast<size_t>(pages));
    std::iota(e.pages.begin(), e.pages.end(), 0);
    return e;
  }
  const int32_t k = std::min({std::max(3, p.budget_pages), pages, p.max_selected});
  std::vector<int32_t> cand(static_cast<size_t>(pages - 1));
  std::iota(cand.begin(), cand.end(), 0);
  std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) {
    return e.score[static_cast<size_t>(a)] > e.score[static_cast<size_t>(b)];
  });
  e.pages.assign(cand.begin(), cand.begin() + (k - 1));
  e.pages.push_back(pages - 1);
  std::sort(e.pages.begin(), e.pages.end());
  return e;
}

struct Tally {
  int64_t rows = 0;       // (sequence, selecting kv head) rows recorded
  int64_t exact = 0;      // of them compared as sets with the brute force
  int64_t hook_calls = 0;
};

// Compares every recorded row of one page_select call with the brute force.
void check_call(Backend& backend, int32_t layer, const kernels::PageSelectParams& p, Tally& t) {
  ++t.hook_calls;
  const std::vector<RecordedSelection> rec = read_selections(backend, layer, p);
  int32_t written = 0;
  for (int32_t s = 0; s < p.num_seqs; ++s) written += p.out_rows[s] >= 0 ? 1 : 0;
  ASSERT_EQ(static_cast<int32_t>(rec.size()), written);
  for (const RecordedSelection& r : rec) {
    ASSERT_EQ(r.row, p.out_rows[r.seq]);
    ASSERT_EQ(r.kv_len, p.kv_lens[r.seq]);
    ASSERT_EQ(static_cast<int32_t>(r.pages.size()), p.num_kv_heads);
    for (int32_t g = 0; g < p.num_kv_heads; ++g) {
      const std::vector<int32_t>& got = r.pages[static_cast<size_t>(g)];
      SCOPED_TRACE("layer " + std::to_string(layer) + " seq " + std::to_string(r.seq) +
                   " kv head " + std::to_string(g));
      if (p.head_mode[g] != static_cast<int32_t>(kernels::HeadMode::kSelected)) {
        EXPECT_TRUE(got.empty());
        continue;
      }
      ++t.rows;
      const Expected e = brute_force(p, r.seq, g);
      ASSERT_EQ(got.size(), e.pages.size());
      const auto pages = static_cast<int32_t>(e.score.size());
      // Tolerance: float sums of head_dim products against double ones.
      auto tol = [](double x) { return 1e-3 * (1.0 + std::fabs(x)); };
      double worst_in = INFINITY, best_out = -INFINITY;
      for (int32_t pg = 0; pg + 1 < pages; ++pg) {
        const double sc = e.score[static_cast<size_t>(pg)];
        if (std::find(got.begin(), got.end(), pg) != got.end()) {
          worst_in = std::min(worst_in, sc);
        } else {
          best_out = std::max(best_out, sc);
        }
      }
      if (pages <= p.budget_pages || !(std::fabs(worst_in - best_out) <= tol(worst_in))) {
        ++t.exact;  // no near-tie at the cut: the sets must be equal
        EXPECT_EQ(got, e.pages);
      } else {
        EXPECT_EQ(got.back(), pages - 1);
        EXPECT_GE(worst_in, best_out - tol(best_out));
      }
    }
  }
}

class SelectionHookTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int32_t>> {};

TEST_P(SelectionHookTest, RecordsWhatSelectionChose) {
  const auto& [model, policy_name, interval] = GetParam();
  ModelStackOptions o;
  o.model_dir = fixture(model);
  o.num_threads = 2;
  o.max_num_seqs = 2;
  o.max_step_tokens = 512;
  o.max_logit_rows = 2;
  o.max_model_len = 640;
  o.attention.policy = policy_name;
  o.attention.token_budget = policy_name == "quest" ? 64 : 128;  // a few pages of many
  o.attention.select_interval = interval;
  o.attention.streaming_ratio = 0.5;
  auto stack_or = build_model_stack(o);
  ASSERT_TRUE(stack_or.ok()) << stack_or.status().to_string();
  ModelStack& st = **stack_or;
  auto* policy = dynamic_cast<SelectingPolicy*>(st.policy.get());
  ASSERT_NE(policy, nullptr);
  Tally tally;
  bool hooked = false;
  policy->set_selection_hook([&](Backend& b, int32_t layer, const kernels::PageSelectParams& p) {
    if (hooked) check_call(b, layer, p, tally);
  });

  const int32_t vocab = st.runner->vocab_size();
  std::mt19937 rng(7);
  std::vector<int32_t> lens = {300, 457};
  std::vector<int32_t> slots;
  std::vector<float> logits;
  for (int32_t n : lens) {  // prefill each prompt alone (no selection is made in prefill)
    auto slot = st.kv->add_sequence();
    ASSERT_TRUE(slot.ok());
    slots.push_back(*slot);
    StepInput in;
    for (int32_t i = 0; i < n; ++i) in.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    in.seqs.push_back({*slot, n, n, true});
    in.logit_rows.push_back(n - 1);
    ASSERT_TRUE(st.kv->grow(*slot, n).ok());
    ASSERT_TRUE(st.runner->forward(in, logits).ok());
    st.kv->finish_prefill(*slot);
  }
  EXPECT_EQ(tally.hook_calls, 0);
  const int32_t layers = st.kv->geometry().num_layers;
  const int32_t steps = 9;
  for (int32_t step = 0; step < steps; ++step) {
    hooked = step != 4;  // one step unhooked: recording is off when the hook ignores it
    StepInput in;
    for (size_t i = 0; i < slots.size(); ++i) {
      in.tokens.push_back(static_cast<int32_t>(rng() % vocab));
      in.seqs.push_back({slots[i], 1, lens[i] + 1, false});
      in.logit_rows.push_back(static_cast<int32_t>(i));
      ASSERT_TRUE(st.kv->grow(slots[i], lens[i] + 1).ok());
      ++lens[i];
    }
    const int64_t calls = tally.hook_calls;
    ASSERT_TRUE(st.runner->forward(in, logits).ok());
    // Every layer reselects on steps 0, interval, 2 * interval, ...
    const bool reselects = step % interval == 0;
    EXPECT_EQ(tally.hook_calls - calls, hooked && reselects ? layers : 0) << "step " << step;
  }
  EXPECT_GT(tally.rows, 0);
  EXPECT_GE(tally.exact * 10, tally.rows * 8) << tally.exact << " of " << tally.rows;
  policy->set_selection_hook({});
  StepInput in;
  in.tokens.push_back(1);
  in.seqs.push_back({slots[0], 1, lens[0] + 1, false});
  in.logit_rows.push_back(0);
  ASSERT_TRUE(st.kv->grow(slots[0], lens[0] + 1).ok());
  const int64_t calls = tally.hook_calls;
  ASSERT_TRUE(st.runner->forward(in, logits).ok());
  EXPECT_EQ(tally.hook_calls, calls);  // no hook, no call
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SelectionHookTest,
                         ::testing::Combine(::testing::Values("llama3", "qwen3"),
                                            ::testing::Values("quest", "lserve"),
                                            ::testing::Values(1, 4)));

}  // namespace
}  // namespace ls
