// Tensor parallelism on the CPU (docs/tensor-parallel.md): the layout's divisibility rules, the
// weight slicing (the ranks' slices put back together are the checkpoint; replicated kv heads;
// row-parallel biases on rank 0 only), and TP = 2 and 4 against TP = 1 on the four fixture
// families, every policy (dense, streaming, quest, lserve): logits equal within reduction-order
// tolerance and greedy tokens equal, over a chunked prefill, two sequences and decode steps. The
// CPU communicator sums in f32 in rank order, so TP runs are also bit-identical to themselves
// across runs. FP8 checkpoints: slices of the per-row e4m3 form and of the exact dequantization
// reassembled bit for bit, every rank's shard loadable (an FP8 lm_head's padding rows too), and
// the logits test above over the four FP8 fixtures; GGUF models (dequantized per rank) at TP = 2.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_communicator.h"
#include "core/dtype.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "io/checkpoint.h"
#include "io/fp8_format.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kv/kv_geometry.h"
#include "model/architecture.h"
#include "model/fp8_weights.h"
#include "model/model_stack.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "tensor_parallel_compare.h"

namespace ls {
namespace {

ModelConfig config_of(const std::string& json) {
  auto c = parse_model_config(json, "test config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

std::string llama_json(int heads, int kv_heads, int inter) {
  return fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": {},
          "num_hidden_layers": 2, "num_attention_heads": {}, "num_key_value_heads": {},
          "head_dim": 16, "vocab_size": 32, "max_position_embeddings": 128,
          "rms_norm_eps": 1e-5}})",
      inter, heads, kv_heads);
}

TEST(TensorParallelLayout, SplitsAndReplicates) {
  const ModelConfig c = config_of(llama_json(8, 2, 96));
  auto l2 = make_tp_layout(c, 2);
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(l2->q_heads_per_rank, 4);
  EXPECT_EQ(l2->kv_heads_per_rank, 1);
  EXPECT_EQ(l2->kv_replicas, 1);
  EXPECT_EQ(l2->inter_per_rank, 48);
  EXPECT_EQ(l2->kv_heads_of(1), (std::vector<int32_t>{1, 1}));  // kv head 1 in both layers
  // 2 kv heads over 8 ranks: each kv head on 4 ranks, whose q heads (1 each) are its group.
  auto l8 = make_tp_layout(c, 8);
  ASSERT_TRUE(l8.ok());
  EXPECT_EQ(l8->q_heads_per_rank, 1);
  EXPECT_EQ(l8->kv_heads_per_rank, 1);
  EXPECT_EQ(l8->kv_replicas, 4);
  for (int32_t r = 0; r < 8; ++r) {
    // q head r belongs to kv group r / (8 / 2) by the GQA rule of the whole model.
    EXPECT_EQ(l8->kv_head(0, r, 0), l8->q_head(0, r, 0) / (8 / 2)) << r;
  }
  const ModelConfig shard = shard_config(c, *l8, 0, Fp8Shard::kE4m3Rows);
  EXPECT_EQ(shard.num_attention_heads(), 1);
  EXPECT_EQ(shard.num_key_value_heads(), 1);
  EXPECT_EQ(shard.intermediate_size(), 12);
  EXPECT_EQ(shard.head_dim(), 16);
  EXPECT_EQ(shard.hidden_size(), 64);
}

TEST(TensorParallelLayout, BalancesRetrievalHeadsPerLayer) {
  ModelConfig c = config_of(llama_json(16, 8, 96));
  auto l = make_tp_layout(c, 4);  // 2 kv heads per rank, 2 layers
  ASSERT_TRUE(l.ok());
  // Layer 0: the last 4 kv heads stream (the default pattern's shape); layer 1: only heads 6, 7
  // retrieve.
  std::vector<bool> streaming = {false, false, false, false, true, true, true, true,
                                 true,  true,  true,  true,  true, true, false, false};
  l->balance_roles(streaming);
  ASSERT_EQ(l->kv_order.size(), 16u);
  std::vector<int> total(4, 0);
  for (int64_t layer = 0; layer < 2; ++layer) {
    std::vector<int> per_rank(4, 0);
    std::vector<bool> seen(8, false);
    for (int32_t r = 0; r < 4; ++r) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t h = l->kv_head(layer, r, j);
        ASSERT_FALSE(seen[static_cast<size_t>(h)]);
        seen[static_cast<size_t>(h)] = true;
        if (!streaming[static_cast<size_t>(layer * 8 + h)]) ++per_rank[static_cast<size_t>(r)];
        // The rank's q heads are its kv heads' groups.
        EXPECT_EQ(l->q_head(layer, r, 2 * j), 2 * h);
        EXPECT_EQ(l->q_head(layer, r, 2 * j + 1), 2 * h + 1);
      }
    }
    const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
    EXPECT_LE(*hi - *lo, 1) << "layer " << layer;
    for (int r = 0; r < 4; ++r) total[static_cast<size_t>(r)] += per_rank[static_cast<size_t>(r)];
  }
  const auto [lo, hi] = std::minmax_element(total.begin(), total.end());
  EXPECT_LE(*hi - *lo, 1);
  // Without balancing, ranks 2 and 3 would hold no retrieval head of layer 0.
  auto plain = make_tp_layout(c, 4);
  EXPECT_EQ(plain->kv_head(0, 3, 0), 6);

  // A layout of one role everywhere stays the default.
  l->balance_roles(std::vector<bool>(16, false));
  EXPECT_TRUE(l->kv_order.empty());
  // An order that is not a permutation is refused.
  TpShard bad{0, 4, std::vector<int32_t>(16, 0)};
  EXPECT_FALSE(make_tp_layout(c, bad).ok());
}

TEST(TensorParallelLayout, RefusesUnevenSplitsNamingTheSizes) {
  auto bad_size = make_tp_layout(config_of(llama_json(8, 2, 96)), 3);
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.status().message().find("1, 2, 4 or 8"), std::string::npos);
  auto heads = make_tp_layout(config_of(llama_json(4, 2, 96)), 8);
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.status().message().find("4 attention heads"), std::string::npos)
      << heads.status().message();
  auto kv = make_tp_layout(config_of(llama_json(12, 3, 96)), 4);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("3 kv heads"), std::string::npos) << kv.status().message();
  auto inter = make_tp_layout(config_of(llama_json(8, 8, 90)), 4);
  ASSERT_FALSE(inter.ok());
  EXPECT_NE(inter.status().message().find("MLP width 90"), std::string::npos)
      << inter.status().message();
}

