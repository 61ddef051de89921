// --load-format dummy (model/dummy_weights.h) on the CPU: a rank's generated slice is the
// corresponding block of the generated full tensor (vocabulary slices zero-padded), values follow
// the generator's pure function of (seed, name, full index), dummy TP = 2 and 4 logits equal
// dummy TP = 1 from a directory holding only config.json, the same seed gives the same logits
// and another seed other ones, and a bad --load-format is refused. The generation threads write
// every byte of memory that is not zeroed first; a thread that cannot be started is an error; the
// prefix cache's seed tells the load format and dummy seed apart.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/architecture.h"
#include "model/dummy_weights.h"
#include "model/model_stack.h"
#include "model/tensor_parallel.h"
#include "tensor_parallel_compare.h"
#include "../io/io_test_util.h"

namespace ls {
namespace {

using io_test::TempDir;

// A model directory with the fixture's config.json and nothing else: dummy weights read no tensor.
std::filesystem::path config_only(const TempDir& dir, const std::string& model) {
  const std::filesystem::path out = dir.path() / model;
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(model_fixture_dir(model) / "config.json", out / "config.json");
  return out;
}

// bf16 values of a tensor as f32.
std::vector<float> values(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, static_cast<const uint8_t*>(t.data) + 2 * i, 2);
    v[i] = bf16_to_f32(bits);
  }
  return v;
}

TEST(DummyWeights, RankSlicesAreBlocksOfTheFullTensor) {
  for (const std::string model : {"llama3", "qwen2"}) {  // qwen2: q/k/v biases
    auto config = load_model_config(model_fixture_dir(model));
    ASSERT_TRUE(config.ok());
    const ArchitectureSpec* arch = find_architecture(config->architecture());
    ASSERT_NE(arch, nullptr);
    auto one = make_tp_layout(*config, 1);
    ASSERT_TRUE(one.ok());
    auto full = dummy_checkpoint(*config, *arch, *one, 0, 5);
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    // Values are the generator's, element by element of the full tensor; norms are exactly 1.
    const TensorInfo* q = full->find("model.layers.1.self_attn.q_proj.weight");
    ASSERT_NE(q, nullptr);
    const std::vector<float> qv = values(*q);
    for (const int64_t i : {int64_t{0}, int64_t{17}, q->numel() - 1}) {
      EXPECT_EQ(qv[static_cast<size_t>(i)],
                bf16_to_f32(f32_to_bf16(dummy_weight_value(5, q->name, q->shape[0], q->shape[1], i))));
    }
    const TensorInfo* norm = full->find("model.layers.0.input_layernorm.weight");
    for (const float v : values(*norm)) EXPECT_EQ(v, 1.0f);
    // Not degenerate: q/k std 2 / sqrt(hidden), every value distinct enough.
    double sq = 0;
    for (const float v : qv) sq += static_cast<double>(v) * v;
    const double std_q = std::sqrt(sq / static_cast<double>(qv.size()));
    const double want = 2.0 / std::sqrt(static_cast<double>(config->hidden_size()));
    EXPECT_NEAR(std_q, want, 0.1 * want);

    for (const int32_t tp : {2, 4}) {
      auto layout = make_tp_layout(*config, tp);
      ASSERT_TRUE(layout.ok());
      auto sharded = shard_checkpoint(*full, *config, *layout, 0, Fp8Shard::kE4m3Rows);
      ASSERT_TRUE(sharded.ok());
      for (int32_t r = 0; r < tp; ++r) {
        // The generated slice equals the slicer's cut of the generated full checkpoint, tensor by
        // tensor (rows, columns, replicated kv heads, zero vocabulary padding, row-parallel
        // biases on rank 0 only).
        auto cut = shard_checkpoint(*full, *config, *layout, r, Fp8Shard::kE4m3Rows);
        ASSERT_TRUE(cut.ok()) << cut.status().to_string();
        auto gen = dummy_checkpoint(*config, *arch, *layout, r, 5);
        ASSERT_TRUE(gen.ok()) << gen.status().to_string();
        ASSERT_EQ(gen->names(), cut->names()) << model;
        for (const std::string& name : cut->names()) {
          const TensorInfo* a = cut->find(name);
          const TensorInfo* b = gen->find(name);
          ASSERT_EQ(a->shape, b->shape) << name;
          ASSERT_EQ(a->nbytes, b->nbytes) << name;
          EXPECT_EQ(std::memcmp(a->data, b->data, static_cast<size_t>(a->nbytes)), 0)
              << model << " TP=" << tp << " rank " << r << " " << name;
        }
      }
    }
  }
}

