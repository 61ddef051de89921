// The fixture tokenizers against Hugging Face `tokenizers`
// (scripts/fixtures/make_tokenizer_fixtures.py): ids on hard strings (Unicode, CJK, emoji, digits,
// whitespace, contractions, special tokens, invalid UTF-8), decode with and without special
// tokens, decode of random id sequences, the vocabulary, and what tokenizer_config.json /
// chat_template.jinja provide.

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {

using test::fixture_dir;
using test::read_json_file;
using test::read_text_file;
using test::show;

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixture_dir(GetParam());
    expected_ = read_json_file(dir_ + "/expected.json");
    auto loaded = Tokenizer::load(dir_);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    loaded_ = std::move(loaded).value();
    // tokenizer.json alone: exactly what the `tokenizers` library reads.
    auto bare = Tokenizer::from_json(read_text_file(dir_ + "/tokenizer.json"));
    ASSERT_TRUE(bare.ok()) << bare.status().to_string();
    bare_ = std::move(bare).value();
  }

  static std::string case_input(const nlohmann::json& c) {
    return c.contains("hex") ? test::from_hex(c["hex"].get<std::string>())
                             : c["text"].get<std::string>();
  }

  std::string dir_;
  nlohmann::json expected_;
  std::unique_ptr<Tokenizer> loaded_;
  std::unique_ptr<Tokenizer> bare_;
};

TEST_P(FixtureTest, EncodeMatchesHuggingFace) {
  size_t checked = 0;
  for (const auto& c : expected_["cases"]) {
    const std::string input = case_input(c);
    const auto want = test::ids_of(c["ids"]);
    const auto want_plain = test::ids_of(c["ids_no_special"]);
    for (const Tokenizer* t : {bare_.get(), loaded_.get()}) {
      EXPECT_EQ(t->encode(input, true), want) << "input: " << show(input);
      EXPECT_EQ(t->encode(input, false), want_plain) << "input: " << show(input);
    }
    ++checked;
  }
  EXPECT_GE(checked, 70u);
}

TEST_P(FixtureTest, DecodeMatchesHuggingFace) {
  for (const auto& c : expected_["cases"]) {
    const auto ids = test::ids_of(c["ids"]);
    EXPECT_EQ(loaded_->decode(ids, false), c["decode"].get<std::string>())
        << "input: " << show(case_input(c));
    EXPECT_EQ(loaded_->decode(ids, true), c["decode_skip"].get<std::string>())
        << "input: " << show(case_input(c));
  }
  for (const auto& r : expected_["random_decodes"]) {
    const auto ids = test::ids_of(r["ids"]);
    EXPECT_EQ(loaded_->decode(ids, false), r["decode"].get<std::string>()) << r["ids"].dump();
    EXPECT_EQ(loaded_->decode(ids, true), r["decode_skip"].get<std::string>()) << r["ids"].dump();
  }
}

TEST_P(FixtureTest, VocabularyMatchesHuggingFace) {
  const auto& table = expected_["id_to_token"];
  ASSERT_EQ(loaded_->vocab_size(), expected_["vocab_size"].get<int32_t>());
  ASSERT_EQ(table.size(), static_cast<size_t>(loaded_->vocab_size()));
  for (int32_t id = 0; id < loaded_->vocab_size(); ++id) {
    const std::string token = table[static_cast<size_t>(id)].get<std::string>();
    ASSERT_EQ(loaded_->id_to_token(id), token) << "id " << id;
    const auto& want_back = expected_["token_to_id_of_token"][static_cast<size_t>(id)];
    const auto back = loaded_->token_to_id(token);
    if (want_back.is_null()) {
      EXPECT_FALSE(back.has_value()) << token;
    } else {
      ASSERT_TRUE(back.has_value()) << token;
      EXPECT_EQ(*back, want_back.get<int32_t>()) << token;
    }
  }
  EXPECT_EQ(loaded_->id_to_token(-1), "");
  EXPECT_EQ(loaded_->id_to_token(loaded_->vocab_size()), "");
  EXPECT_FALSE(loaded_->token_to_id("no such token \xF0\x9F\x99\x82").has_value());

  std::set<int32_t> want_special;
  for (const auto& id : expected_["special_ids"]) want_special.insert(id.get<int32_t>());
  for (int32_t id = -2; id < loaded_->vocab_size() + 2; ++id) {
    EXPECT_EQ(loaded_->is_special(id), want_special.count(id) == 1) << "id " << id;
  }
}

