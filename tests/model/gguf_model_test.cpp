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

#include "engine/engine_core.h"
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

class GgufFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufFixture, LogitsMatchTheDequantizedReference) {
  const std::string name = GetParam();
  EngineConfig c;
  c.model_dir = gguf_dir() / (name + ".gguf");
  c.num_threads = 2;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 1024;
  auto engine = EngineCore::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto expected = SafetensorsFile::open(gguf_dir() / (name + ".expected.safetensors"));
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  ASSERT_FALSE((*expected)->tensors().empty());
  for (const TensorInfo& t : (*expected)->tensors()) {
    const auto ids =
        nlohmann::json::parse((*expected)->metadata().at(t.name)).get<std::vector<int32_t>>();
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->score(ids, logits).ok());
    std::vector<float> ref(static_cast<size_t>(t.nbytes / 4));
    std::memcpy(ref.data(), t.data, static_cast<size_t>(t.nbytes));
    ASSERT_EQ(logits.size(), ref.size()) << t.name;
    const double err = worst_relative_error(logits, ref, (*engine)->vocab_size());
    EXPECT_LE(err, 1e-3) << name << " prompt " << t.name;
    std::printf("%s prompt %s: worst relative logit error %.2e\n", name.c_str(), t.name.c_str(),
                err);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GgufFixture, ::testing::Values("mistral-q8_0", "qwen3-q4_1"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ls