ModelStackOptions options(const std::filesystem::path& dir, int32_t tp, uint64_t seed) {
  ModelStackOptions o;
  o.model_dir = dir;
  o.load_format = "dummy";
  o.dummy_seed = seed;
  o.num_threads = 1;
  o.max_num_seqs = 2;
  o.max_step_tokens = 128;
  o.max_logit_rows = 128;
  o.max_model_len = 512;
  o.attention.policy = "dense";
  o.kv_cache_dtype = KvCacheDtype::kF32;
  o.tensor_parallel_size = tp;
  return o;
}

TEST(DummyWeights, TensorParallelLogitsEqualOneRank) {
  TempDir tmp;
  for (const std::string model : {"llama3", "qwen2"}) {
    const std::filesystem::path dir = config_only(tmp, model);
    auto one = build_model_stack(options(dir, 1, 3));
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    for (const int32_t tp : {2, 4}) {
      auto many = build_model_stack(options(dir, tp, 3));
      ASSERT_TRUE(many.ok()) << many.status().to_string();
      const TpComparison cmp = compare_tp_runs(**one, **many, /*margin_scale=*/1e-3);
      EXPECT_EQ(cmp.decoded, 80);
      EXPECT_GT(cmp.greedy_checked, 60) << model << " TP=" << tp;
      EXPECT_LT(cmp.worst_relative, 1e-4) << model << " TP=" << tp;
      // Rebuild one rank for the next comparison (its KV holds this run's sequences).
      one = build_model_stack(options(dir, 1, 3));
      ASSERT_TRUE(one.ok());
    }
  }
}

