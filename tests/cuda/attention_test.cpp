// Paged attention on the GPU against an independent dense reference in double (each head mode's
// visibility rule applied key by key) and against kernels/cpu on the same arrays: prefill chunks,
// decode batches, mixed batches, head_dim 16..128, GQA 1/4/8, pages of 16 and 64 tokens, bf16
// and f16, streaming rings at every length around the wrap, selected lists with entries the
// contract says to skip, forced split counts, and the prefill kernel serving single tokens. Both
// prefill kernels (mma.sync, and wgmma with key blocks of 64 and 128) run the prefill cases; the
// warp-specialised wgmma kernel and its ping-pong variant have suites of their own.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attention_scenario.h"
#include "cuda_test_util.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/kv_tma_maps.h"

namespace ls::cuda_test {
namespace {

using kernels::HeadMode;

// Reference limits: the double reference is exact but slow, so big scenarios use kernels/cpu.
constexpr int64_t kMaxReferenceCost = int64_t{400} << 20;

double attention_tol(DType dt) {
  return dt == DType::kBF16 ? 1e-2 : 2e-3;
}

// Runs the scenario on the GPU and checks it against the references it can afford.
void check_scenario(AttentionScenario& sc, const std::string& label) {
  const DType dt = sc.config().dtype;
  const std::vector<float> got = sc.run_gpu();
  EXPECT_TRUE(gpu()->take_error().ok()) << label;
  const double tol = attention_tol(dt);
  if (sc.reference_cost() <= kMaxReferenceCost) {
    EXPECT_TRUE(close_to(got, sc.reference(), tol, 2 * tol)) << "vs double reference: " << label;
  }
  EXPECT_TRUE(close_to(got, sc.run_cpu(), 1.5 * tol, 3 * tol)) << "vs kernels/cpu: " << label;
}

// The prefill kernels every prefill case runs on: mma.sync (8 warps), wgmma with key blocks of
// 64 and of 128 rows.
struct PrefillVariant {
  const char* name;
  kernels::cuda::AttentionOptions options;
};

std::vector<PrefillVariant> prefill_variants(bool with_mma = true,
                                             kernels::cuda::AttentionOptions o = {}) {
  using kernels::cuda::PrefillKernel;
  std::vector<PrefillVariant> v;
  if (with_mma) {
    o.prefill_kernel = PrefillKernel::kMma;
    v.push_back({"mma", o});
  }
  o.prefill_kernel = PrefillKernel::kWgmma;
  o.wgmma_key_block = 64;
  v.push_back({"wgmma/64", o});
  o.wgmma_key_block = 128;
  v.push_back({"wgmma/128", o});
  return v;
}

// Runs the scenario on the GPU once per variant, against references computed once.
void check_variants(AttentionScenario& sc, const std::string& label,
                    const std::vector<PrefillVariant>& variants) {
  const DType dt = sc.config().dtype;
  const double tol = attention_tol(dt);
  std::vector<double> reference;
  if (sc.reference_cost() <= kMaxReferenceCost) reference = sc.reference();
  const std::vector<float> cpu = sc.run_cpu();
  for (const PrefillVariant& v : variants) {
    ScopedAttentionOptions scoped(v.options);
    const std::vector<float> got = sc.run_gpu();
    EXPECT_TRUE(gpu()->take_error().ok()) << label << " " << v.name;
    if (!reference.empty()) {
      EXPECT_TRUE(close_to(got, reference, tol, 2 * tol))
          << "vs double reference: " << label << " " << v.name;
    }
    EXPECT_TRUE(close_to(got, cpu, 1.5 * tol, 3 * tol))
        << "vs kernels/cpu: " << label << " " << v.name;
  }
}

std::string describe(const ScenarioConfig& c) {
  return "d " + std::to_string(c.head_dim) + " group " + std::to_string(c.group) + " page " +
         std::to_string(c.page_tokens) + " " + dtype_label(c.dtype);
}

TEST(CudaAttention, CausalPrefillGrid) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(31);
  for (int32_t d : {64, 96, 128}) {
    for (int32_t group : {1, 4, 8}) {
      for (int32_t pt : {16, 64}) {
        for (DType dt : {DType::kBF16, DType::kF16}) {
          ScenarioConfig cfg;
          cfg.head_dim = d;
          cfg.group = group;
          cfg.page_tokens = pt;
          cfg.modes = {HeadMode::kCausal, HeadMode::kSelected};  // no selection: causal
          cfg.dtype = dt;
          // A whole prompt, and a later chunk of another sequence (queries start mid-page).
          std::vector<SeqSpec> seqs = {{.kv_len = 300, .q_len = 300},
                                       {.kv_len = 700, .q_len = 137}};
          AttentionScenario sc(rng, cfg, seqs);
          std::vector<PrefillVariant> variants = prefill_variants();
          if (d == 96) variants.resize(1);  // wgmma covers head_dim 64 and 128
          check_variants(sc, describe(cfg), variants);
        }
      }
    }
  }
}

TEST(CudaAttention, SmallHeadDimsOfTheFixtureModels) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(32);
  for (int32_t d : {16, 32}) {
    // Decode runs both kernel instantiations: fixed splits, and ticketed splits with two splits
    // of the 1300-token row drawing its blocks after their first four.
    for (int ticketed : {-1, 0, 1}) {
      const bool decode = ticketed >= 0;
      kernels::cuda::AttentionOptions o;
      o.decode_ticketed_splits = std::max(ticketed, 0);
      if (ticketed == 1) o.max_splits = 2;
      ScopedAttentionOptions scoped(o);
      ScenarioConfig cfg;
      cfg.head_dim = d;
      cfg.group = 2;
      cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming};
      cfg.sink_tokens = 5;
      std::vector<SeqSpec> seqs;
      if (decode) {
        seqs = {{.kv_len = 130, .q_len = 1, .local_tokens = 40},
                {.kv_len = 9, .q_len = 1},
                {.kv_len = 1300, .q_len = 1, .local_tokens = 40}};
      } else {
        seqs = {{.kv_len = 150, .q_len = 150, .local_tokens = 40}, {.kv_len = 60, .q_len = 1}};
      }
      AttentionScenario sc(rng, cfg, seqs);
      check_scenario(sc, describe(cfg) + (decode ? " decode ticketed " + std::to_string(ticketed)
                                                 : std::string(" prefill")));
    }
  }
}

