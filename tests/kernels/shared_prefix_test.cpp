// Shared-prefix decode attention (kernels/shared_prefix.h, kernels/cpu/shared_prefix_attention)
// against dense double-precision attention per sequence and against the ordinary per-sequence
// kernel (cpu::paged_attention) on the same pages: group sizes 1..33, GQA ratios, prefixes that
// end inside a page (the copy-on-write page), empty suffixes, several groups plus sequences in
// no group, prefixes split into several key chunks. Then the plan's refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../common/shared_prefix_case.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/shared_prefix_attention.h"

namespace ls::kernels::test {
namespace {

using shared_prefix_test::CaseConfig;
using shared_prefix_test::GroupSpec;
using shared_prefix_test::SharedPrefixCase;

ThreadPool& pool2() {
  static ThreadPool pool(2);
  return pool;
}

std::vector<double> to_double(const std::vector<float>& f) {
  return std::vector<double>(f.begin(), f.end());
}

// Runs the case through the plan and the shared-prefix kernel; returns the output.
std::vector<float> run_shared(SharedPrefixCase& c, const SharedPrefixPlanConfig& pc, cpu::Isa isa) {
  auto plan = c.plan(pc);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return {};
  SharedPrefixParams sp;
  sp.attn = c.params();
  sp.items = plan->items.data();
  sp.num_items = static_cast<int32_t>(plan->items.size());
  sp.item_seqs = plan->item_seqs.data();
  sp.num_parts = plan->num_parts.data();
  sp.max_parts = plan->max_parts;
  sp.max_item_rows = plan->max_item_rows;
  poison(c.out().bytes.data(), c.config().q_dtype, static_cast<int64_t>(c.out().values.size()));
  const Status st = cpu::shared_prefix_attention(sp, pool2(), isa);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return c.out_values();
}

std::vector<float> run_ordinary(SharedPrefixCase& c) {
  cpu::paged_attention(c.params(), pool2());
  return c.out_values();
}

void expect_matches(SharedPrefixCase& c, const SharedPrefixPlanConfig& pc, double atol,
                    const std::string& label, bool every_isa = false) {
  const std::vector<double> want = c.reference();
  const std::vector<float> ordinary = run_ordinary(c);
  ASSERT_TRUE(all_close(ordinary, want, atol, atol)) << label << " (ordinary kernel)";
  std::vector<cpu::Isa> isas = {cpu::best_isa()};
  if (every_isa) isas = all_isas();
  for (cpu::Isa isa : isas) {
    const std::vector<float> got = run_shared(c, pc, isa);
    EXPECT_TRUE(all_close(got, want, atol, atol)) << label << " isa=" << isa_label(isa);
    EXPECT_TRUE(all_close(got, to_double(ordinary), atol, atol))
        << label << " vs per-sequence kernel, isa=" << isa_label(isa);
  }
}

// Suffix lengths of n members: 0 for the first (context == prefix), then varied.
std::vector<int32_t> suffixes(std::mt19937& rng, int32_t n) {
  std::uniform_int_distribution<int32_t> len(0, 40);
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (int32_t i = 1; i < n; ++i) s[static_cast<size_t>(i)] = len(rng);
  return s;
}

TEST(SharedPrefixAttention, GroupSizesGqaAndPrefixLengthsMatchPerSequenceAttention) {
  std::mt19937 rng(7);
  for (int32_t gqa : {1, 4, 8}) {
    for (int32_t prefix : {37, 100}) {  // 37: ends inside a page of 16
      for (int32_t g : {1, 2, 5, 16, 17, 33}) {
        CaseConfig cfg;
        cfg.group = gqa;
        SharedPrefixCase c(rng, cfg, {GroupSpec{prefix, suffixes(rng, g)}}, {});
        SharedPrefixPlanConfig pc;
        pc.split_tokens = 32;  // several prefix chunks and suffix chunks to merge
        expect_matches(c, pc, 2e-5,
                       "gqa " + std::to_string(gqa) + " prefix " + std::to_string(prefix) +
                           " group " + std::to_string(g),
                       g == 17 && gqa == 4);
      }
    }
  }
}

TEST(SharedPrefixAttention, SeveralGroupsAndLonersWithDefaultPlan) {
  std::mt19937 rng(11);
  CaseConfig cfg;
  cfg.group = 4;
  cfg.num_kv_heads = 3;
  cfg.head_dim = 32;
  SharedPrefixCase c(rng, cfg,
                     {GroupSpec{130, suffixes(rng, 6)}, GroupSpec{16, {3, 0, 17}},
                      GroupSpec{0, {5, 9}}, GroupSpec{45, {0}}},
                     {1, 70, 33});
  expect_matches(c, {}, 2e-5, "default plan");
  SharedPrefixPlanConfig tiny;
  tiny.max_rows = 8;  // two sequences per prefix item
  tiny.split_tokens = 7;
  expect_matches(c, tiny, 2e-5, "8-row items, 7-key chunks");
}

TEST(SharedPrefixAttention, ReducedPrecisionPoolsAndQueries) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    CaseConfig cfg;
    cfg.group = 4;
    cfg.kv_dtype = dt;
    cfg.q_dtype = dt;
    SharedPrefixCase c(rng, cfg, {GroupSpec{77, suffixes(rng, 20)}}, {12});
    SharedPrefixPlanConfig pc;
    pc.split_tokens = 40;
    expect_matches(c, pc, dt == DType::kBF16 ? 8e-3 : 1e-3, std::string(dtype_name(dt)));
  }
}

