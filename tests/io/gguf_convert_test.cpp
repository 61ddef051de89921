// `longserve quantize`'s converter and quantizers: the fixture checkpoints written as GGUF in
// every type, read back by the GGUF reader (config, tokenizer metadata, dequantized tensors with
// llama.cpp's q/k permutation undone) and compared with the original safetensors within each
// format's rounding; the quantizers against dequantize_row on random rows. gguf-py reads the same
// files in tests/io/gguf_convert_check.py (ctest gguf_convert_gguf_py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/gguf_convert.h"
#include "io/gguf_dequant.h"
#include "io/gguf_model.h"
#include "io/gguf_quantize.h"
#include "io/model_config.h"

namespace ls {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/models" / name;
}

std::vector<float> to_f32(const TensorInfo& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<uint8_t> raw(static_cast<size_t>(t.nbytes));
  std::memcpy(raw.data(), t.data, raw.size());
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(*t.dtype, raw.data(), out.data(), n);
  return out;
}

// The largest error a block of 32 may have after quantizing to `type` (half a step, or a full
// step at Q4_0's clamped end), relative to the block's range, plus f16 rounding of the scales.
double block_bound(GgmlType type, const float* x) {
  float lo = x[0], hi = x[0], amax = 0;
  for (int i = 0; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  const double f16 = 2e-3 * amax;
  switch (type) {
    case GgmlType::kQ8_0:
      return amax / 254.0 + f16;
    case GgmlType::kQ4_0:
      return amax / 8.0 + f16;
    case GgmlType::kQ4_1:
      return (hi - lo) / 30.0 + f16;
    default:
      return amax;  // unused
  }
}

class Convert : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Convert, ReadsBackWithinTheFormatsRounding) {
  const auto& [model, type_name] = GetParam();
  auto type = parse_quant_type(type_name);
  ASSERT_TRUE(type.ok());
  const auto out = std::filesystem::temp_directory_path() /
                   ("ls_convert_" + model + "_" + type_name + "_" + std::to_string(::getpid()) + ".gguf");
  auto fallbacks = convert_to_gguf(fixture(model), out, *type);
  ASSERT_TRUE(fallbacks.ok()) << fallbacks.status().to_string();
  auto file = GgufFile::open(out);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::filesystem::remove(out);  // the mapping stays valid

  auto orig_cfg = load_model_config(fixture(model));
  auto cfg = gguf_model_config(**file);
  ASSERT_TRUE(orig_cfg.ok() && cfg.ok()) << cfg.status().to_string();
  // Mistral is written as llama, as convert_hf_to_gguf.py does (same tensors and metadata).
  EXPECT_EQ(cfg->architecture(),
            model == "mistral" ? std::string("LlamaForCausalLM") : orig_cfg->architecture());
  EXPECT_EQ(cfg->hidden_size(), orig_cfg->hidden_size());
  EXPECT_EQ(cfg->intermediate_size(), orig_cfg->intermediate_size());
  EXPECT_EQ(cfg->num_hidden_layers(), orig_cfg->num_hidden_layers());
  EXPECT_EQ(cfg->num_attention_heads(), orig_cfg->num_attention_heads());
  EXPECT_EQ(cfg->num_key_value_heads(), orig_cfg->num_key_value_heads());
  EXPECT_EQ(cfg->head_dim(), orig_cfg->head_dim());
  EXPECT_EQ(cfg->vocab_size(), orig_cfg->vocab_size());
  EXPECT_EQ(cfg->tie_word_embeddings(), orig_cfg->tie_word_embeddings());
  EXPECT_EQ(cfg->rope().type, orig_cfg->rope().type);
  EXPECT_FLOAT_EQ(static_cast<float>(cfg->rope().factor), static_cast<float>(orig_cfg->rope().factor));
  EXPECT_FLOAT_EQ(static_cast<float>(cfg->rope().theta), static_cast<float>(orig_cfg->rope().theta));

  // Tokenizer metadata: the vocabulary in id order and the merges in rank order (byte-level BPE
  // fixtures; mistral's SentencePiece-style tokenizer is left out).
  std::ifstream tj(fixture(model) / "tokenizer.json");
  const auto tok = nlohmann::json::parse(tj);
  auto tokens = (*file)->opt_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  if (model == "mistral") {
    EXPECT_EQ(*tokens, nullptr);
  } else {
  ASSERT_NE(*tokens, nullptr);
  auto pre = (*file)->get_string("tokenizer.ggml.pre");
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(*pre, "qwen2");
  for (const auto& [text, id] : tok["model"]["vocab"].items()) {
    EXPECT_EQ((**tokens)[id.get<size_t>()], text);
  }
  auto merges = (*file)->opt_string_array("tokenizer.ggml.merges");
  ASSERT_TRUE(merges.ok() && *merges != nullptr);
  ASSERT_EQ((*merges)->size(), tok["model"]["merges"].size());
  }