TEST(CudaAttention, StreamingAndRetrievalHeadsInPrefill) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(33);
  for (int32_t pt : {16, 64}) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      std::vector<PrefillVariant> variants = prefill_variants(false);
      for (int warps : {4, 8}) {
        kernels::cuda::AttentionOptions o;
        o.prefill_kernel = kernels::cuda::PrefillKernel::kMma;
        o.prefill_warps = warps;
        variants.push_back({warps == 4 ? "mma warps 4" : "mma warps 8", o});
      }
      ScenarioConfig cfg;
      cfg.head_dim = 128;
      cfg.group = 4;
      cfg.page_tokens = pt;
      cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal, HeadMode::kStreaming,
                   HeadMode::kSelected};
      cfg.num_sink_pages = pt == 16 ? 2 : 1;
      cfg.sink_tokens = pt == 16 ? 20 : 40;  // the second sink page is partly a sink
      cfg.dtype = dt;
      // Windows shorter and longer than a tile; a chunk whose window starts inside the sinks.
      std::vector<SeqSpec> seqs = {{.kv_len = 900, .q_len = 900, .local_tokens = 100},
                                   {.kv_len = 1200, .q_len = 200, .local_tokens = 300},
                                   {.kv_len = 70, .q_len = 70, .local_tokens = 30}};
      AttentionScenario sc(rng, cfg, seqs);
      check_variants(sc, describe(cfg), variants);
    }
  }
}