TEST(SharedPrefixAttention, PrefixLongerThanAMemberIsClampedToIt) {
  std::mt19937 rng(5);
  CaseConfig cfg;
  cfg.group = 2;
  SharedPrefixCase c(rng, cfg, {GroupSpec{50, {0, 12, 30}}}, {});
  SharedPrefixGroups groups = c.groups();
  groups.prefix_tokens[0] = 90;  // beyond the member whose context is the 50-token prefix
  auto plan = plan_shared_prefix(c.num_seqs(), c.kv_lens().data(), c.num_q_heads(),
                                 cfg.num_kv_heads, c.head_mode().data(), nullptr, c.blocks().data(),
                                 c.stride(), cfg.page_tokens, groups);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const SharedPrefixItem& it : plan->items) {
    if (it.num_seqs > 1) {
      EXPECT_LE(it.key_end, 50);
    }
  }
  EXPECT_EQ(plan->shared_keys, 2 * 50);
}

TEST(SharedPrefixAttention, PlanRefusesWhatItCannotShare) {
  std::mt19937 rng(9);
  CaseConfig cfg;
  cfg.group = 2;
  SharedPrefixCase c(rng, cfg, {GroupSpec{64, {4, 5, 6}}}, {8});
  const auto plan_with = [&](const SharedPrefixGroups& g, const std::vector<int32_t>& modes,
                             const std::vector<int32_t>* selected_rows,
                             const std::vector<int32_t>& blocks) {
    return plan_shared_prefix(c.num_seqs(), c.kv_lens().data(), c.num_q_heads(), cfg.num_kv_heads,
                              modes.data(), selected_rows ? selected_rows->data() : nullptr,
                              blocks.data(), c.stride(), cfg.page_tokens, g);
  };
  ASSERT_TRUE(plan_with(c.groups(), c.head_mode(), nullptr, c.blocks()).ok());

  std::vector<int32_t> streaming = c.head_mode();
  streaming[1] = static_cast<int32_t>(HeadMode::kStreaming);
  EXPECT_FALSE(plan_with(c.groups(), streaming, nullptr, c.blocks()).ok());

  std::vector<int32_t> selected(c.head_mode().size(), static_cast<int32_t>(HeadMode::kSelected));
  std::vector<int32_t> no_rows(static_cast<size_t>(c.num_seqs()), -1);
  EXPECT_TRUE(plan_with(c.groups(), selected, &no_rows, c.blocks()).ok());  // dense in effect
  std::vector<int32_t> rows = no_rows;
  rows[0] = 3;  // one sequence has a page selection: the prefix is not read alike
  EXPECT_FALSE(plan_with(c.groups(), selected, &rows, c.blocks()).ok());

  SharedPrefixGroups twice = c.groups();
  twice.group_indptr.push_back(twice.group_indptr.back() + 1);
  twice.seqs.push_back(twice.seqs[0]);
  twice.prefix_tokens.push_back(16);
  EXPECT_FALSE(plan_with(twice, c.head_mode(), nullptr, c.blocks()).ok());

  SharedPrefixGroups out_of_range = c.groups();
  out_of_range.seqs[1] = c.num_seqs();
  EXPECT_FALSE(plan_with(out_of_range, c.head_mode(), nullptr, c.blocks()).ok());

  std::vector<int32_t> unshared = c.blocks();
  const int32_t member = c.groups().seqs[2];
  unshared[static_cast<size_t>(member) * c.stride() + 1] = 0;  // page 1 not the group's block
  EXPECT_FALSE(plan_with(c.groups(), c.head_mode(), nullptr, unshared).ok());
}

