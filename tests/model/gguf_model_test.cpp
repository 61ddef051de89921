// GGUF models end to end: tests/fixtures/models checkpoints converted to GGUF and quantized by
// scripts/fixtures/make_gguf_fixtures.py (Q8_0 mistral with llama.cpp's q/k permutation, Q4_1
// qwen3), run through the engine from the .gguf file alone; the logits of every position within
// 1e-3 of a float64 reference forward pass over gguf-py's dequantization of the same file (that
// reference reproduces transformers' logits of the original checkpoints to 1e-4).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "engine/engine_core.h"
#include "io/gguf_convert.h"
#include "io/safetensors.h"

namespace ls {
namespace {

std::filesystem::path gguf_dir() {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/gguf";
}

double worst_relative_error(const std::vector<float>& ours, const std::vector<float>& ref,
                            int64_t vocab) {
  double worst = 0;
  for (size_t p = 0; p * vocab < ref.size(); ++p) {
    double diff = 0, scale = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const size_t i = p * static_cast<size_t>(vocab) + static_cast<size_t>(v);
      diff = std::max(diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-30));
  }
  return worst;
}

// (model, --quantization): "none" dequantizes at load (f32, the reference to 1e-3); "auto" runs
// the quantized CPU kernels on the file's blocks, whose only extra error is the activations'
// int8 rounding per 32 (kernels/cpu/quant_matmul.h; the kernels test asserts its exact bound),
// which through these tiny random models (hidden 64) reaches 4.1e-2 of the logit range; the
// bound here is 8e-2.
class GgufFixture : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(GgufFixture, LogitsMatchTheDequantizedReference) {
  const auto& [name, quantization] = GetParam();
  EngineConfig c;
  c.model_dir = gguf_dir() / (name + ".gguf");
  c.num_threads = 2;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 1024;
  c.quantization = quantization;
  c.kv_cache_dtype = "f32";  // the reference is a float64 forward pass: f32 K/V, as it bounds
  auto engine = EngineCore::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto expected = SafetensorsFile::open(gguf_dir() / (name + ".expected.safetensors"));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  ASSERT_FALSE((*expected)->tensors().empty());
  const double bound = quantization == "none" ? 1e-3 : 8e-2;
  for (const TensorInfo& t : (*expected)->tensors()) {
    const auto ids =
        nlohmann::json::parse((*expected)->metadata().at(t.name)).get<std::vector<int32_t>>();
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->score(ids, logits).ok());
    std::vector<float> ref(static_cast<size_t>(t.nbytes / 4));
    std::memcpy(ref.data(), t.data, static_cast<size_t>(t.nbytes));
    ASSERT_EQ(logits.size(), ref.size()) << t.name;
    const double err = worst_relative_error(logits, ref, (*engine)->vocab_size());
    EXPECT_LE(err, bound) << name << " prompt " << t.name;
    std::printf("%s (%s) prompt %s: worst relative logit error %.2e\n", name.c_str(),
                quantization.c_str(), t.name.c_str(), err);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GgufFixture,
                         ::testing::Combine(::testing::Values("mistral-q8_0", "qwen3-q4_1"),
                                            ::testing::Values("none", "auto")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

std::vector<float> score(const std::filesystem::path& model, const std::string& quantization,
                         const std::vector<int32_t>& ids) {
  EngineConfig c;
  c.model_dir = model;
  c.num_threads = 2;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 1024;
  c.quantization = quantization;
  c.kv_cache_dtype = "f32";  // weight paths compared at 1e-4: no bf16 K/V rounding in between
  auto engine = EngineCore::create(c);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<float> logits;
  if (engine.ok()) {
    EXPECT_TRUE((*engine)->score(ids, logits).ok());
  }
  return logits;
}

// --quantization q8_0 on a safetensors checkpoint quantizes with the same quantizer as
// `longserve quantize`, so it must give the logits of the quantized GGUF file run on its blocks
// to within f32 metadata rounding (1e-4; a different quantization differs by ~1e-2) (q/k rows of
// mistral move as whole rows of blocks, undoing the converter's permutation);
// the GGUF dequantized at load stays within the activation-rounding bound of both.
TEST(GgufQuantized, QuantizeOnLoadEqualsTheQuantizedGgufFile) {
  for (const char* model : {"mistral", "qwen3"}) {
    for (const char* type : {"q8_0", "q4_0"}) {
      const auto dir = std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / model;
      const auto file = std::filesystem::temp_directory_path() /
                        fmt::format("ls_qload_{}_{}_{}.gguf", model, type, ::getpid());
      auto qt = parse_quant_type(type);
      ASSERT_TRUE(qt.ok());
      ASSERT_TRUE(convert_to_gguf(dir, file, *qt).ok());
      std::vector<int32_t> ids;
      for (int i = 0; i < 37; ++i) ids.push_back((i * 53 + 7) % 300);
      const std::vector<float> on_load = score(dir, type, ids);
      const std::vector<float> gguf = score(file, "auto", ids);
      const std::vector<float> dequantized = score(file, "none", ids);
      std::filesystem::remove(file);
      ASSERT_FALSE(on_load.empty());
      ASSERT_EQ(on_load.size(), gguf.size());
      ASSERT_EQ(on_load.size(), dequantized.size());
      const int64_t vocab = static_cast<int64_t>(on_load.size() / ids.size());
      // Not bit-identical only because GGUF stores rms_norm_eps and rope theta as f32.
      EXPECT_LE(worst_relative_error(on_load, gguf, vocab), 1e-4) << model << " " << type;
      EXPECT_LE(worst_relative_error(gguf, dequantized, vocab), 8e-2) << model << " " << type;
      // Quantizing does change the model: the f32 checkpoint's logits differ.
      const std::vector<float> f32 = score(dir, "auto", ids);
      EXPECT_GT(worst_relative_error(on_load, f32, vocab), 1e-5) << model << " " << type;
    }
  }
}

TEST(GgufQuantized, QuantizationFlagRefusesGgufRequantizing) {
  EngineConfig c;
  c.model_dir = gguf_dir() / "qwen3-q4_1.gguf";
  c.quantization = "q8_0";
  auto engine = EngineCore::create(c);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("safetensors"), std::string::npos);
  c.quantization = "q5_k";
  EXPECT_FALSE(EngineCore::create(c).ok());
}

}  // namespace
}  // namespace ls