TEST(CudaAttention, DecodeBatchesWithSelectionAndRings) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(34);
  for (int32_t d : {64, 96, 128}) {  // 96: a row's 12 chunks leave lanes idle in whole-row copies
    for (int32_t group : {1, 4, 8}) {
      for (int32_t pt : {16, 64}) {
        for (int splits : {0, 1, 7}) {
          kernels::cuda::AttentionOptions o;
          o.max_splits = splits;
          o.min_blocks_per_split = 1;
          // Fixed and ticketed splits (chunks of 1 and 2 blocks), across the shapes.
          o.decode_ticketed_splits = group == 4 ? 0 : 1;
          o.decode_chunk_blocks = d == 96 ? 2 : 1;
          ScopedAttentionOptions scoped(o);
          ScenarioConfig cfg;
          cfg.head_dim = d;
          cfg.group = group;
          cfg.page_tokens = pt;
          cfg.modes = {HeadMode::kSelected, HeadMode::kStreaming, HeadMode::kCausal};
          cfg.sink_tokens = pt;
          cfg.dtype = group == 4 ? DType::kF16 : DType::kBF16;
          cfg.selection_just_written = splits != 7;  // both sides of the decode kernel's wait
          const int32_t pages = 2000 / pt + 1;
          std::vector<SeqSpec> seqs = {
              {.kv_len = 1, .q_len = 1, .local_tokens = 48},
              {.kv_len = pt - 1, .q_len = 1, .local_tokens = 48},
              {.kv_len = pt + 1,
               .q_len = 1,
               .local_tokens = 48,
               .selected_row = 0,
               .selected = {{0}}},
              {.kv_len = 2000,
               .q_len = 1,
               .local_tokens = 48,
               .selected_row = 3,
               .selected = {{1, 4, 5, pages / 2, pages - 3}}},
              // A reused selection that misses the newest pages (they are visible anyway), and
              // entries to skip: repeated, out of order, past the context.
              {.kv_len = 1500,
               .q_len = 1,
               .local_tokens = 100,
               .selected_row = 1,
               .selected = {{2, 2, 7, 3, 9, 4000}}},
              {.kv_len = 64 * 9 + 3, .q_len = 1, .local_tokens = 200}};
          AttentionScenario sc(rng, cfg, seqs);
          check_scenario(sc, describe(cfg) + " splits " + std::to_string(splits) + " ticketed " +
                                 std::to_string(o.decode_ticketed_splits));
        }
      }
    }
  }
}

// Many splits merged by the reduction kernel: batch 1 with up to 64 splits of one 64-key block
// (contexts not a multiple of the page or of the split), and batch 64 with the default split
// heuristic and with forced 64 splits, every head mode, fixed and ticketed splits; outputs are
// poisoned before each run.
TEST(CudaAttention, DecodeManySplitsAtBatch1And64) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(40);
  for (int32_t pt : {16, 64}) {
    for (int splits : {0, 13, 64}) {
      for (int ticketed : {0, 1}) {
        kernels::cuda::AttentionOptions o;
        o.decode_ticketed_splits = ticketed;
        o.decode_chunk_blocks = pt == 16 ? 1 : 3;
        o.max_splits = splits;
        o.min_blocks_per_split = 1;
        o.decode_l2_prefetch = splits != 13;               // a hint: results must not depend on it
        o.decode_prewait_prefetch = splits == 64 ? 4 : 1;  // how much is warmed early
        ScopedAttentionOptions scoped(o);
        ScenarioConfig cfg;
        cfg.head_dim = 128;
        cfg.group = 4;
        cfg.page_tokens = pt;
        cfg.modes = {HeadMode::kCausal, HeadMode::kSelected, HeadMode::kStreaming};
        cfg.sink_tokens = pt;
        cfg.dtype = splits == 13 ? DType::kF16 : DType::kBF16;
        cfg.selection_just_written = splits == 0;
        const int32_t len = 64 * 64 + 37;  // 65 key blocks: 64 splits, one of two blocks
        const int32_t pages = (len + pt - 1) / pt;
        std::vector<int32_t> sel;
        for (int32_t j = 0; j < pages - 2; j += 2) sel.push_back(j);  // every other page
        std::vector<SeqSpec> one = {{.kv_len = len,
                                     .q_len = 1,
                                     .local_tokens = 1000,
                                     .selected_row = 0,
                                     .selected = {{}, sel}}};
        AttentionScenario sc1(rng, cfg, one);
        const std::string label = " page " + std::to_string(pt) + " splits " +
                                  std::to_string(splits) + " ticketed " + std::to_string(ticketed);
        check_scenario(sc1, "batch 1" + label);

        std::vector<SeqSpec> many;
        std::uniform_int_distribution<int32_t> lens(1, 2600);
        for (int32_t i = 0; i < 64; ++i) {
          SeqSpec q{.kv_len = i == 0 ? 1 : lens(rng), .q_len = 1, .local_tokens = 300};
          if (i % 3 == 1) {
            q.selected_row = i;
            q.selected = {{}, {0, 2, 5, 11, 40}};
          }
          many.push_back(q);
        }
        AttentionScenario sc64(rng, cfg, many);
        check_scenario(sc64, "batch 64" + label);
      }
    }
  }
}