TEST(SharedPrefixAttention, GroupsFoundFromBlockTablesGiveTheSameOutput) {
  std::mt19937 rng(17);
  CaseConfig cfg;
  cfg.group = 4;
  // Group 0 ends inside a page (its copy-on-write page is per member, so 5 whole pages are
  // found); group 1 is a single member (left out); group 2 shares exactly 2 pages.
  SharedPrefixCase c(rng, cfg,
                     {GroupSpec{90, {0, 7, 30, 2}}, GroupSpec{48, {5}}, GroupSpec{32, {1, 40}}},
                     {20, 64});
  const SharedPrefixGroups found = find_shared_prefix_groups(
      c.num_seqs(), c.kv_lens().data(), c.blocks().data(), c.stride(), cfg.page_tokens);
  ASSERT_EQ(found.prefix_tokens.size(), 2u);
  std::vector<int32_t> want_prefix = {80, 32}, got_prefix = found.prefix_tokens;
  std::sort(want_prefix.begin(), want_prefix.end());
  std::sort(got_prefix.begin(), got_prefix.end());
  EXPECT_EQ(got_prefix, want_prefix);
  std::vector<int32_t> members;
  for (size_t g = 0; g < found.prefix_tokens.size(); ++g) {
    const int32_t n = found.group_indptr[g + 1] - found.group_indptr[g];
    members.push_back(n);
    std::vector<int32_t> expected;
    for (size_t h = 0; h < c.groups().prefix_tokens.size(); ++h) {
      const std::vector<int32_t> gs(c.groups().seqs.begin() + c.groups().group_indptr[h],
                                    c.groups().seqs.begin() + c.groups().group_indptr[h + 1]);
      if (std::find(gs.begin(), gs.end(), found.seqs[static_cast<size_t>(found.group_indptr[g])]) !=
          gs.end()) {
        expected = gs;
      }
    }
    std::vector<int32_t> got(found.seqs.begin() + found.group_indptr[g],
                             found.seqs.begin() + found.group_indptr[g + 1]);
    std::sort(got.begin(), got.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(got, expected) << "group " << g;
  }
  auto plan = plan_shared_prefix(c.num_seqs(), c.kv_lens().data(), c.num_q_heads(),
                                 cfg.num_kv_heads, c.head_mode().data(), nullptr, c.blocks().data(),
                                 c.stride(), cfg.page_tokens, found);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->shared_keys, 80 * 3 + 32 * 1);
  SharedPrefixParams sp;
  sp.attn = c.params();
  sp.items = plan->items.data();
  sp.num_items = static_cast<int32_t>(plan->items.size());
  sp.item_seqs = plan->item_seqs.data();
  sp.num_parts = plan->num_parts.data();
  sp.max_parts = plan->max_parts;
  ASSERT_TRUE(cpu::shared_prefix_attention(sp, pool2()).ok());
  EXPECT_TRUE(all_close(c.out_values(), c.reference(), 2e-5, 2e-5));
}

TEST(SharedPrefixAttention, KernelRefusesOutOfRangeItems) {
  std::mt19937 rng(13);
  SharedPrefixCase c(rng, CaseConfig{}, {GroupSpec{20, {1, 2}}}, {});
  auto plan = c.plan();
  ASSERT_TRUE(plan.ok());
  std::vector<SharedPrefixItem> items = plan->items;
  items[0].part = plan->max_parts;  // no such slot
  SharedPrefixParams sp;
  sp.attn = c.params();
  sp.items = items.data();
  sp.num_items = static_cast<int32_t>(items.size());
  sp.item_seqs = plan->item_seqs.data();
  sp.num_parts = plan->num_parts.data();
  sp.max_parts = plan->max_parts;
  EXPECT_FALSE(cpu::shared_prefix_attention(sp, pool2()).ok());
}

}  // namespace
}  // namespace ls::kernels::test
