// The decode kernel starts copying its first key blocks before it waits for the previous kernel
// (programmatic dependent launch, AttentionOptions::decode_prewait_copies), so it must leave the
// rows a kernel of the step may still be writing, each query's own K/V row, until after the wait.
// Here the kernel before the attention call is a delayed copy (tests/cuda/delayed_copy.h) that
// lets the decode kernel start at once and restores those rows, poisoned with NaN, only after
// spinning: an early read of one of them puts NaN into the output. The decode trace shows the
// decode kernel did start before the restore ended (else the test would prove nothing).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "attention_scenario.h"
#include "cuda_test_util.h"
#include "delayed_copy.h"

namespace ls::cuda_test {
namespace {

using kernels::HeadMode;

TEST(CudaAttention, DecodeReadsEachQuerysOwnRowOnlyAfterTheWait) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(44);
  for (int merge : {0, 1}) {
    const int early_blocks = merge == 0 ? 2 : 3;
    ScenarioConfig cfg;
    cfg.head_dim = 128;
    cfg.group = 4;
    cfg.page_tokens = 64;
    cfg.modes = {HeadMode::kSelected, HeadMode::kStreaming, HeadMode::kCausal};
    cfg.sink_tokens = 64;
    cfg.selection_just_written = false;  // the early copies run only then
    // The own row in a split's first block (short rows, several splits of a long row) and past
    // a split's first blocks (the long rows' last split).
    std::vector<SeqSpec> seqs = {{.kv_len = 1, .q_len = 1, .local_tokens = 100},
                                 {.kv_len = 64, .q_len = 1, .local_tokens = 100},
                                 {.kv_len = 65, .q_len = 1, .local_tokens = 100},
                                 {.kv_len = 700, .q_len = 1, .local_tokens = 100},
                                 {.kv_len = 3000,
                                  .q_len = 1,
                                  .local_tokens = 300,
                                  .selected_row = 0,
                                  .selected = {{0, 5, 17, 30}}},
                                 {.kv_len = 4097, .q_len = 1, .local_tokens = 300}};
    AttentionScenario sc(rng, cfg, seqs);
    const int64_t n = sc.out_numel();
    DeviceArray out(dtype_nbytes(cfg.dtype, n));
    const kernels::AttentionParams p = sc.device_params(out.data());

    kernels::cuda::AttentionOptions o;
    o.decode_prewait_copies = early_blocks;
    o.decode_merge_splits = merge;
    o.max_splits = 8;
    o.min_blocks_per_split = 1;
    const int64_t records = kernels::cuda::decode_trace_records(p, gpu()->num_sms(), o);
    ASSERT_GT(records, 0);
    DeviceArray trace(records * static_cast<int64_t>(sizeof(kernels::cuda::DecodeTraceRecord)));
    o.decode_trace = trace.as<kernels::cuda::DecodeTraceRecord>();
    gpu()->set_attention_options(o);
    struct DefaultOptionsAfter {
      ~DefaultOptionsAfter() { gpu()->set_attention_options({}); }
    } restore;
    gpu()->attention(p);  // sizes the scratch and counters: nothing else on the stream later
    gpu()->synchronize();

    // Save each query's own K and V rows, then poison them with NaN.
    const int64_t rb = sc.row_bytes();
    std::vector<void*> rows;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int32_t g = 0; g < sc.num_kv_heads(); ++g) {
        for (bool value : {false, true}) {
          rows.push_back(sc.device_row(value, static_cast<int32_t>(s), g, seqs[s].kv_len - 1));
        }
      }
    }
    DeviceArray saved(rb * static_cast<int64_t>(rows.size()));
    std::vector<ByteCopy> copies;
    HostArray nan_row(cfg.head_dim, cfg.dtype);
    nan_row.fill(kNaN);
    for (size_t i = 0; i < rows.size(); ++i) {
      char* slot = static_cast<char*>(saved.data()) + static_cast<int64_t>(i) * rb;
      gpu()->copy_bytes(slot, rows[i], rb);
      gpu()->copy_bytes(rows[i], nan_row.data(), rb);
      copies.push_back({rows[i], slot, rb});
    }
    DeviceArray end_ns(sizeof(uint64_t));
    out.poison(cfg.dtype, n);
    gpu()->synchronize();

    ASSERT_TRUE(
        launch_delayed_copies(copies, 100'000, end_ns.as<uint64_t>(), gpu()->stream_handle()).ok());
    gpu()->attention(p);
    const std::vector<float> got = out.download_floats(cfg.dtype, n);
    EXPECT_TRUE(gpu()->take_error().ok());
    EXPECT_TRUE(close_to(got, sc.reference(), 1e-2, 2e-2))
        << "merge " << merge << ", " << early_blocks << " early blocks";

    const auto rec = trace.download_as<kernels::cuda::DecodeTraceRecord>();
    uint64_t first_start = UINT64_MAX;
    for (int64_t i = 0; i < records; ++i) {
      if (rec[static_cast<size_t>(i)].kernel == 0 && rec[static_cast<size_t>(i)].start != 0)
        first_start = std::min(first_start, rec[static_cast<size_t>(i)].start);
    }
    const uint64_t restored = end_ns.download_as<uint64_t>()[0];
    if (std::getenv("LONGSERVE_NO_PDL") == nullptr) {
      EXPECT_LT(first_start, restored)
          << "the decode kernel started only after the previous kernel ended: nothing was tested";
    }
  }
}

}  // namespace
}  // namespace ls::cuda_test