TEST(CudaAttention, MixedPrefillAndDecodeBatch) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(35);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (bool prefill_only : {false, true}) {
      kernels::cuda::AttentionOptions base;
      base.prefill_only = prefill_only;
      ScenarioConfig cfg;
      cfg.head_dim = 128;
      cfg.group = 4;
      cfg.page_tokens = 64;
      cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected,
                   HeadMode::kStreaming};
      cfg.sink_tokens = 64;
      cfg.dtype = dt;
      std::vector<SeqSpec> seqs = {{.kv_len = 500, .q_len = 120, .local_tokens = 128},
                                   {.kv_len = 900,
                                    .q_len = 1,
                                    .local_tokens = 64,
                                    .selected_row = 2,
                                    .selected = {{}, {}, {0, 3, 8}}},
                                   {.kv_len = 40, .q_len = 40, .local_tokens = 128},
                                   {.kv_len = 77, .q_len = 1, .local_tokens = 64},
                                   // A short chunk with a selection row (speculative-style q_len >
                                   // 1): listed pages in the prefill kernel.
                                   {.kv_len = 1000,
                                    .q_len = 3,
                                    .local_tokens = 64,
                                    .selected_row = 0,
                                    .selected = {{}, {}, {1, 5, 9}}}};
      AttentionScenario sc(rng, cfg, seqs);
      check_variants(
          sc,
          std::string("mixed ") + dtype_label(dt) + (prefill_only ? " prefill kernel only" : ""),
          prefill_variants(true, base));
    }
  }
}

TEST(CudaAttention, StreamingRingAtEveryLengthAroundTheWrap) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(36);
  ScenarioConfig cfg;
  cfg.head_dim = 64;
  cfg.group = 2;
  cfg.page_tokens = 16;
  cfg.modes = {HeadMode::kStreaming};
  cfg.num_sink_pages = 1;
  cfg.sink_tokens = 10;
  const int32_t local = 40, ring = (local + 15) / 16 + 1;  // 4 pages: wraps every 64 tokens
  std::vector<SeqSpec> seqs;
  for (int32_t len = 1; len <= 16 * (1 + ring + 3); ++len) {
    seqs.push_back({.kv_len = len, .q_len = 1, .local_tokens = local, .ring_pages = ring});
  }
  AttentionScenario sc(rng, cfg, seqs);
  check_scenario(sc, "ring at every length");
}

TEST(CudaAttention, DecodeTokensOfUnevenSequencesInOneStep) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(37);
  // num_tokens == num_seqs although one sequence has two tokens and one none: the decode kernel
  // serves every token by its own position.
  ScenarioConfig cfg;
  cfg.head_dim = 128;
  cfg.group = 4;
  cfg.page_tokens = 64;
  cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming};
  cfg.sink_tokens = 64;
  std::vector<SeqSpec> seqs = {
      {.kv_len = 300, .q_len = 2}, {.kv_len = 50, .q_len = 0}, {.kv_len = 129, .q_len = 1}};
  AttentionScenario sc(rng, cfg, seqs);
  check_scenario(sc, "uneven decode");
}

