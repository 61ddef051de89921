// Shared-prefix decode attention on the GPU (kernels/cuda/shared_prefix_attention) against the
// CPU: dense double-precision attention per sequence and the CPU's ordinary per-sequence kernel
// (kernels/cpu/attention) on the same pages, over group sizes 1..33, GQA ratios, prefixes ending
// inside a page, empty suffixes, several groups and sequences in no group, bf16 and f16, head_dim
// 64 and 128. Skips without a CUDA device.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/shared_prefix_case.h"
#include "cuda_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/shared_prefix_attention.h"

namespace ls::cuda_test {
namespace {

using shared_prefix_test::CaseConfig;
using shared_prefix_test::GroupSpec;
using shared_prefix_test::SharedPrefixCase;

// Runs the case on the GPU; returns the output widened to f32.
std::vector<float> run_gpu(SharedPrefixCase& c, const kernels::SharedPrefixPlanConfig& pc) {
  auto plan = c.plan(pc);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return {};
  const CaseConfig& cfg = c.config();
  const int64_t out_elems = static_cast<int64_t>(c.out().values.size());
  DeviceArray q = DeviceArray::of(c.q().bytes);
  DeviceArray out(dtype_nbytes(cfg.q_dtype, out_elems));
  out.poison(cfg.q_dtype, out_elems);
  DeviceArray k = DeviceArray::of(c.k().bytes);
  DeviceArray v = DeviceArray::of(c.v().bytes);
  DeviceArray blocks = DeviceArray::of(c.blocks());
  DeviceArray q_indptr = DeviceArray::of(c.q_indptr());
  DeviceArray kv_lens = DeviceArray::of(c.kv_lens());
  DeviceArray head_mode = DeviceArray::of(c.head_mode());
  DeviceArray head_slot = DeviceArray::of(c.head_slot());
  DeviceArray items = DeviceArray::of(plan->items);
  DeviceArray item_seqs = DeviceArray::of(plan->item_seqs);
  DeviceArray num_parts = DeviceArray::of(plan->num_parts);

  kernels::SharedPrefixParams sp;
  sp.attn = c.params();
  sp.attn.q = q.data();
  sp.attn.out = out.data();
  sp.attn.q_indptr = q_indptr.as<int32_t>();
  sp.attn.kv_lens = kv_lens.as<int32_t>();
  sp.attn.head_mode = head_mode.as<int32_t>();
  sp.attn.head_slot = head_slot.as<int32_t>();
  sp.attn.retrieval.k = k.data();
  sp.attn.retrieval.v = v.data();
  sp.attn.retrieval_blocks = blocks.as<int32_t>();
  sp.items = items.as<kernels::SharedPrefixItem>();
  sp.num_items = static_cast<int32_t>(plan->items.size());
  sp.item_seqs = item_seqs.as<int32_t>();
  sp.num_parts = num_parts.as<int32_t>();
  sp.max_parts = plan->max_parts;
  sp.max_item_rows = plan->max_item_rows;
  DeviceArray workspace(kernels::cuda::shared_prefix_workspace_bytes(sp));
  const Status st = kernels::cuda::shared_prefix_attention(
      sp, workspace.data(), workspace.bytes(), static_cast<cudaStream_t>(gpu()->stream_handle()));
  EXPECT_TRUE(st.ok()) << st.to_string();
  gpu()->synchronize();
  EXPECT_TRUE(gpu()->take_error().ok());
  return out.download_floats(cfg.q_dtype, out_elems);
}

void expect_matches(SharedPrefixCase& c, const kernels::SharedPrefixPlanConfig& pc,
                    const std::string& label) {
  const DType dt = c.config().q_dtype;
  const std::vector<double> want = c.reference();
  kernels::cpu::paged_attention(c.params(), cpu_pool());
  const std::vector<float> ordinary = c.out_values();
  const std::vector<float> got = run_gpu(c, pc);
  EXPECT_TRUE(close_to(got, want, rel_tol(dt), 2 * rel_tol(dt))) << label << " vs dense";
  // Both outputs rounded to dt.
  EXPECT_TRUE(close_to(got, ordinary, 1.5 * rel_tol(dt), 3 * rel_tol(dt)))
      << label << " vs the CPU per-sequence kernel";
}

std::vector<int32_t> suffixes(std::mt19937& rng, int32_t n) {
  std::uniform_int_distribution<int32_t> len(0, 90);
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (int32_t i = 1; i < n; ++i) s[static_cast<size_t>(i)] = len(rng);  // member 0: empty
  return s;
}

TEST(CudaSharedPrefixAttention, GroupSizesGqaAndPrefixLengthsMatchCpu) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(21);
  for (int32_t gqa : {1, 4, 8}) {
    for (int32_t prefix : {37, 200}) {  // 37 and 200: end inside a page of 16
      for (int32_t g : {1, 2, 3, 5, 8, 16, 17, 32, 33}) {
        CaseConfig cfg;
        cfg.group = gqa;
        cfg.kv_dtype = cfg.q_dtype = DType::kBF16;
        SharedPrefixCase c(rng, cfg, {GroupSpec{prefix, suffixes(rng, g)}}, {});
        kernels::SharedPrefixPlanConfig pc;
        pc.split_tokens = 96;  // several prefix chunks, one partial key block each
        expect_matches(c, pc,
                       "gqa " + std::to_string(gqa) + " prefix " + std::to_string(prefix) +
                           " group " + std::to_string(g));
      }
    }
  }
}

TEST(CudaSharedPrefixAttention, HeadDimsDtypesSeveralGroupsAndLoners) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(22);
  for (int32_t d : {64, 128}) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      CaseConfig cfg;
      cfg.head_dim = d;
      cfg.group = 4;
      cfg.num_kv_heads = 3;
      cfg.page_tokens = 64;
      cfg.kv_dtype = cfg.q_dtype = dt;
      SharedPrefixCase c(rng, cfg,
                         {GroupSpec{700, suffixes(rng, 12)}, GroupSpec{64, {3, 0, 170}},
                          GroupSpec{0, {5, 9}}, GroupSpec{45, {0}}},
                         {1, 300, 65});
      expect_matches(c, {}, "d " + std::to_string(d) + " " + dtype_label(dt));
    }
  }
}

TEST(CudaSharedPrefixAttention, RefusesWhatItCannotRun) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(23);
  CaseConfig cfg;
  cfg.head_dim = 32;  // no kernel
  cfg.kv_dtype = cfg.q_dtype = DType::kBF16;
  SharedPrefixCase c(rng, cfg, {GroupSpec{20, {1, 2}}}, {});
  auto plan = c.plan();
  ASSERT_TRUE(plan.ok());
  kernels::SharedPrefixParams sp;
  sp.attn = c.params();
  sp.max_parts = plan->max_parts;
  DeviceArray workspace(kernels::cuda::shared_prefix_workspace_bytes(sp));
  EXPECT_FALSE(
      kernels::cuda::shared_prefix_attention(sp, workspace.data(), workspace.bytes(),
                                             static_cast<cudaStream_t>(gpu()->stream_handle()))
          .ok());
}

}  // namespace
}  // namespace ls::cuda_test