// [rows, cols] bytes of a tensor.
std::vector<uint8_t> bytes_of(const TensorInfo& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.nbytes);
}

// Rank slices put back together (rows concatenated, or columns side by side) give the full tensor.
void expect_reassembles(const std::vector<Checkpoint>& shards, const Checkpoint& full,
                        const std::string& name, bool by_columns) {
  const TensorInfo* f = full.find(name);
  ASSERT_NE(f, nullptr) << name;
  const int64_t es = f->nbytes / f->numel();
  const int64_t rows = f->shape[0];
  const int64_t cols = f->shape.size() > 1 ? f->shape[1] : 1;
  std::vector<uint8_t> joined(static_cast<size_t>(f->nbytes));
  int64_t at = 0;  // rows or columns placed so far
  for (const Checkpoint& s : shards) {
    const TensorInfo* t = s.find(name);
    ASSERT_NE(t, nullptr) << name;
    const std::vector<uint8_t> b = bytes_of(*t);
    if (!by_columns) {
      std::memcpy(joined.data() + at * cols * es, b.data(), b.size());
      at += t->shape[0];
    } else {
      const int64_t c = t->shape[1];
      ASSERT_EQ(t->shape[0], rows);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(joined.data() + (r * cols + at) * es, b.data() + r * c * es,
                    static_cast<size_t>(c * es));
      }
      at += c;
    }
  }
  EXPECT_EQ(at, by_columns ? cols : rows) << name;
  EXPECT_TRUE(joined == bytes_of(*f)) << name << " does not reassemble";
}

TEST(TensorParallelSlicing, SlicesReassembleToTheCheckpoint) {
  for (const std::string model : {"llama3", "qwen2", "qwen3"}) {
    auto full = Checkpoint::open(model_fixture_dir(model));
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    auto config = load_model_config(model_fixture_dir(model));
    ASSERT_TRUE(config.ok());
    auto layout = make_tp_layout(*config, 2);
    ASSERT_TRUE(layout.ok());
    std::vector<Checkpoint> shards;
    for (int32_t r = 0; r < 2; ++r) {
      auto s = shard_checkpoint(*full, *config, *layout, r, Fp8Shard::kE4m3Rows);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      EXPECT_EQ(s->names(), full->names());
      shards.push_back(std::move(*s));
    }
    for (int l = 0; l < config->num_hidden_layers(); ++l) {
      auto n = [&](const char* s) { return fmt::format("model.layers.{}.{}", l, s); };
      for (const char* rows : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                               "self_attn.v_proj.weight", "mlp.gate_proj.weight",
                               "mlp.up_proj.weight"}) {
        expect_reassembles(shards, *full, n(rows), false);
      }
      expect_reassembles(shards, *full, n("self_attn.o_proj.weight"), true);
      expect_reassembles(shards, *full, n("mlp.down_proj.weight"), true);
      if (model == "qwen2") {  // q/k/v biases go with their rows
        for (const char* b : {"self_attn.q_proj.bias", "self_attn.k_proj.bias",
                              "self_attn.v_proj.bias"}) {
          expect_reassembles(shards, *full, n(b), false);
        }
      }
      // Replicated: norms (and qwen3's per-head q/k norms, one vector every head shares).
      for (const Checkpoint& s : shards) {
        EXPECT_TRUE(bytes_of(*s.find(n("input_layernorm.weight"))) ==
                    bytes_of(*full->find(n("input_layernorm.weight"))));
        if (model == "qwen3") {
          EXPECT_TRUE(bytes_of(*s.find(n("self_attn.q_norm.weight"))) ==
                      bytes_of(*full->find(n("self_attn.q_norm.weight"))));
        }
      }
    }
    // Vocabulary-parallel: rank r holds rows [r S, (r + 1) S), zero rows past the vocabulary
    // (320 ids over 2 ranks: S = 160 rounded up to 192, so rank 1 holds 128 rows + 64 zeros).
    ASSERT_EQ(layout->vocab_per_rank, 192);
    for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
      const TensorInfo* f = full->find(name);
      if (f == nullptr) continue;  // tied (qwen2)
      const int64_t row_bytes = f->nbytes / f->shape[0];
      std::vector<uint8_t> joined;
      for (const Checkpoint& s : shards) {
        const TensorInfo* t = s.find(name);
        ASSERT_EQ(t->shape, (std::vector<int64_t>{192, f->shape[1]})) << name;
        const std::vector<uint8_t> b = bytes_of(*t);
        joined.insert(joined.end(), b.begin(), b.end());
      }
      ASSERT_EQ(static_cast<int64_t>(joined.size()), 384 * row_bytes);
      EXPECT_TRUE(std::vector<uint8_t>(joined.begin(), joined.begin() + f->nbytes) == bytes_of(*f))
          << name;
      EXPECT_TRUE(std::all_of(joined.begin() + f->nbytes, joined.end(),
                              [](uint8_t b) { return b == 0; }))
          << name << ": padding rows are not zero";
    }
  }
}

// Whether t's bytes lie inside f's.
bool points_into(const TensorInfo& t, const TensorInfo& f) {
  const auto* b = static_cast<const uint8_t*>(f.data);
  const auto* p = static_cast<const uint8_t*>(t.data);
  return p >= b && p + t.nbytes <= b + f.nbytes;
}