TEST(CudaAttention, RowsWithNoVisibleKeyAreZero) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(38);
  ScenarioConfig cfg;
  cfg.head_dim = 64;
  cfg.group = 4;
  cfg.page_tokens = 16;
  cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal};
  cfg.num_sink_pages = 0;
  cfg.sink_tokens = 0;
  // local 0 and no sinks: a streaming head sees nothing, in prefill and in decode.
  std::vector<SeqSpec> seqs = {{.kv_len = 100, .q_len = 100, .local_tokens = 0, .ring_pages = 8},
                               {.kv_len = 50, .q_len = 1, .local_tokens = 0, .ring_pages = 4}};
  AttentionScenario sc(rng, cfg, seqs);
  check_variants(sc, "no visible key", prefill_variants());
}

// Prompts ending at and around every tile and key-block edge (1, 17, 64, 127, 128, 129, 300),
// a chunk that starts mid-page and a decode token, in one batch, on every page size.
void check_tile_and_block_edges(std::mt19937& rng, const std::vector<PrefillVariant>& variants,
                                int32_t head_dim = 128) {
  const std::pair<int32_t, int32_t> group_pages[] = {{1, 16}, {8, 32}, {4, 64}, {4, 128}};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const auto& [group, pt] : group_pages) {
      ScenarioConfig cfg;
      cfg.head_dim = head_dim;
      cfg.group = group;
      cfg.page_tokens = pt;
      cfg.modes = {HeadMode::kCausal, HeadMode::kSelected, HeadMode::kStreaming};
      cfg.num_sink_pages = 1;
      cfg.sink_tokens = std::min(pt, 20);
      cfg.dtype = dt;
      std::vector<SeqSpec> seqs;
      for (int32_t len : {1, 17, 64, 127, 128, 129, 300}) {
        seqs.push_back({.kv_len = len, .q_len = len, .local_tokens = 100});
      }
      seqs.push_back({.kv_len = 1000, .q_len = 200, .local_tokens = 150});
      seqs.push_back({.kv_len = 333, .q_len = 1, .local_tokens = 64});
      AttentionScenario sc(rng, cfg, seqs);
      check_variants(sc, describe(cfg), variants);
    }
  }
}

TEST(CudaAttention, PrefillKernelsAtTileAndBlockEdges) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(39);
  check_tile_and_block_edges(rng, prefill_variants());
}

// Long prompts (several waves of tiles, thousands of key blocks) on both kernels: a 4100-token
// prompt and a 1500-token chunk after 2600 cached tokens, with streaming heads whose window is
// longer than a tile and selected heads without a selection.
void check_long_prefill(std::mt19937& rng, DType dt, const std::vector<PrefillVariant>& variants,
                        int32_t head_dim = 128) {
  ScenarioConfig cfg;
  cfg.head_dim = head_dim;
  cfg.group = 4;
  cfg.page_tokens = 64;
  cfg.modes = {HeadMode::kCausal, HeadMode::kStreaming, HeadMode::kSelected};
  cfg.num_sink_pages = 1;
  cfg.sink_tokens = 64;
  cfg.dtype = dt;
  std::vector<SeqSpec> seqs = {{.kv_len = 4100, .q_len = 4100, .local_tokens = 1000},
                               {.kv_len = 4100,
                                .q_len = 1500,
                                .local_tokens = 300,
                                .selected_row = 0,
                                .selected = {{}, {}, {1, 5, 9, 20}}}};
  AttentionScenario sc(rng, cfg, seqs);
  check_variants(sc, describe(cfg) + " long", variants);
}

TEST(CudaAttention, LongPrefillOnBothKernels) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(40);
  for (DType dt : {DType::kBF16, DType::kF16}) check_long_prefill(rng, dt, prefill_variants());
}

// Forcing the wgmma kernel on a head_dim it does not cover is an error, not a silent fallback.
TEST(CudaAttention, WgmmaPrefillRejectsOtherHeadDims) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(41);
  kernels::cuda::AttentionOptions o;
  o.prefill_kernel = kernels::cuda::PrefillKernel::kWgmma;
  ScopedAttentionOptions scoped(o);
  ScenarioConfig cfg;
  cfg.head_dim = 96;
  std::vector<SeqSpec> seqs = {{.kv_len = 40, .q_len = 40}};
  AttentionScenario sc(rng, cfg, seqs);
  (void)sc.run_gpu();
  EXPECT_FALSE(gpu()->take_error().ok());
}