// The logits of one prefill of 48 tokens.
std::vector<float> prefill_logits(const ModelStackOptions& o) {
  auto s = build_model_stack(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  ModelStack& st = **s;
  auto slot = st.kv->add_sequence();
  EXPECT_TRUE(slot.ok());
  EXPECT_TRUE(st.kv->grow(*slot, 48).ok());
  StepInput in;
  for (int32_t t = 0; t < 48; ++t) in.tokens.push_back((t * 37) % 300);
  in.logit_rows = {47};
  in.seqs.push_back({*slot, 48, 48, true});
  std::vector<float> logits;
  const Status r = st.executor().forward(in, logits);
  EXPECT_TRUE(r.ok()) << r.to_string();
  return logits;
}

TEST(DummyWeights, SameSeedSameLogitsAnotherSeedOthers) {
  TempDir tmp;
  const std::filesystem::path dir = config_only(tmp, "llama3");
  const std::vector<float> a = prefill_logits(options(dir, 1, 11));
  const std::vector<float> b = prefill_logits(options(dir, 1, 11));
  const std::vector<float> c = prefill_logits(options(dir, 1, 12));
  ASSERT_EQ(a.size(), 320u);
  EXPECT_TRUE(a == b);
  ASSERT_EQ(c.size(), a.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::fabs(a[i] - c[i]) > 1e-3f ? 1 : 0;
  EXPECT_GT(differ, a.size() / 2);
  // Finite and spread: logits of a few units (lm_head std 4 / sqrt(hidden) on unit-RMS states).
  const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
  EXPECT_TRUE(std::isfinite(*lo) && std::isfinite(*hi));
  EXPECT_GT(*hi - *lo, 1.0f);
  // The real checkpoint in the fixture's directory gives other logits: nothing was read.
  ModelStackOptions real = options(model_fixture_dir("llama3"), 1, 11);
  real.load_format = "auto";
  const std::vector<float> r = prefill_logits(real);
  ASSERT_EQ(r.size(), a.size());
  EXPECT_FALSE(r == a);
}

TEST(DummyWeights, RefusesABadLoadFormat) {
  EngineConfig c;
  c.model_dir = model_fixture_dir("llama3");
  c.load_format = "dummy";
  EXPECT_TRUE(c.validate().ok());
  c.load_format = "random";
  const Status v = c.validate();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("--load-format must be auto or dummy (got 'random')"),
            std::string::npos)
      << v.message();
  ModelStackOptions o = options(model_fixture_dir("llama3"), 1, 0);
  o.load_format = "pt";
  auto s = build_model_stack(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--load-format must be auto or dummy"), std::string::npos)
      << s.status().message();
  // A directory without config.json is still refused with the loader's message.
  TempDir empty;
  auto none = build_model_stack(options(empty.path(), 1, 0));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("config.json"), std::string::npos)
      << none.status().message();
}

// The checkpoint's memory is not zeroed before the generation threads fill it: every element of
// every tensor must be the generator's value (norms 1; at TP = 4 the zero vocabulary padding and
// the zero row-parallel biases of ranks other than 0). The heap is dirtied with a non-zero pattern
// of the same size first, so a byte no thread wrote would most likely show.
TEST(DummyWeights, EveryByteIsWrittenWithoutAZeroFill) {
  for (const std::string model : {"llama3", "qwen2"}) {
    auto config = load_model_config(model_fixture_dir(model));
    ASSERT_TRUE(config.ok());
    const ArchitectureSpec* arch = find_architecture(config->architecture());
    ASSERT_NE(arch, nullptr);
    for (const int32_t tp : {1, 4}) {
      auto layout = make_tp_layout(*config, tp);
      ASSERT_TRUE(layout.ok());
      const int32_t rank = tp - 1;  // the last rank holds the vocabulary padding
      int64_t bytes = 0;
      {
        auto probe = dummy_checkpoint(*config, *arch, *layout, rank, 9);
        ASSERT_TRUE(probe.ok());
        for (const std::string& name : probe->names()) bytes += probe->find(name)->nbytes;
      }
      {
        std::vector<uint8_t> dirt(static_cast<size_t>(bytes) + 4096, 0xA5);
        volatile uint8_t sink = dirt[dirt.size() / 2];
        (void)sink;
      }
      auto ck = dummy_checkpoint(*config, *arch, *layout, rank, 9);
      ASSERT_TRUE(ck.ok()) << ck.status().to_string();
      auto full_ck = tp == 1 ? std::move(ck) : dummy_checkpoint(*config, *arch, *make_tp_layout(*config, 1), 0, 9);
      ASSERT_TRUE(full_ck.ok());
      if (tp == 1) {
        // Every element against the generator, from the full shapes.
        for (const std::string& name : full_ck->names()) {
          const TensorInfo* t = full_ck->find(name);
          const int64_t rows = t->shape[0], cols = t->shape.size() > 1 ? t->shape[1] : 1;
          const std::vector<float> v = values(*t);
          int64_t wrong = 0;
          for (int64_t i = 0; i < t->numel(); ++i) {
            const float want = bf16_to_f32(f32_to_bf16(dummy_weight_value(9, name, rows, cols, i)));
            wrong += v[static_cast<size_t>(i)] != want ? 1 : 0;
          }
          EXPECT_EQ(wrong, 0) << model << " " << name;
        }
      } else {
        // The last rank: the slicer's cut of the full tensor, byte for byte (padding rows and
        // rank-0-only biases zero).
        auto cut = shard_checkpoint(*full_ck, *config, *layout, rank, Fp8Shard::kE4m3Rows);
        ASSERT_TRUE(cut.ok()) << cut.status().to_string();
        // ck (generated into the dirtied memory above), not a fresh generation: the last
        // rank's padding rows and zero biases are what could be left unwritten.
        for (const std::string& name : cut->names()) {
          const TensorInfo* a = cut->find(name);
          const TensorInfo* b = ck->find(name);
          ASSERT_NE(b, nullptr) << name;
          ASSERT_EQ(a->nbytes, b->nbytes) << name;
          EXPECT_EQ(std::memcmp(a->data, b->data, static_cast<size_t>(a->nbytes)), 0)
              << model << " rank " << rank << " " << name;
        }
      }
    }
  }
}

// A generation thread that cannot be started is an error naming it, not std::terminate: the
// threads already running finish first, and no work of a thread not started runs.
TEST(DummyWeights, AThreadThatCannotStartIsAnError) {
  std::mutex mu;
  std::set<unsigned> ran;
  auto work = [&](unsigned t) {
    std::lock_guard<std::mutex> lock(mu);
    ran.insert(t);
  };
  const Status all = run_on_threads(4, work);
  ASSERT_TRUE(all.ok()) << all.to_string();
  EXPECT_EQ(ran, (std::set<unsigned>{0, 1, 2, 3}));
  ran.clear();
  unsigned made = 0;
  ThreadSpawner failing = [&made](std::function<void()> job) {
    if (++made == 2) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "pthread_create");
    }
    return std::thread(std::move(job));
  };
  const Status s = run_on_threads(4, work, failing);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cannot start thread 2 of 4"), std::string::npos) << s.message();
  EXPECT_EQ(ran, (std::set<unsigned>{1}));
}

// The prefix cache's seed names how the weights were made: the checkpoint (auto) and dummy
// weights, or dummy weights of two seeds, never share cached pages; the seed is ignored when the
// weights are read.
TEST(DummyWeights, PrefixCacheSeedTellsLoadFormatAndSeedApart) {
  EngineConfig c;
  c.model_dir = model_fixture_dir("llama3");
  const KvGeometry g;
  const PrefixKey auto_seed = prefix_cache_seed(c, g);
  c.dummy_seed = 7;
  EXPECT_EQ(prefix_cache_seed(c, g), auto_seed);  // read from the checkpoint: no seed
  c.load_format = "dummy";
  const PrefixKey dummy7 = prefix_cache_seed(c, g);
  EXPECT_FALSE(dummy7 == auto_seed);
  c.dummy_seed = 8;
  const PrefixKey dummy8 = prefix_cache_seed(c, g);
  EXPECT_FALSE(dummy8 == dummy7);
  c.dummy_seed = 7;
  EXPECT_EQ(prefix_cache_seed(c, g), dummy7);
}

}  // namespace
}  // namespace ls