// A rank's slice that is one span of its tensor is read where the checkpoint holds it (no host
// copy of most of the model per rank); column slices, rows gathered from several places and
// zero-padded vocabulary rows are copies.
TEST(TensorParallelSlicing, OneSpanSlicesAreViewsOfTheCheckpoint) {
  auto full = Checkpoint::open(model_fixture_dir("llama3"));
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  auto config = load_model_config(model_fixture_dir("llama3"));
  ASSERT_TRUE(config.ok());
  auto layout = make_tp_layout(*config, 2);
  ASSERT_TRUE(layout.ok());
  for (int32_t r = 0; r < 2; ++r) {
    auto s = shard_checkpoint(*full, *config, *layout, r, Fp8Shard::kE4m3Rows);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto at = [&](const std::string& name) {
      const TensorInfo* t = s->find(name);
      const TensorInfo* f = full->find(name);
      EXPECT_TRUE(t != nullptr && f != nullptr) << name;
      return t != nullptr && f != nullptr && points_into(*t, *f);
    };
    for (const char* v : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                          "input_layernorm.weight"}) {
      EXPECT_TRUE(at(fmt::format("model.layers.0.{}", v))) << v << " rank " << r;
    }
    EXPECT_TRUE(at("model.norm.weight"));
    for (const char* c : {"self_attn.o_proj.weight", "mlp.down_proj.weight"}) {
      EXPECT_FALSE(at(fmt::format("model.layers.0.{}", c))) << c << " rank " << r;
    }
    // 320 ids in slices of 192: rank 0's rows are all in the table, rank 1's end in padding.
    EXPECT_EQ(at("model.embed_tokens.weight"), r == 0) << "rank " << r;
  }
}

// The FP8 fixtures of scripts/fixtures/make_fp8_fixtures.py (the mistral fixture quantized with
// channel, tensor and block scales), tests/fixtures/fp8/mistral-VARIANT.
std::filesystem::path fp8_fixture_dir(const std::string& variant) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/fp8" /
         ("mistral-" + variant);
}

const char* const kFp8Variants[] = {"channel", "tensor", "block", "block-24x48"};