// The decode kernel indexes pool rows in 32 bits, so a pool of more than 2^31 - 1 rows (blocks x
// heads per block x page tokens) is refused with a message before anything is launched; a
// prefill-only call over float pages, whose kernels use 64-bit offsets, is not. Host-side only
// (no GPU needed): the arrays are never read on this path.
TEST(CudaAttention, DecodeRefusesPoolsOfMoreThan2To31Rows) {
  alignas(16) static int32_t fake[64] = {};
  kernels::AttentionParams p;
  p.q = fake;
  p.out = fake;
  p.q_dtype = DType::kBF16;
  p.num_tokens = 1;
  p.num_q_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 128;
  p.num_seqs = 1;
  p.q_indptr = fake;
  p.kv_lens = fake;
  p.head_mode = fake;
  p.head_slot = fake;
  p.retrieval = {.k = fake,
                 .v = fake,
                 .dtype = DType::kBF16,
                 .num_blocks = 1 << 24,
                 .heads_per_block = 8,
                 .page_tokens = 16,
                 .head_dim = 128};  // 2^31 rows
  p.retrieval_blocks = fake;
  const Status big = kernels::cuda::paged_attention(p, nullptr, 0, 132, nullptr);
  EXPECT_FALSE(big.ok());
  EXPECT_NE(big.message().find("2^31"), std::string::npos) << big.message();
  p.retrieval.num_blocks = (1 << 24) - 1;  // one block fewer fits; the call then fails later (no
                                           // workspace), for another reason
  const Status fits = kernels::cuda::paged_attention(p, nullptr, 0, 132, nullptr);
  EXPECT_FALSE(fits.ok());
  EXPECT_EQ(fits.message().find("2^31"), std::string::npos) << fits.message();
  kernels::cuda::AttentionOptions prefill_only;
  prefill_only.prefill_only = true;
  p.retrieval.num_blocks = 1 << 24;
  const Status prefill = kernels::cuda::paged_attention(p, nullptr, 0, 132, nullptr, prefill_only);
  EXPECT_EQ(prefill.message().find("2^31"), std::string::npos) << prefill.message();
  // The ws kernel's quantized producer indexes rows in 32 bits too: quantized pools are checked
  // for prefill as well.
  p.retrieval.quant = kernels::KvQuant::kInt8;
  const Status quantized =
      kernels::cuda::paged_attention(p, nullptr, 0, 132, nullptr, prefill_only);
  EXPECT_FALSE(quantized.ok());
  EXPECT_NE(quantized.message().find("2^31"), std::string::npos) << quantized.message();
}

// Which pools the warp-specialised kernels' producer reads by TMA (one box = min(page_tokens, 64)
// rows of a head-page) and which it copies with cp.async. Host-side only.
TEST(CudaKvTmaMaps, BoxRowsFollowThePool) {
  using kernels::cuda::kv_tma_box_rows;
  alignas(16) static char mem[64];
  const kernels::PagedKvPool base{.k = mem,
                                  .v = mem,
                                  .dtype = DType::kBF16,
                                  .num_blocks = 10,
                                  .heads_per_block = 4,
                                  .page_tokens = 64,
                                  .head_dim = 128};
  EXPECT_EQ(kv_tma_box_rows(base), 64);
  auto with = [&](auto change) {
    kernels::PagedKvPool p = base;
    change(p);
    return kv_tma_box_rows(p);
  };
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 128; }), 64);
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 256; }), 64);
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 32; }), 32);
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 16; }), 16);
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 8; }), 8);
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 4; }), 0);    // boxes below one swizzle atom
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 48; }), 0);   // a block would straddle pages
  EXPECT_EQ(with([](auto& p) { p.page_tokens = 96; }), 0);
  EXPECT_EQ(with([](auto& p) { p.head_dim = 64; }), 64);
  EXPECT_EQ(with([](auto& p) { p.head_dim = 96; }), 0);
  EXPECT_EQ(with([](auto& p) { p.dtype = DType::kF16; }), 64);
  EXPECT_EQ(with([](auto& p) { p.dtype = DType::kF32; }), 0);
  EXPECT_EQ(with([](auto& p) {
              p.dtype = DType::kU8;
              p.quant = kernels::KvQuant::kFp8;
            }),
            0);
  EXPECT_EQ(with([](auto& p) { p.v = nullptr; }), 0);
  EXPECT_EQ(with([](auto& p) { p.k = mem + 8; }), 0);
  EXPECT_EQ(with([](auto& p) { p.num_blocks = 0; }), 0);
  EXPECT_EQ(with([](auto& p) { p.num_blocks = 1 << 23; }), 0);  // 2^31 rows
  EXPECT_EQ(with([](auto& p) { p.num_blocks = (1 << 23) - 1; }), 64);
  static const int32_t slot[1] = {0};
  // Tiered: the rows are the cache slots'.
  EXPECT_EQ(with([](auto& p) { p.page_slot = slot; }), 0);
  EXPECT_EQ(with([](auto& p) {
              p.page_slot = slot;
              p.num_cache_slots = 3;
            }),
            64);
}