  auto orig = Checkpoint::open(fixture(model));
  auto back = gguf_checkpoint(**file, *cfg, DType::kF32);
  ASSERT_TRUE(orig.ok() && back.ok()) << back.status().to_string();
  int64_t checked = 0;
  for (const std::string& name : orig->names()) {
    if (name.find("rotary_emb") != std::string::npos) continue;
    const TensorInfo* a = orig->find(name);
    const TensorInfo* b = back->find(name);
    ASSERT_NE(b, nullptr) << name;
    ASSERT_EQ(a->shape, b->shape) << name;
    const std::vector<float> x = to_f32(*a), y = to_f32(*b);
    if (a->shape.size() == 1) {
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << name;  // f32, exact
      continue;
    }
    // The fixtures' rows (64..192) are not whole 256-blocks: K types take their fallback.
    GgmlType tt = *type;
    if (a->shape[1] % 256 != 0) tt = tt == GgmlType::kQ4_K ? GgmlType::kQ4_1
                                   : tt == GgmlType::kQ6_K ? GgmlType::kQ8_0 : tt;
    for (size_t blk = 0; blk < x.size() / 32; ++blk) {
      const double bound = block_bound(tt, &x[32 * blk]);
      for (size_t i = 32 * blk; i < 32 * blk + 32; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), bound * 1.001 + 1e-7)
            << name << " element " << i << " as " << ggml_type_name(tt);
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, Convert,
    ::testing::Combine(::testing::Values("mistral", "qwen2", "qwen3"),
                       ::testing::Values("q8_0", "q4_0", "q4_1", "q4_k", "q6_k")),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

TEST(Convert, RefusesWhatItCannotWrite) {
  const auto out = std::filesystem::temp_directory_path() / "ls_convert_refused.gguf";
  // llama3 RoPE needs rope_freqs, which neither side supports.
  auto r = convert_to_gguf(fixture("llama3"), out, GgmlType::kQ8_0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("llama3"), std::string::npos) << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(parse_quant_type("q5_k").ok());
  EXPECT_FALSE(convert_to_gguf(fixture("mistral"), out, GgmlType::kQ5_K).ok());
  EXPECT_FALSE(convert_to_gguf(fixture("no-such-model"), out, GgmlType::kQ8_0).ok());
}

// The K-type quantizers on gaussian rows with outliers: every element within its sub-block's
// step, and the RMS error of a 4- and 6-bit code (relative to the data's RMS) where such codes
// land (uniform 4-bit over the sub-block range: ~0.07-0.09; 6-bit: ~0.02).
TEST(Quantize, KTypesRoundTripThroughDequantize) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t n = 256 * 64;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  for (int64_t i = 0; i < n; i += 97) x[static_cast<size_t>(i)] *= 8;  // outliers
  for (auto [type, max_rel_rms, step_over_range] :
       {std::tuple{GgmlType::kQ4_K, 0.12, 1.0 / 15}, std::tuple{GgmlType::kQ6_K, 0.03, 1.0 / 63},
        std::tuple{GgmlType::kQ4_1, 0.12, 1.0 / 15}, std::tuple{GgmlType::kQ4_0, 0.16, 1.0 / 16},
        std::tuple{GgmlType::kQ8_0, 0.01, 1.0 / 254}}) {
    std::vector<uint8_t> q(static_cast<size_t>(n / *ggml_block_elems(type) * *ggml_block_bytes(type)));
    ASSERT_TRUE(quantize_row(type, x.data(), n, q.data()).ok());
    std::vector<float> y(static_cast<size_t>(n));
    ASSERT_TRUE(dequantize_row(type, q.data(), y.data(), n).ok());
    double err2 = 0, x2 = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      float lo = 0, hi = 0;
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
        lo = std::min(lo, x[static_cast<size_t>(i)]);
        hi = std::max(hi, x[static_cast<size_t>(i)]);
      }
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
        const double e = x[static_cast<size_t>(i)] - y[static_cast<size_t>(i)];
        // Within 1.5 steps of a code spanning the block's range (and zero), plus, for the K
        // types, the rounding of the sub-block scale (and minimum) to an integer multiple of
        // the super-block's f16 scale: at most half of it times the largest code (15 or 32).
        double scale_rounding = 0;
        const size_t sb = static_cast<size_t>(i / 256) * static_cast<size_t>(*ggml_block_bytes(type));
        if (type == GgmlType::kQ4_K) {
          scale_rounding = 0.5 * 15 * f16_to_f32(q[sb] | (q[sb + 1] << 8)) +
                           0.5 * f16_to_f32(q[sb + 2] | (q[sb + 3] << 8));
        } else if (type == GgmlType::kQ6_K) {
          scale_rounding = 0.5 * 32 * std::fabs(f16_to_f32(q[sb + 208] | (q[sb + 209] << 8)));
        }
        ASSERT_LE(std::fabs(e), (hi - lo) * step_over_range * 1.5 + scale_rounding + 1e-6)
            << ggml_type_name(type) << " at " << i;
        err2 += e * e;
        x2 += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
      }
    }
    EXPECT_LE(std::sqrt(err2 / x2), max_rel_rms) << ggml_type_name(type);
    std::printf("%s: relative RMS error %.4f\n", ggml_type_name(type).c_str(), std::sqrt(err2 / x2));
  }
  EXPECT_FALSE(quantize_row(GgmlType::kQ4_K, x.data(), 100, nullptr).ok());
  EXPECT_FALSE(quantize_row(GgmlType::kQ5_0, x.data(), 32, nullptr).ok());
}

}  // namespace
}  // namespace ls