std::vector<uint8_t> bytes_of_floats(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// An FP8 checkpoint's ranks hold slices of the weights in the form TP = 1 loads them
// (Fp8Shard): the per-row e4m3 codes and scales read_fp8_rows gives (what CUDA computes with;
// the [24, 48] blocks do not line up with the 16-row heads or the 80-column MLP halves), or the
// exact dequantization (the CPU). Put back together, the slices are that form bit for bit.
TEST(TensorParallelSlicing, Fp8CheckpointsSliceTheOneRankForm) {
  const char* const linears[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                 "self_attn.v_proj.weight", "mlp.gate_proj.weight",
                                 "mlp.up_proj.weight",      "self_attn.o_proj.weight",
                                 "mlp.down_proj.weight"};
  for (const std::string variant : kFp8Variants) {
    SCOPED_TRACE(variant);
    const std::filesystem::path dir = fp8_fixture_dir(variant);
    auto full = Checkpoint::open(dir);
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    auto config = load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    ASSERT_TRUE(config->fp8_weights().has_value());
    const Fp8CheckpointFormat& format = *config->fp8_weights();
    auto one = make_tp_layout(*config, 1);
    auto two = make_tp_layout(*config, 2);
    ASSERT_TRUE(one.ok() && two.ok());
    for (const Fp8Shard mode : {Fp8Shard::kE4m3Rows, Fp8Shard::kDequantize}) {
      const bool e4m3 = mode == Fp8Shard::kE4m3Rows;
      SCOPED_TRACE(e4m3 ? "e4m3 rows" : "dequantized");
      // TP = 1's form, checked against the readers the loader uses.
      auto whole = shard_checkpoint(*full, *config, *one, 0, mode);
      ASSERT_TRUE(whole.ok()) << whole.status().to_string();
      std::vector<Checkpoint> shards;
      for (int32_t r = 0; r < 2; ++r) {
        auto s = shard_checkpoint(*full, *config, *two, r, mode);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        EXPECT_EQ(s->names(), whole->names());
        shards.push_back(std::move(*s));
        const ModelConfig sc = shard_config(*config, *two, r, mode);
        ASSERT_EQ(sc.fp8_weights().has_value(), e4m3);
        if (e4m3) {
          EXPECT_EQ(sc.fp8_weights()->layout, Fp8ScaleLayout::kChannel);
        }
      }
      for (int l = 0; l < config->num_hidden_layers(); ++l) {
        for (const char* s : linears) {
          const std::string name = fmt::format("model.layers.{}.{}", l, s);
          const TensorInfo* src = full->find(name);
          ASSERT_NE(src, nullptr) << name;
          ASSERT_EQ(src->file_dtype, SafetensorsDType::kF8E4M3) << name;
          const int64_t rows = src->shape[0], cols = src->shape[1];
          const TensorInfo* w = whole->find(name);
          ASSERT_NE(w, nullptr) << name;
          const bool by_columns = std::string_view(s).starts_with("self_attn.o_proj") ||
                                  std::string_view(s).starts_with("mlp.down_proj");
          if (e4m3) {
            auto ref = read_fp8_rows(*full, format, name, rows, cols);
            ASSERT_TRUE(ref.ok()) << ref.status().to_string();
            EXPECT_EQ(w->file_dtype, SafetensorsDType::kF8E4M3) << name;
            EXPECT_TRUE(bytes_of(*w) == ref->codes) << name;
            const std::string scale = fp8_scale_name(format, name);
            const TensorInfo* ws = whole->find(scale);
            ASSERT_NE(ws, nullptr) << scale;
            EXPECT_EQ(ws->shape, (std::vector<int64_t>{rows, 1})) << scale;
            EXPECT_TRUE(bytes_of(*ws) == bytes_of_floats(ref->scales)) << scale;
            if (by_columns) {  // a row's scale covers the whole row: every rank keeps it
              for (const Checkpoint& sh : shards) {
                const TensorInfo* s = sh.find(scale);
                ASSERT_NE(s, nullptr) << scale;
                EXPECT_TRUE(bytes_of(*s) == bytes_of(*ws)) << scale;
              }
            } else {
              expect_reassembles(shards, *whole, scale, false);
            }
          } else {
            auto ref = read_fp8_dequantized(*full, format, name, rows, cols);
            ASSERT_TRUE(ref.ok()) << ref.status().to_string();
            EXPECT_EQ(w->file_dtype, SafetensorsDType::kF32) << name;
            EXPECT_TRUE(bytes_of(*w) == bytes_of_floats(*ref)) << name;
          }
          expect_reassembles(shards, *whole, name, by_columns);
        }
      }
    }
  }
}

// Each rank's e4m3 shard (per-row codes and channel scales, shard_config's format) is a
// checkpoint the ordinary loader accepts, at TP = 2 and at TP = 4 (the fixtures' 2 kv heads are
// then replicated); the CPU dequantizes it, CUDA keeps it (tests/cuda/tensor_parallel_test.cpp).
TEST(TensorParallelSlicing, Fp8RankShardsLoad) {
  CpuBackend backend(1);
  for (const std::string variant : kFp8Variants) {
    const std::filesystem::path dir = fp8_fixture_dir(variant);
    auto full = Checkpoint::open(dir);
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    auto config = load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    const ArchitectureSpec* arch = find_architecture(config->architecture());
    ASSERT_NE(arch, nullptr);
    for (const int32_t tp : {2, 4}) {
      auto layout = make_tp_layout(*config, tp);
      ASSERT_TRUE(layout.ok()) << layout.status().to_string();
      for (int32_t r = 0; r < tp; ++r) {
        auto s = shard_checkpoint(*full, *config, *layout, r, Fp8Shard::kE4m3Rows);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        const ModelConfig sc = shard_config(*config, *layout, r, Fp8Shard::kE4m3Rows);
        auto w = load_weights(*s, sc, *arch, backend, std::nullopt, Fp8Load::kAuto);
        ASSERT_TRUE(w.ok()) << variant << " TP=" << tp << " rank " << r << ": "
                            << w.status().to_string();
        EXPECT_EQ(w->layers[0].o.w.dim(1), layout->q_heads_per_rank * config->head_dim());
        EXPECT_EQ(w->layers[0].down.w.dim(1), layout->inter_per_rank);
      }
    }
  }
}

// A safetensors checkpoint in memory holding `tensors` (name, dtype as safetensors names it,
// shape, bytes), for variants of the fixtures no file holds.
struct MemTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

Checkpoint memory_checkpoint(const std::filesystem::path& dir, const std::vector<MemTensor>& ts) {
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const MemTensor& t : ts) {
    const auto n = static_cast<int64_t>(t.bytes.size());
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::vector<uint8_t> bytes(8 + h.size());
  const uint64_t len = h.size();
  std::memcpy(bytes.data(), &len, 8);
  std::memcpy(bytes.data() + 8, h.data(), h.size());
  for (const MemTensor& t : ts) bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
  auto file = SafetensorsFile::from_memory("test checkpoint", std::move(bytes));
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  return Checkpoint::from_file(dir, std::move(*file));
}

// The checkpoint in `dir` held in memory with some tensors changed: `change` appends the
// replacement of a tensor and returns true, or returns false to keep it as it is.
Checkpoint changed_checkpoint(
    const std::filesystem::path& dir,
    const std::function<bool(const TensorInfo&, std::vector<MemTensor>&)>& change) {
  auto src = Checkpoint::open(dir);
  EXPECT_TRUE(src.ok()) << src.status().to_string();
  std::vector<MemTensor> ts;
  for (const std::string& name : src->names()) {
    const TensorInfo* t = src->find(name);
    if (!change(*t, ts)) {
      ts.push_back({name, std::string(safetensors_dtype_name(t->file_dtype)), t->shape,
                    bytes_of(*t)});
    }
  }
  return memory_checkpoint(dir, ts);
}

// An FP8 lm_head (no fixture has one: their configs leave it out) is vocabulary-parallel like a
// float one: a rank holds its rows' codes and scales, and the padding rows past the vocabulary
// hold zero codes with a valid scale (1), so the shard loads.
TEST(TensorParallelSlicing, Fp8LmHeadIsVocabularyParallel) {
  const std::filesystem::path dir = fp8_fixture_dir("channel");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const Fp8CheckpointFormat& format = *config->fp8_weights();
  Fp8Rows head;
  const Checkpoint full = changed_checkpoint(dir, [&](const TensorInfo& t,
                                                      std::vector<MemTensor>& ts) {
    if (t.name != "lm_head.weight") return false;
    std::vector<float> w(static_cast<size_t>(t.numel()));
    convert_to_f32(*t.dtype, t.data, w.data(), t.numel());
    head = quantize_fp8_rows(w.data(), t.shape[0], t.shape[1]);
    ts.push_back({t.name, "F8_E4M3", t.shape, head.codes});
    ts.push_back({fp8_scale_name(format, t.name), "F32", {t.shape[0], 1},
                  bytes_of_floats(head.scales)});
    return true;
  });
  const int64_t vocab = config->vocab_size(), hidden = config->hidden_size();
  auto layout = make_tp_layout(*config, 2);
  ASSERT_TRUE(layout.ok());
  const int64_t per = layout->vocab_per_rank;
  ASSERT_LT(vocab, 2 * per);  // rank 1 holds padding rows
  const ArchitectureSpec* arch = find_architecture(config->architecture());
  ASSERT_NE(arch, nullptr);
  CpuBackend backend(1);
  for (int32_t r = 0; r < 2; ++r) {
    auto s = shard_checkpoint(full, *config, *layout, r, Fp8Shard::kE4m3Rows);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    const TensorInfo* codes = s->find("lm_head.weight");
    const TensorInfo* scales = s->find(fp8_scale_name(format, "lm_head.weight"));
    ASSERT_TRUE(codes != nullptr && scales != nullptr);
    ASSERT_EQ(codes->file_dtype, SafetensorsDType::kF8E4M3);
    ASSERT_EQ(codes->shape, (std::vector<int64_t>{per, hidden}));
    ASSERT_EQ(scales->shape, (std::vector<int64_t>{per, 1}));
    const std::vector<uint8_t> c = bytes_of(*codes);
    std::vector<float> sv(static_cast<size_t>(per));
    std::memcpy(sv.data(), scales->data, sv.size() * sizeof(float));
    for (int64_t i = 0; i < per; ++i) {
      const int64_t row = r * per + i;
      if (row < vocab) {
        EXPECT_EQ(sv[static_cast<size_t>(i)], head.scales[static_cast<size_t>(row)]) << row;
        EXPECT_TRUE(std::equal(c.begin() + i * hidden, c.begin() + (i + 1) * hidden,
                               head.codes.begin() + row * hidden))
            << row;
      } else {
        EXPECT_EQ(sv[static_cast<size_t>(i)], 1.0f) << row;
        EXPECT_TRUE(std::all_of(c.begin() + i * hidden, c.begin() + (i + 1) * hidden,
                                [](uint8_t b) { return b == 0; }))
            << row;
      }
    }
    const ModelConfig sc = shard_config(*config, *layout, r, Fp8Shard::kE4m3Rows);
    auto w = load_weights(*s, sc, *arch, backend, std::nullopt, Fp8Load::kAuto);
    EXPECT_TRUE(w.ok()) << "rank " << r << ": " << w.status().to_string();
  }
}

// A scale tensor beside a float weight (TP = 1 ignores it) does not travel into a rank's shard,
// in either form, so the shard loads wherever TP = 1 does.
TEST(TensorParallelSlicing, ScaleBesideAFloatWeightIsDropped) {
  const std::filesystem::path dir = fp8_fixture_dir("channel");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const Fp8CheckpointFormat& format = *config->fp8_weights();
  const std::string k = "model.layers.0.self_attn.k_proj.weight";
  auto src = Checkpoint::open(dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const Checkpoint full = changed_checkpoint(dir, [&](const TensorInfo& t,
                                                      std::vector<MemTensor>& ts) {
    if (t.name != k) return false;  // dequantized, its scale left in place
    auto w = read_fp8_dequantized(*src, format, t.name, t.shape[0], t.shape[1]);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    ts.push_back({t.name, "F32", t.shape, bytes_of_floats(w.ok() ? *w : std::vector<float>())});
    return true;
  });
  ASSERT_NE(full.find(fp8_scale_name(format, k)), nullptr);
  auto layout = make_tp_layout(*config, 2);
  ASSERT_TRUE(layout.ok());
  const ArchitectureSpec* arch = find_architecture(config->architecture());
  ASSERT_NE(arch, nullptr);
  CpuBackend backend(1);
  for (const Fp8Shard mode : {Fp8Shard::kE4m3Rows, Fp8Shard::kDequantize}) {
    auto s = shard_checkpoint(full, *config, *layout, 0, mode);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->find(fp8_scale_name(format, k)), nullptr);
    const ModelConfig sc = shard_config(*config, *layout, 0, mode);
    auto w = load_weights(*s, sc, *arch, backend, std::nullopt, Fp8Load::kAuto);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
  }
}

TEST(TensorParallelLayout, VocabularySlicesCoverTheVocabularyPadded) {
  // 32 ids: S = ceil(32 / N) rounded up to 64 rows, every id on exactly one rank.
  for (const auto& [vocab, size, slice] : {std::tuple{32, 2, 64}, std::tuple{128256, 4, 32064},
                                           std::tuple{128256, 8, 16064},
                                           std::tuple{151936, 8, 19008}, std::tuple{1000, 8, 128}}) {
    const ModelConfig c = config_of(fmt::format(
        R"({{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8,
            "vocab_size": {}, "max_position_embeddings": 128, "rms_norm_eps": 1e-5}})",
        vocab));
    auto l = make_tp_layout(c, size);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->vocab_per_rank, slice) << vocab << " / " << size;
    EXPECT_EQ(l->vocab_per_rank % kVocabAlign, 0);
    EXPECT_GE(l->vocab_per_rank * size, vocab);
    if (vocab > kVocabAlign * size) {  // a real vocabulary: no rank holds padding only
      EXPECT_LT(l->vocab_per_rank * (size - 1), vocab);
    }
    for (int32_t r = 0; r < size; ++r) {
      const ModelConfig s = shard_config(c, *l, r, Fp8Shard::kE4m3Rows);
      EXPECT_EQ(s.vocab_size(), slice);
      EXPECT_EQ(s.vocab_slice().begin, r * slice);
      EXPECT_EQ(s.vocab_slice().parts, size);
      EXPECT_EQ(s.full_vocab_size(), vocab);
    }
  }
  // One rank keeps the whole vocabulary.
  auto one = make_tp_layout(config_of(llama_json(8, 2, 96)), 1);
  ASSERT_TRUE(one.ok());
  const ModelConfig whole = shard_config(config_of(llama_json(8, 2, 96)), *one, 0, Fp8Shard::kE4m3Rows);
  EXPECT_EQ(whole.vocab_size(), 32);
  EXPECT_EQ(whole.vocab_slice().parts, 1);
  EXPECT_EQ(whole.full_vocab_size(), 32);
}

