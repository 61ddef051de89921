// FP8 checkpoints on the CPU (docs/fp8-weights.md): the fixtures of
// scripts/fixtures/make_fp8_fixtures.py (tests/fixtures/models/mistral quantized with ml_dtypes'
// float8_e4m3fn as compressed-tensors channel / tensor and native fp8 block checkpoints) load
// dequantized to f32, and
// - every linear weight equals the script's dequantization (e4m3 x scale, one f32 rounding);
// - the engine's logits are within 1e-3 of a float64 forward pass over those weights;
// - the per-row e4m3 form the CUDA kernels read (block scales requantized per row) and the
//   per-row quantization of --quantization fp8 equal the script's, bit for bit;
// - a checkpoint whose scales do not match its config, and --quantization fp8 on the CPU, are
//   refused with messages that name the problem.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "engine/engine_core.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/fp8_weights.h"
#include "model/model.h"

namespace ls {
namespace {

std::filesystem::path fp8_dir() {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/fp8";
}

std::vector<float> f32_of(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.nbytes / 4));
  std::memcpy(v.data(), t.data, static_cast<size_t>(t.nbytes));
  return v;
}

const char* const kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                "mlp.down_proj"};

class Fp8Checkpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Checkpoint, DequantizedWeightsMatchTheReference) {
  const std::filesystem::path dir = fp8_dir() / ("mistral-" + GetParam());
  auto backend = make_backend("cpu", 1);
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  auto model = Model::load(dir, **backend);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto expected = SafetensorsFile::open(dir / "expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  const LayerWeights& L = (*model)->weights().layers[0];
  // The fused matrices hold their parts' rows in order: q, k, v; gate, up.
  struct Part {
    const LinearWeight* w;
    std::vector<const char*> names;
  };
  const std::vector<Part> parts = {{&L.qkv, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
                                   {&L.o, {"self_attn.o_proj"}},
                                   {&L.gate_up, {"mlp.gate_proj", "mlp.up_proj"}},
                                   {&L.down, {"mlp.down_proj"}}};
  for (const Part& p : parts) {
    ASSERT_FALSE(p.w->is_fp8());  // the CPU computes in f32
    ASSERT_EQ(p.w->w.dtype, DType::kF32);
    std::vector<float> ref;
    for (const char* n : p.names) {
      const TensorInfo* t = (*expected)->find(fmt::format("model.layers.0.{}.weight", n));
      ASSERT_NE(t, nullptr) << n;
      const std::vector<float> v = f32_of(*t);
      ref.insert(ref.end(), v.begin(), v.end());
    }
    ASSERT_EQ(static_cast<int64_t>(ref.size()), p.w->w.numel());
    const auto* got = p.w->w.ptr<float>();
    int64_t mismatches = 0;
    for (size_t i = 0; i < ref.size(); ++i) mismatches += got[i] != ref[i];
    EXPECT_EQ(mismatches, 0) << p.names[0];
  }
}

TEST_P(Fp8Checkpoint, LogitsMatchTheDequantizedReference) {
  const std::filesystem::path dir = fp8_dir() / ("mistral-" + GetParam());
  EngineConfig c;
  c.model_dir = dir;
  c.num_threads = 2;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 1024;
  c.kv_cache_dtype = "f32";  // the reference is a float64 forward pass
  auto engine = EngineCore::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto expected = SafetensorsFile::open(dir / "expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  int checked = 0;
  for (const TensorInfo& t : (*expected)->tensors()) {
    if (t.name.rfind("logits_", 0) != 0) continue;
    const auto ids =
        nlohmann::json::parse((*expected)->metadata().at(t.name)).get<std::vector<int32_t>>();
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->score(ids, logits).ok());
    const std::vector<float> ref = f32_of(t);
    ASSERT_EQ(logits.size(), ref.size());
    const int64_t vocab = (*engine)->vocab_size();
    double worst = 0;
    for (size_t p = 0; p * static_cast<size_t>(vocab) < ref.size(); ++p) {
      double diff = 0, scale = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const size_t i = p * static_cast<size_t>(vocab) + static_cast<size_t>(v);
        diff = std::max(diff, std::fabs(static_cast<double>(logits[i]) - ref[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
      }
      worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    EXPECT_LE(worst, 1e-3) << t.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

INSTANTIATE_TEST_SUITE_P(Variants, Fp8Checkpoint,
                         ::testing::Values("channel", "tensor", "block", "block-24x48"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

// The per-row e4m3 form (what the CUDA backend uploads): block scales requantized per row equal
// the script's requantization bit for bit.
TEST(Fp8Rows, BlockScalesBecomePerRowScales) {
  for (const char* variant : {"block", "block-24x48"}) {
    SCOPED_TRACE(variant);
    const std::filesystem::path dir = fp8_dir() / (std::string("mistral-") + variant);
    auto config = load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    ASSERT_TRUE(config->fp8_weights());
    auto ckpt = Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    auto expected = SafetensorsFile::open(dir / "expected.safetensors");
    ASSERT_TRUE(expected.ok());
    for (const char* m : kLinears) {
      const std::string name = fmt::format("model.layers.0.{}.weight", m);
      const TensorInfo* w = ckpt->find(name);
      ASSERT_NE(w, nullptr);
      auto rows = read_fp8_rows(*ckpt, *config->fp8_weights(), name, w->shape[0], w->shape[1]);
      ASSERT_TRUE(rows.ok()) << rows.status().to_string();
      const TensorInfo* codes = (*expected)->find(name + ".rows.codes");
      const TensorInfo* scales = (*expected)->find(name + ".rows.scales");
      ASSERT_TRUE(codes && scales);
      ASSERT_EQ(static_cast<int64_t>(rows->codes.size()), codes->nbytes);
      EXPECT_EQ(std::memcmp(rows->codes.data(), codes->data, rows->codes.size()), 0) << m;
      EXPECT_EQ(rows->scales, f32_of(*scales)) << m;
    }
  }
}

// --quantization fp8 quantizes each output row with scale max|row| / 448: equal to the script's
// ml_dtypes quantization of the (f16) checkpoint, bit for bit.
TEST(Fp8Rows, QuantizeOnLoadMatchesTheReference) {
  auto ckpt = Checkpoint::open(std::filesystem::path(LONGSERVE_SOURCE_DIR) /
                               "tests/fixtures/models/mistral");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  auto expected = SafetensorsFile::open(fp8_dir() / "mistral-rows.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  int checked = 0;
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* m : kLinears) {
      const std::string name = fmt::format("model.layers.{}.{}.weight", layer, m);
      const TensorInfo* t = ckpt->find(name);
      ASSERT_NE(t, nullptr);
      ASSERT_TRUE(t->dtype == DType::kF16 || t->dtype == DType::kBF16);
      std::vector<uint8_t> raw(static_cast<size_t>(t->nbytes));
      std::memcpy(raw.data(), t->data, raw.size());
      std::vector<float> f32(static_cast<size_t>(t->numel()));
      convert_to_f32(*t->dtype, raw.data(), f32.data(), t->numel());
      const Fp8Rows q = quantize_fp8_rows(f32.data(), t->shape[0], t->shape[1]);
      const TensorInfo* codes = (*expected)->find(name + ".codes");
      const TensorInfo* scales = (*expected)->find(name + ".scales");
      ASSERT_TRUE(codes && scales) << name;
      ASSERT_EQ(static_cast<int64_t>(q.codes.size()), codes->nbytes);
      EXPECT_EQ(std::memcmp(q.codes.data(), codes->data, q.codes.size()), 0) << name;
      EXPECT_EQ(q.scales, f32_of(*scales)) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 14);
}

// A copy of a fixture with its config.json's quantization_config replaced.
std::filesystem::path patched_copy(const std::string& variant, const std::string& name,
                                   const nlohmann::json& quantization_config) {
  const std::filesystem::path src = fp8_dir() / ("mistral-" + variant);
  const std::filesystem::path dst =
      std::filesystem::temp_directory_path() / ("longserve-fp8-" + name + "-" +
                                                std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  for (const char* f : {"model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"}) {
    std::filesystem::copy_file(src / f, dst / f);
  }
  std::ifstream in(src / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["quantization_config"] = quantization_config;
  std::ofstream(dst / "config.json") << config.dump(2);
  return dst;
}

TEST(Fp8Refusals, ScalesThatDoNotMatchTheConfigAreNamed) {
  auto backend = make_backend("cpu", 1);
  ASSERT_TRUE(backend.ok());
  struct Case {
    const char* variant;
    const char* name;
    nlohmann::json qc;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      // Channel scales read as a per-tensor checkpoint: the scale's shape is wrong.
      {"channel", "tensor-layout",
       nlohmann::json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
         "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8,
         "strategy": "tensor"}}}})"),
       "model.layers.0.self_attn.q_proj.weight_scale in"},
      // [128, 128] block scales read as [64, 64] blocks.
      {"block", "block-size",
       nlohmann::json::parse(R"({"quant_method": "fp8", "weight_block_size": [64, 64]})"),
       "weight_scale_inv in"},
      // Compressed-tensors names its scales weight_scale; a native fp8 config expects
      // weight_scale_inv, which this checkpoint lacks.
      {"channel", "scale-name",
       nlohmann::json::parse(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})"),
       "weight_scale"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::filesystem::path dir = patched_copy(c.variant, c.name, c.qc);
    auto model = Model::load(dir, **backend);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.status().message().find(c.fragment), std::string::npos)
        << model.status().message();
    std::filesystem::remove_all(dir);
  }
}

TEST(Fp8Refusals, QuantizeToFp8NeedsCuda) {
  auto backend = make_backend("cpu", 1);
  ASSERT_TRUE(backend.ok());
  auto model = Model::load(std::filesystem::path(LONGSERVE_SOURCE_DIR) /
                               "tests/fixtures/models/mistral",
                           **backend, "fp8");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("--quantization fp8 needs the CUDA backend"),
            std::string::npos)
      << model.status().message();
  // The FP8 checkpoint itself loads (dequantized) under auto and none.
  for (const char* q : {"auto", "none"}) {
    auto fp8 = Model::load(fp8_dir() / "mistral-channel", **backend, q);
    EXPECT_TRUE(fp8.ok()) << q << ": " << fp8.status().to_string();
  }
}

}  // namespace
}  // namespace ls