// The experimental warp-specialised wgmma kernel (PrefillKernel::kWgmmaWs), in its own suite so
// that a fault there (its waits trap rather than hang) leaves the other suites' processes alone.
// Its K/V loaders: the default (TMA for spans of 128 key blocks or more where the pool allows,
// with cp.async for blocks that reach past the context: the test spans are shorter, so cp.async),
// TMA for every span, TMA from 8 blocks (so one launch mixes blocks of threads in both modes,
// and stages filled by either), and cp.async only.
std::vector<PrefillVariant> warp_specialized(kernels::cuda::AttentionOptions o = {}) {
  o.prefill_kernel = kernels::cuda::PrefillKernel::kWgmmaWs;
  kernels::cuda::AttentionOptions tma = o, mixed = o, cp_async = o;
  tma.prefill_tma_min_blocks = 0;
  mixed.prefill_tma_min_blocks = 8;
  cp_async.prefill_tma = false;
  return {{"wgmma-ws", o},
          {"wgmma-ws/tma", tma},
          {"wgmma-ws/tma from 8 blocks", mixed},
          {"wgmma-ws/cp.async", cp_async}};
}

TEST(CudaAttentionWarpSpecialized, PrefillAtTileAndBlockEdges) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(42);
  check_tile_and_block_edges(rng, warp_specialized());
}

// Mixed batches (prefill chunks over cached pages, decode tokens, streaming sinks and windows,
// selected heads) with and without the decode kernel serving the q_len 1 rows.
void check_mixed_batches(
    std::mt19937& rng,
    const std::function<std::vector<PrefillVariant>(kernels::cuda::AttentionOptions)>& variants,
    int32_t head_dim = 128) {
  for (bool prefill_only : {false, true}) {
    kernels::cuda::AttentionOptions base;
    base.prefill_only = prefill_only;
    ScenarioConfig cfg;
    cfg.head_dim = head_dim;
    cfg.group = 4;
    cfg.page_tokens = 16;
    cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal, HeadMode::kSelected};
    cfg.num_sink_pages = 2;
    cfg.sink_tokens = 20;
    cfg.dtype = DType::kF16;
    std::vector<SeqSpec> seqs = {{.kv_len = 900, .q_len = 900, .local_tokens = 100},
                                 {.kv_len = 77, .q_len = 1, .local_tokens = 64},
                                 {.kv_len = 1200, .q_len = 200, .local_tokens = 300},
                                 {.kv_len = 1000,
                                  .q_len = 3,
                                  .local_tokens = 64,
                                  .selected_row = 0,
                                  .selected = {{}, {}, {1, 5, 9}}}};
    AttentionScenario sc(rng, cfg, seqs);
    check_variants(sc, describe(cfg) + (prefill_only ? " mixed, prefill kernel only" : " mixed"),
                   variants(base));
  }
}

TEST(CudaAttentionWarpSpecialized, LongPrefillAndMixedBatches) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(43);
  check_long_prefill(rng, DType::kBF16, warp_specialized());
  check_mixed_batches(rng, warp_specialized);
}