TEST(TensorParallelSlicing, ReplicatesKvHeadsBeyondTheirCount) {
  auto full = Checkpoint::open(model_fixture_dir("llama3"));  // 4 q heads, 2 kv heads, head_dim 16
  ASSERT_TRUE(full.ok());
  auto config = load_model_config(model_fixture_dir("llama3"));
  ASSERT_TRUE(config.ok());
  auto layout = make_tp_layout(*config, 4);
  ASSERT_TRUE(layout.ok());
  const TensorInfo* k = full->find("model.layers.0.self_attn.k_proj.weight");
  const TensorInfo* q = full->find("model.layers.0.self_attn.q_proj.weight");
  const int64_t head_bytes = k->nbytes / 2;  // one kv head's 16 rows
  for (int32_t r = 0; r < 4; ++r) {
    auto s = shard_checkpoint(*full, *config, *layout, r, Fp8Shard::kE4m3Rows);
    ASSERT_TRUE(s.ok());
    const TensorInfo* sk = s->find("model.layers.0.self_attn.k_proj.weight");
    const TensorInfo* sq = s->find("model.layers.0.self_attn.q_proj.weight");
    ASSERT_EQ(sk->shape, (std::vector<int64_t>{16, 64}));
    ASSERT_EQ(sq->shape, (std::vector<int64_t>{16, 64}));
    // Ranks 0, 1 hold kv head 0 (q heads 0, 1); ranks 2, 3 hold kv head 1 (q heads 2, 3).
    EXPECT_EQ(std::memcmp(sk->data, static_cast<const uint8_t*>(k->data) + (r / 2) * head_bytes,
                          static_cast<size_t>(head_bytes)),
              0)
        << r;
    EXPECT_EQ(std::memcmp(sq->data, static_cast<const uint8_t*>(q->data) + r * sq->nbytes,
                          static_cast<size_t>(sq->nbytes)),
              0)
        << r;
  }
}

