// Tokenizers read from GGUF metadata against Hugging Face `tokenizers`: the fixture tokenizers
// (tests/fixtures/tokenizers/{qwen2,llama3}) converted to GGUF metadata as llama.cpp's
// convert_hf_to_gguf.py does (scripts/fixtures/make_gguf_fixtures.py), then the hard strings of
// expected.json encoded and decoded from the .gguf alone must give HF's ids and text.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {

using test::show;

std::filesystem::path gguf_path(const std::string& name) {
  return std::filesystem::path("tests/fixtures/gguf") / ("tokenizer-" + name + ".gguf");
}

std::string case_input(const nlohmann::json& c) {
  return c.contains("hex") ? test::from_hex(c["hex"].get<std::string>())
                           : c["text"].get<std::string>();
}

class GgufTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizer, HardStringsMatchHuggingFace) {
  const std::string name = GetParam();
  ASSERT_TRUE(Tokenizer::in_gguf(gguf_path(name)));
  auto tok = Tokenizer::load(gguf_path(name));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto expected = test::read_json_file(test::fixture_dir(name) + "/expected.json");
  size_t checked = 0;
  for (const auto& c : expected["cases"]) {
    const std::string input = case_input(c);
    EXPECT_EQ((*tok)->encode(input, true), test::ids_of(c["ids"])) << "input: " << show(input);
    EXPECT_EQ((*tok)->encode(input, false), test::ids_of(c["ids_no_special"]))
        << "input: " << show(input);
    const auto ids = test::ids_of(c["ids"]);
    EXPECT_EQ((*tok)->decode(ids, false), c["decode"].get<std::string>()) << show(input);
    EXPECT_EQ((*tok)->decode(ids, true), c["decode_skip"].get<std::string>()) << show(input);
    ++checked;
  }
  EXPECT_GE(checked, 70u);
  for (const auto& r : expected["random_decodes"]) {
    const auto ids = test::ids_of(r["ids"]);
    EXPECT_EQ((*tok)->decode(ids, false), r["decode"].get<std::string>()) << r["ids"].dump();
    EXPECT_EQ((*tok)->decode(ids, true), r["decode_skip"].get<std::string>()) << r["ids"].dump();
  }
  if (!expected["eos_token_id"].is_null()) {
    EXPECT_EQ((*tok)->eos_token_id(), expected["eos_token_id"].get<int32_t>());
  }
  if (!expected["bos_token_id"].is_null()) {
    EXPECT_EQ((*tok)->bos_token_id(), expected["bos_token_id"].get<int32_t>());
  }
  // The chat template comes from tokenizer.chat_template, like the HF directory's.
  auto from_dir = load_chat_template(test::fixture_dir(name));
  auto from_gguf = load_chat_template(gguf_path(name));
  ASSERT_TRUE(from_dir.ok() && from_gguf.ok());
  EXPECT_EQ(*from_gguf, *from_dir);
  EXPECT_EQ((*tok)->chat_template(), *from_dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufTokenizer, ::testing::Values("qwen2", "llama3"),
                         [](const auto& info) { return info.param; });

TEST(GgufTokenizerErrors, NoTokenizerOrUnsupportedModel) {
  // A model GGUF without tokenizer metadata has no tokenizer.
  const std::filesystem::path model = "tests/fixtures/gguf/qwen3-q4_1.gguf";
  EXPECT_FALSE(Tokenizer::in_gguf(model));
  auto t = Tokenizer::load(model);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.model"), std::string::npos);
}

}  // namespace
}  // namespace ls