// The ping-pong variant of the warp-specialised kernel (PrefillKernel::kWgmmaPingPong), head_dim
// 128 and 64, in its own suite for the same reason. 3 K/V stages exist at head_dim 128 only.
std::vector<PrefillVariant> ping_pong(kernels::cuda::AttentionOptions o = {},
                                      int32_t head_dim = 128) {
  using kernels::cuda::PrefillKernel;
  std::vector<PrefillVariant> v;
  for (int stages : {2, 3}) {
    if (stages == 3 && head_dim != 128) continue;
    o.wgmma_ws_stages = stages;
    o.prefill_kernel = PrefillKernel::kWgmmaPingPong;
    v.push_back({stages == 2 ? "wgmma-pp" : "wgmma-pp/3 stages", o});
  }
  o.wgmma_ws_stages = 2;
  o.prefill_kernel = PrefillKernel::kWgmmaPingPong;
  o.prefill_tma_min_blocks = 0;
  v.push_back({"wgmma-pp/tma", o});
  o.wgmma_ws_stages = 3;
  if (head_dim == 128) v.push_back({"wgmma-pp/3 stages/tma", o});
  o.wgmma_ws_stages = 2;
  o.prefill_tma = false;
  v.push_back({"wgmma-pp/cp.async", o});
  return v;
}
std::vector<PrefillVariant> ping_pong_d64(kernels::cuda::AttentionOptions o = {}) {
  return ping_pong(o, 64);
}

TEST(CudaAttentionPingPong, PrefillAtTileAndBlockEdges) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(44);
  check_tile_and_block_edges(rng, ping_pong());
  check_tile_and_block_edges(rng, ping_pong_d64(), 64);
}

TEST(CudaAttentionPingPong, LongPrefillAndMixedBatches) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(45);
  check_long_prefill(rng, DType::kBF16, ping_pong());
  check_long_prefill(rng, DType::kF16, ping_pong_d64(), 64);
  check_mixed_batches(rng, [](kernels::cuda::AttentionOptions o) { return ping_pong(o); });
  check_mixed_batches(rng, ping_pong_d64, 64);
}

TEST(CudaAttentionPingPong, RowsWithNoVisibleKeyAreZero) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(46);
  for (int32_t head_dim : {64, 128}) {
    ScenarioConfig cfg;
    cfg.head_dim = head_dim;
    cfg.group = 4;
    cfg.page_tokens = 16;
    cfg.modes = {HeadMode::kStreaming, HeadMode::kCausal};
    cfg.num_sink_pages = 0;
    cfg.sink_tokens = 0;
    // local 0 and no sinks: a streaming head sees nothing (its tiles have no key block, so the
    // ping-pong turns are only the first arrival and the drain).
    std::vector<SeqSpec> seqs = {{.kv_len = 100, .q_len = 100, .local_tokens = 0, .ring_pages = 8},
                                 {.kv_len = 50, .q_len = 1, .local_tokens = 0, .ring_pages = 4}};
    AttentionScenario sc(rng, cfg, seqs);
    check_variants(sc, "no visible key, d" + std::to_string(head_dim),
                   head_dim == 128 ? ping_pong() : ping_pong_d64());
  }
}

// Forcing the ping-pong kernels on a head_dim they do not cover, or 3 stages at head_dim 64, is
// an error.
TEST(CudaAttentionPingPong, RejectsOtherHeadDimsAndStages) {
  LS_REQUIRE_CUDA();
  std::mt19937 rng(47);
  for (const PrefillVariant& v : ping_pong()) {
    for (int32_t head_dim : {96, 64}) {
      if (head_dim == 64 && v.options.wgmma_ws_stages == 2) continue;  // covered
      ScopedAttentionOptions scoped(v.options);
      ScenarioConfig cfg;
      cfg.head_dim = head_dim;
      std::vector<SeqSpec> seqs = {{.kv_len = 40, .q_len = 40}};
      AttentionScenario sc(rng, cfg, seqs);
      (void)sc.run_gpu();
      EXPECT_FALSE(gpu()->take_error().ok()) << v.name << " d" << head_dim;
    }
  }
}

}  // namespace
}  // namespace ls::cuda_test