TEST(TensorParallelSlicing, FollowsABalancedLayoutLayerByLayer) {
  auto full = Checkpoint::open(model_fixture_dir("llama3"));  // 4 q heads, 2 kv heads, head_dim 16
  ASSERT_TRUE(full.ok());
  auto config = load_model_config(model_fixture_dir("llama3"));
  ASSERT_TRUE(config.ok());
  // Layer 0: rank 0 owns kv head 1 (q heads 2, 3); layer 1: kv head 0 (q heads 0, 1).
  auto layout = make_tp_layout(*config, TpShard{0, 2, {1, 0, 0, 1}});
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  auto s = shard_checkpoint(*full, *config, *layout, 0, Fp8Shard::kE4m3Rows);
  ASSERT_TRUE(s.ok());
  for (int layer = 0; layer < 2; ++layer) {
    const int64_t kv = layer == 0 ? 1 : 0;
    auto n = [&](const char* t) { return fmt::format("model.layers.{}.{}", layer, t); };
    const TensorInfo* q = full->find(n("self_attn.q_proj.weight"));
    const TensorInfo* k = full->find(n("self_attn.k_proj.weight"));
    const TensorInfo* o = full->find(n("self_attn.o_proj.weight"));
    const int64_t es = dtype_size(*q->dtype);
    const auto* qf = static_cast<const uint8_t*>(q->data);
    const auto* kf = static_cast<const uint8_t*>(k->data);
    const auto* of = static_cast<const uint8_t*>(o->data);
    const TensorInfo* sq = s->find(n("self_attn.q_proj.weight"));
    const TensorInfo* sk = s->find(n("self_attn.k_proj.weight"));
    const TensorInfo* so = s->find(n("self_attn.o_proj.weight"));
    ASSERT_EQ(sq->shape, (std::vector<int64_t>{32, 64}));
    ASSERT_EQ(so->shape, (std::vector<int64_t>{64, 32}));
    // q rows of heads 2kv, 2kv + 1 (contiguous), k rows of head kv.
    EXPECT_EQ(std::memcmp(sq->data, qf + kv * 32 * 64 * es, 32 * 64 * es), 0) << layer;
    EXPECT_EQ(std::memcmp(sk->data, kf + kv * 16 * 64 * es, 16 * 64 * es), 0) << layer;
    for (int64_t row = 0; row < 64; ++row) {
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(so->data) + row * 32 * es,
                            of + (row * 64 + kv * 32) * es, 32 * es),
                0)
          << layer << " row " << row;
    }
  }
}

TEST(CpuCommunicator, SumsInRankOrderAndGathers) {
  constexpr int32_t kRanks = 3;
  auto comms = make_cpu_communicators(kRanks);
  std::vector<std::vector<float>> bufs(kRanks);
  std::vector<std::vector<float>> gathered(kRanks, std::vector<float>(2 * kRanks));
  std::vector<Status> st(kRanks);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kRanks; ++r) {
    bufs[static_cast<size_t>(r)] = {1.0f + static_cast<float>(r), 1e8f * (r == 0 ? 1 : -1) , 0.5f};
    threads.emplace_back([&, r] {
      auto& b = bufs[static_cast<size_t>(r)];
      Status s = comms[static_cast<size_t>(r)]->all_reduce_sum(
          TensorView(b.data(), DType::kF32, {3}));
      std::vector<float> mine = {static_cast<float>(r), static_cast<float>(10 * r)};
      if (s.ok()) {
        s = comms[static_cast<size_t>(r)]->all_gather(
            TensorView(mine.data(), DType::kF32, {2}),
            TensorView(gathered[static_cast<size_t>(r)].data(), DType::kF32, {2 * kRanks}));
      }
      st[static_cast<size_t>(r)] = s;
    });
  }
  for (auto& t : threads) t.join();
  for (int32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)].ok()) << st[static_cast<size_t>(r)].to_string();
    EXPECT_EQ(bufs[static_cast<size_t>(r)][0], 6.0f);
    // (1e8 + -1e8) + -1e8 in rank order, the same bits on every rank.
    EXPECT_EQ(bufs[static_cast<size_t>(r)][1], (1e8f + -1e8f) + -1e8f);
    EXPECT_EQ(bufs[static_cast<size_t>(r)][2], 1.5f);
    EXPECT_EQ(gathered[static_cast<size_t>(r)], (std::vector<float>{0, 0, 1, 10, 2, 20}));
  }
}