TEST_P(FixtureTest, ConfigValues) {
  auto expect_id = [](const nlohmann::json& want, std::optional<int32_t> got) {
    if (want.is_null()) {
      EXPECT_FALSE(got.has_value());
    } else {
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(*got, want.get<int32_t>());
    }
  };
  expect_id(expected_["bos_token_id"], loaded_->bos_token_id());
  expect_id(expected_["eos_token_id"], loaded_->eos_token_id());
  EXPECT_FALSE(bare_->bos_token_id().has_value());
  EXPECT_FALSE(bare_->chat_template().has_value());

  // The template comes from chat_template.jinja when present, else from the config: a string,
  // or the entry named "default" of a list.
  const auto config = read_json_file(dir_ + "/tokenizer_config.json");
  std::optional<std::string> want_template;
  if (std::filesystem::exists(dir_ + "/chat_template.jinja")) {
    want_template = read_text_file(dir_ + "/chat_template.jinja");
  } else if (config.contains("chat_template") && config["chat_template"].is_string()) {
    want_template = config["chat_template"].get<std::string>();
  } else if (config.contains("chat_template")) {
    for (const auto& e : config["chat_template"]) {
      if (e["name"] == "default") want_template = e["template"].get<std::string>();
    }
  }
  EXPECT_EQ(loaded_->chat_template(), want_template);
  if (config.contains("add_bos_token")) {
    EXPECT_EQ(loaded_->add_bos_token(), config["add_bos_token"].get<bool>());
  }
}

// Byte-level and byte-fallback BPE lose nothing: decode(encode(x)) gives x back (after the
// U+FFFD replacement of invalid input), on long and random inputs too.
// The fixtures without a text-changing normalizer (qwen2's NFC and lowercasing change the text
// by design, so they are not lossless).
class LosslessFixtureTest : public FixtureTest {};

std::vector<std::string> lossless_fixture_names() {
  std::vector<std::string> names;
  for (const std::string& n : test::fixture_names()) {
    if (n != "qwen2" && n != "qwen2_added") names.push_back(n);
  }
  return names;
}

TEST_P(LosslessFixtureTest, RoundTripIsLossless) {
  std::vector<std::string> inputs(3);
  inputs[0].assign(1, 'x').append(100000, ' ').append(1, 'y');  // a huge run for the regex
  inputs[1].assign(20000, '\n').append(1, 'z').append(30000, '\t');
  inputs[2].assign(50000, 'a');  // one huge word for the merge loop
  std::mt19937 rng(7);
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x17F},      {0x300, 0x36F},  {0x400, 0x4FF},
      {0x4E00, 0x4FFF}, {0x3040, 0x30FF}, {0x1F300, 0x1F6FF}, {0x2000, 0x206F}};
  for (int n = 0; n < 200; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) {
      const auto& r = ranges[rng() % ranges.size()];
      const char32_t cp = r.first + rng() % (r.second - r.first + 1);
      if (cp == 0x2581) continue;  // a literal "▁" reads back as a space in SentencePiece style
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
    inputs.push_back(s);
  }
  for (const std::string& s : inputs) {
    const auto ids = loaded_->encode(s, false);
    ASSERT_EQ(loaded_->decode(ids, false), s) << "input: " << show(s);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest, ::testing::ValuesIn(test::fixture_names()),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Fixtures, LosslessFixtureTest, ::testing::ValuesIn(lossless_fixture_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ls