TEST(CpuCommunicator, AbortEndsWaitsAndResetRecovers) {
  auto comms = make_cpu_communicators(2, std::chrono::milliseconds(60000));
  Status waited;
  std::thread t([&] { waited = comms[0]->barrier(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  comms[1]->abort("rank 1 failed: test");  // rank 1 never arrives
  t.join();
  ASSERT_FALSE(waited.ok());
  EXPECT_NE(waited.message().find("rank 1 failed: test"), std::string::npos);
  ASSERT_TRUE(comms[0]->reset());
  Status a, b;
  std::thread t0([&] { a = comms[0]->barrier(); });
  std::thread t1([&] { b = comms[1]->barrier(); });
  t0.join();
  t1.join();
  EXPECT_TRUE(a.ok() && b.ok());
}

TEST(CpuCommunicator, TimesOutInsteadOfHanging) {
  auto comms = make_cpu_communicators(2, std::chrono::milliseconds(50));
  Status s = comms[0]->barrier();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("timed out"), std::string::npos);
}

ModelStackOptions options(const std::string& model, const std::string& policy, int32_t tp) {
  ModelStackOptions o;
  o.model_dir = model_fixture_dir(model);
  o.num_threads = 1;
  o.max_num_seqs = 2;
  o.max_step_tokens = 128;
  o.max_logit_rows = 128;
  o.max_model_len = 512;
  o.attention.policy = policy;
  o.attention.token_budget = 64;  // a few pages: selection matters
  o.attention.sink_tokens = 16;
  o.attention.decode_local_tokens = 32;
  o.attention.prefill_local_tokens = 64;
  o.attention.page_tokens = 16;
  o.attention.logical_page_tokens = 4;
  o.attention.streaming_ratio = 0.5;
  o.kv_cache_dtype = KvCacheDtype::kF32;
  o.tensor_parallel_size = tp;
  return o;
}

class TensorParallelLogits
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int32_t>> {};

TEST_P(TensorParallelLogits, EqualToOneRank) {
  const auto& [model, policy, tp] = GetParam();
  // The fixtures have 2 kv heads: at TP = 4 each is replicated on 2 ranks holding one q head of
  // its group each, and a replica selects pages by its own q head (docs/tensor-parallel.md),
  // which differs from one rank selecting by both. With a budget that keeps every page the
  // selection is the same and the split itself is checked.
  ModelStackOptions o1 = options(model, policy, 1);
  // "fp8-VARIANT": the mistral fixture as an FP8 checkpoint, which the CPU computes with
  // dequantized exactly (Fp8Shard::kDequantize), at every rank count.
  if (model.starts_with("fp8-")) o1.model_dir = fp8_fixture_dir(model.substr(4));
  if (tp > 2 && (policy == "lserve" || policy == "quest")) {
    o1.attention.token_budget = o1.max_model_len;
  }
  ModelStackOptions on = o1;
  on.tensor_parallel_size = tp;
  auto one = build_model_stack(o1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto many = build_model_stack(on);
  ASSERT_TRUE(many.ok()) << many.status().to_string();
  ModelStack& a = **one;
  ModelStack& b = **many;
  ASSERT_EQ(b.tp_ranks.size(), static_cast<size_t>(tp));
  EXPECT_EQ(b.config().num_attention_heads(), a.config().num_attention_heads());
  ASSERT_EQ(a.kv->geometry().roles.num_streaming() > 0, b.kv->geometry().roles.num_streaming() > 0);
  // Each rank holds its vocabulary slice only, the embedding and the LM head (tied or not).
  auto layout = make_tp_layout(a.config(), tp);
  ASSERT_TRUE(layout.ok());
  EXPECT_LT(layout->vocab_per_rank, a.config().vocab_size());
  for (const auto& rank : b.tp_ranks) {
    const ModelWeights& w = rank->model->weights();
    EXPECT_EQ(w.embed.dim(0), layout->vocab_per_rank);
    EXPECT_EQ(w.lm_head.w.dim(0), layout->vocab_per_rank);
  }
  const TpComparison cmp = compare_tp_runs(a, b, /*margin_scale=*/1e-3);
  EXPECT_EQ(cmp.decoded, 80);
  EXPECT_GT(cmp.greedy_checked, 60);
  // f32 everywhere: only the order of the partial sums differs.
  EXPECT_LT(cmp.worst_relative, 1e-4) << model << " " << policy << " TP=" << tp;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TensorParallelLogits,
    ::testing::Combine(::testing::Values("llama3", "mistral", "qwen2", "qwen3", "fp8-channel",
                                         "fp8-tensor", "fp8-block", "fp8-block-24x48"),
                       ::testing::Values("dense", "streaming", "quest", "lserve"),
                       ::testing::Values(2, 4)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_tp" +
                         std::to_string(std::get<2>(info.param));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// GGUF models (tests/fixtures/gguf, ggml q8_0 and q4_1 blocks) at TP = 2: the ranks dequantize
// the blocks at load (their slices need not line up with the blocks), so TP = 2 under
// --quantization auto equals TP = 1 with the model dequantized (--quantization none), up to the
// order of the partial sums.
class TensorParallelGgufLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelGgufLogits, EqualToOneRankDequantized) {
  const std::string model = GetParam();
  ModelStackOptions o1 = options(model.substr(0, model.find('-')), "dense", 1);
  o1.model_dir =
      std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/gguf" / (model + ".gguf");
  o1.quantization = "none";
  ModelStackOptions o2 = o1;
  o2.quantization = "auto";
  o2.tensor_parallel_size = 2;
  auto one = build_model_stack(o1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = build_model_stack(o2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  ASSERT_EQ((*two)->tp_ranks.size(), 2u);
  for (const auto& rank : (*two)->tp_ranks) {
    EXPECT_EQ(rank->model->weights().layers[0].qkv.quant, nullptr) << model;
  }
  const TpComparison cmp = compare_tp_runs(**one, **two, /*margin_scale=*/1e-3);
  EXPECT_EQ(cmp.decoded, 80);
  EXPECT_GT(cmp.greedy_checked, 60);
  EXPECT_LT(cmp.worst_relative, 1e-4) << model;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelGgufLogits,
                         ::testing::Values("mistral-q8_0", "qwen3-q4_1"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(TensorParallelStack, HostKvTierPerRank) {
  // Each rank keeps its retrieval heads' pages in its own host pool with its own device cache:
  // the tier changes no bit of a one-rank run, so TP = 2 with it equals TP = 1 without it.
  ModelStackOptions o1 = options("llama3", "lserve", 1);
  ModelStackOptions o2 = options("llama3", "lserve", 2);
  o2.kv_offload = true;
  o2.host_kv_cache_bytes = int64_t{16} << 20;
  auto one = build_model_stack(o1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = build_model_stack(o2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  int tiered = 0;
  for (const auto& rank : (*two)->tp_ranks) tiered += rank->pool->tiered() ? 1 : 0;
  EXPECT_GE(tiered, 1);  // the ranks with retrieval heads
  const TpComparison cmp = compare_tp_runs(**one, **two, 1e-3);
  EXPECT_EQ(cmp.decoded, 80);
  EXPECT_LT(cmp.worst_relative, 1e-4);
}

// The automatic host pool (--host-kv-cache-bytes not given) of each rank takes the share the
// tensor-parallel builder gives it (1/N of half the free RAM, read once before the ranks build at
// once), not half of the free RAM each.
TEST(TensorParallelStack, AutomaticHostPoolsTakeTheRanksShare) {
  ModelStackOptions o = options("llama3", "lserve", 2);
  o.kv_offload = true;
  o.max_num_seqs = 8;  // the pools the sequences want: 8 x 32 blocks
  auto whole = build_model_stack(o);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  int64_t home_block_bytes = 0;  // the largest of the ranks' (2 x retrieval heads x page bytes)
  for (const auto& rank : (*whole)->tp_ranks) {
    const KvGeometry& g = rank->policy->kv_geometry();
    home_block_bytes =
        std::max<int64_t>(home_block_bytes, 2 * int64_t{g.roles.num_retrieval()} * g.page_bytes());
  }
  ASSERT_GT(home_block_bytes, 0);
  const int32_t one_seq = 512 / 16;
  EXPECT_EQ((*whole)->kv->num_retrieval_blocks(), 8 * one_seq);  // far below the free RAM
  o.auto_host_kv_share_bytes = 3 * one_seq * home_block_bytes;
  auto shared = build_model_stack(o);
  ASSERT_TRUE(shared.ok()) << shared.status().to_string();
  EXPECT_EQ((*shared)->kv->num_retrieval_blocks(), 3 * one_seq);
}

// Through the whole engine (scheduler, one KvManager, sampler): TP = 2 greedy continuations equal
// transformers' (expected/greedy.json) wherever its top-2 margin is clear.
TEST(TensorParallelEngine, GreedyContinuationsMatchTransformers) {
  for (const std::string model : {"llama3", "qwen3"}) {
    EngineConfig c;
    c.model_dir = model_fixture_dir(model);
    c.num_threads = 1;
    c.max_num_seqs = 2;
    c.max_num_batched_tokens = 256;
    c.max_model_len = 1024;
    c.kv_cache_dtype = "f32";
    c.tensor_parallel_size = 2;
    auto engine = EngineCore::create(c);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    std::ifstream f(model_fixture_dir(model) / "expected/greedy.json");
    const auto greedy = nlohmann::json::parse(f);
    int req = 0;
    for (const auto& g : greedy["continuations"]) {
      GenerateRequest r;
      r.request_id = "g" + std::to_string(req++);
      r.prompt_ids = g["prompt_ids"].get<std::vector<int32_t>>();
      r.sampling.temperature = 0;
      r.stop.max_tokens = greedy["max_new_tokens"].get<int32_t>();
      r.stop.eos_token_ids = greedy["eos_token_ids"].get<std::vector<int32_t>>();
      std::vector<int32_t> got;
      ASSERT_TRUE((*engine)
                      ->add_request(r, [&](const RequestOutput& o) {
                        got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
                      })
                      .ok());
      while ((*engine)->has_work()) ASSERT_TRUE((*engine)->step().ok());
      const auto want = g["generated_ids"].get<std::vector<int32_t>>();
      const auto gap = g["top1_top2_gap"].get<std::vector<double>>();
      const auto top1 = g["top1_logit"].get<std::vector<double>>();
      size_t clear = 0;
      while (clear < want.size() && gap[clear] >= 2e-3 * std::max(1.0, std::fabs(top1[clear]))) {
        ++clear;
      }
      const size_t n = std::min(clear + 1, want.size());
      ASSERT_GE(got.size(), n) << model;
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << model << " token " << i;
    }
  }
}

// Layer-segmented prefill fans out to the ranks too: its embedding (ids from the whole
// vocabulary, most outside rank 0's slice) and its logits are the vocabulary-parallel ones.
TEST(TensorParallelStack, LayerSegmentedPrefillEqualsOneRank) {
  ModelStackOptions o1 = options("llama3", "dense", 1);
  o1.layer_segmented_prefill = true;
  ModelStackOptions o2 = o1;
  o2.tensor_parallel_size = 2;
  auto one = build_model_stack(o1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = build_model_stack(o2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  std::mt19937 rng(11u);
  LayerSegmentInput in;
  in.num_tokens = 100;
  in.segment_tokens = 32;
  in.unit_end = in.num_segments() * (*one)->executor().num_layers();
  ASSERT_GT(in.unit_end, 0);
  for (int32_t t = 0; t < in.num_tokens; ++t) in.tokens.push_back(static_cast<int32_t>(rng() % 320));
  std::vector<std::vector<float>> logits(2);
  for (int i = 0; i < 2; ++i) {
    ModelStack& st = i == 0 ? **one : **two;
    auto slot = st.kv->add_sequence();
    ASSERT_TRUE(slot.ok());
    ASSERT_TRUE(st.kv->grow(*slot, in.num_tokens).ok());
    in.slot = *slot;
    const Status s = st.executor().forward_layer_segments(in, logits[static_cast<size_t>(i)]);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  ASSERT_EQ(logits[0].size(), 320u);
  ASSERT_EQ(logits[1].size(), 320u);
  double diff = 0, scale = 0;
  for (size_t v = 0; v < 320; ++v) {
    diff = std::max(diff, std::fabs(static_cast<double>(logits[0][v]) - logits[1][v]));
    scale = std::max(scale, std::fabs(static_cast<double>(logits[0][v])));
  }
  EXPECT_LT(diff / scale, 1e-4);
}

TEST(TensorParallelStack, ABadStepFailsAndTheNextOneRuns) {
  auto s = build_model_stack(options("llama3", "dense", 2));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ModelStack& b = **s;
  std::vector<float> logits;
  StepInput bad;
  bad.tokens = {1, 2};
  bad.seqs.push_back({7, 2, 2, true});  // no such row
  bad.logit_rows = {1};
  const Status st = b.executor().forward(bad, logits);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor-parallel rank"), std::string::npos) << st.message();
  auto slot = b.kv->add_sequence();
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(b.kv->grow(*slot, 2).ok());
  StepInput good = bad;
  good.seqs[0].slot = *slot;
  const Status ok = b.executor().forward(good, logits);
  ASSERT_TRUE(ok.ok()) << ok.to_string();
  EXPECT_EQ(logits.size(), static_cast<size_t>(b.executor().vocab_size()));
}

TEST(TensorParallelStack, RefusesAModelThatDoesNotSplit) {
  auto s = build_model_stack(options("llama3", "dense", 8));  // 4 attention heads
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("4 attention heads"), std::string::npos)
      << s.status().message();
}

// The peer-to-peer all-reduce is for GPUs (docs/p2p-all-reduce.md): the CPU refuses it, naming
// the flag, both at flag validation and when a stack is built directly.
TEST(TensorParallelStack, RefusesTheP2pAllReduceOnTheCpu) {
  EngineConfig c;
  c.model_dir = model_fixture_dir("llama3");
  c.device = "cpu";
  c.tensor_parallel_size = 2;
  EXPECT_TRUE(c.validate().ok());
  c.tp_all_reduce = "nccl";
  EXPECT_TRUE(c.validate().ok());  // meaningless on the CPU, harmless
  c.tp_all_reduce = "p2p";
  const Status v = c.validate();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("--tp-all-reduce p2p needs GPUs"), std::string::npos) << v.message();
  c.tp_all_reduce = "ring";
  EXPECT_NE(c.validate().message().find("auto, nccl or p2p"), std::string::npos);

  ModelStackOptions o = options("llama3", "dense", 2);
  o.tp_all_reduce = "p2p";
  auto s = build_model_stack(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tp-all-reduce p2p"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace ls
