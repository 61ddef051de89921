// Tokenizers read from GGUF metadata against Hugging Face `tokenizers`: the fixture tokenizers
// (tests/fixtures/tokenizers/{qwen2,llama3}) converted to GGUF metadata as llama.cpp's
// convert_hf_to_gguf.py does (scripts/fixtures/make_gguf_fixtures.py), then the hard strings of
// expected.json encoded and decoded from the .gguf alone must give HF's ids and text.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
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

// Every hard string of a reference file (made by scripts/fixtures/) encodes (with and without
// special tokens) and decodes (with and without skipping them) as the reference did, and so do
// its random id sequences.
void expect_reference_encodings(const Tokenizer& tok, const nlohmann::json& expected) {
  size_t checked = 0;
  for (const auto& c : expected["cases"]) {
    const std::string input = case_input(c);
    const auto ids = test::ids_of(c["ids"]);
    EXPECT_EQ(tok.encode(input, true), ids) << "input: " << show(input);
    EXPECT_EQ(tok.encode(input, false), test::ids_of(c["ids_no_special"]))
        << "input: " << show(input);
    EXPECT_EQ(tok.decode(ids, false), c["decode"].get<std::string>()) << show(input);
    EXPECT_EQ(tok.decode(ids, true), c["decode_skip"].get<std::string>()) << show(input);
    ++checked;
  }
  EXPECT_GE(checked, 70u);
  for (const auto& r : expected["random_decodes"]) {
    const auto ids = test::ids_of(r["ids"]);
    EXPECT_EQ(tok.decode(ids, false), r["decode"].get<std::string>()) << r["ids"].dump();
    EXPECT_EQ(tok.decode(ids, true), r["decode_skip"].get<std::string>()) << r["ids"].dump();
  }
}

class GgufTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizer, HardStringsMatchHuggingFace) {
  const std::string name = GetParam();
  ASSERT_TRUE(Tokenizer::in_gguf(gguf_path(name)));
  auto tok = Tokenizer::load(gguf_path(name));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto expected = test::read_json_file(test::fixture_dir(name) + "/expected.json");
  expect_reference_encodings(**tok, expected);
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

// ---- SentencePiece vocabularies (tokenizer.ggml.model "llama") ----
//
// tests/fixtures/gguf/tokenizer-spm.gguf: a SentencePiece BPE model (byte_fallback) trained on
// tests/fixtures/gguf/spm-corpus.txt and written as llama.cpp's converter writes it
// (scripts/fixtures/make_gguf_spm_fixture.py). tokenizer-spm.expected.json holds what
// transformers' GGUF tokenizer gives on the hard strings (and sentencepiece's own ids, which
// docs/gguf.md compares).

namespace ls {
namespace {

const std::filesystem::path kSpmGguf = "tests/fixtures/gguf/tokenizer-spm.gguf";

nlohmann::json spm_expected() {
  return test::read_json_file("tests/fixtures/gguf/tokenizer-spm.expected.json");
}

TEST(GgufTokenizerSpm, HardStringsMatchTransformers) {
  ASSERT_TRUE(Tokenizer::in_gguf(kSpmGguf));
  auto tok = Tokenizer::load(kSpmGguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto expected = spm_expected();
  expect_reference_encodings(**tok, expected);
  EXPECT_EQ((*tok)->bos_token_id(), expected["bos_token_id"].get<int32_t>());
  EXPECT_EQ((*tok)->eos_token_id(), expected["eos_token_id"].get<int32_t>());
}

// The metadata of the fixture, to write variants of it.
struct SpmMetadata {
  std::vector<std::string> tokens;
  std::optional<std::vector<float>> scores;
  std::optional<std::vector<int32_t>> types;
  std::optional<std::vector<std::string>> merges;
  std::optional<int32_t> bos, eos, unk;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

SpmMetadata fixture_metadata() {
  auto file = GgufFile::open(kSpmGguf);
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  const GgufFile& f = **file;
  SpmMetadata m;
  m.tokens = **f.opt_string_array("tokenizer.ggml.tokens");
  m.scores.emplace();
  for (double s : **f.opt_float_array("tokenizer.ggml.scores")) {
    m.scores->push_back(static_cast<float>(s));
  }
  m.types.emplace();
  for (int64_t t : **f.opt_int_array("tokenizer.ggml.token_type")) {
    m.types->push_back(static_cast<int32_t>(t));
  }
  m.bos = static_cast<int32_t>(**f.opt_int("tokenizer.ggml.bos_token_id"));
  m.eos = static_cast<int32_t>(**f.opt_int("tokenizer.ggml.eos_token_id"));
  m.unk = static_cast<int32_t>(**f.opt_int("tokenizer.ggml.unknown_token_id"));
  m.add_bos = **f.opt_bool("tokenizer.ggml.add_bos_token");
  m.add_eos = **f.opt_bool("tokenizer.ggml.add_eos_token");
  m.add_space_prefix = **f.opt_bool("tokenizer.ggml.add_space_prefix");
  return m;
}

std::filesystem::path write_spm(const SpmMetadata& m, const std::string& name) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", m.tokens);
  if (m.scores) w.add_f32s("tokenizer.ggml.scores", *m.scores);
  if (m.types) w.add_i32s("tokenizer.ggml.token_type", *m.types);
  if (m.merges) w.add_strings("tokenizer.ggml.merges", *m.merges);
  if (m.bos) w.add_i32("tokenizer.ggml.bos_token_id", *m.bos);
  if (m.eos) w.add_i32("tokenizer.ggml.eos_token_id", *m.eos);
  if (m.unk) w.add_i32("tokenizer.ggml.unknown_token_id", *m.unk);
  if (m.add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *m.add_bos);
  if (m.add_eos) w.add_bool("tokenizer.ggml.add_eos_token", *m.add_eos);
  if (m.add_space_prefix) w.add_bool("tokenizer.ggml.add_space_prefix", *m.add_space_prefix);
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / ("spm-" + name + ".gguf");
  const Status s = w.write(path);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return path;
}

int32_t id_of(const Tokenizer& tok, std::string_view token) {
  const std::optional<int32_t> id = tok.token_to_id(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(GgufTokenizerSpm, RewrittenFixtureEncodesTheSame) {
  // The writer round trip keeps the behaviour (so the variants below differ only where changed).
  auto a = Tokenizer::load(kSpmGguf);
  auto b = Tokenizer::load(write_spm(fixture_metadata(), "same"));
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& c : spm_expected()["cases"]) {
    const std::string input = case_input(c);
    EXPECT_EQ((*b)->encode(input), (*a)->encode(input)) << show(input);
  }
}

TEST(GgufTokenizerSpm, TokenTypesMayBeUndefinedOrAbsent) {
  auto typed = Tokenizer::load(kSpmGguf);
  ASSERT_TRUE(typed.ok());
  // Type 0 (llama.cpp's "undefined") for every normal token: read as normal, as llama.cpp does.
  SpmMetadata m = fixture_metadata();
  for (int32_t& t : *m.types) t = t == 1 ? 0 : t;
  auto undefined = Tokenizer::load(write_spm(m, "type-undefined"));
  ASSERT_TRUE(undefined.ok()) << undefined.status().to_string();
  // No token types: transformers makes the unknown, bos and eos tokens special (the fixture's
  // only control and unknown tokens), so every reference case encodes as with the types.
  m = fixture_metadata();
  m.types.reset();
  auto untyped = Tokenizer::load(write_spm(m, "untyped"));
  ASSERT_TRUE(untyped.ok()) << untyped.status().to_string();
  for (const auto& c : spm_expected()["cases"]) {
    const std::string input = case_input(c);
    EXPECT_EQ((*undefined)->encode(input), (*typed)->encode(input)) << show(input);
    EXPECT_EQ((*untyped)->encode(input), (*typed)->encode(input)) << show(input);
  }
  for (int32_t id : {*m.bos, *m.eos, *m.unk}) {
    EXPECT_TRUE((*untyped)->is_special(id)) << id;
    EXPECT_EQ((*untyped)->is_special(id), (*typed)->is_special(id)) << id;
  }
  EXPECT_FALSE((*untyped)->is_special(id_of(**untyped, "<0xE9>")));
}

TEST(GgufTokenizerSpm, MergesInTheFileReplaceTheScores) {
  // The merges derived from the fixture's scores, written as tokenizer.ggml.merges of a file
  // without scores, give the same tokenizer.
  auto derived = Tokenizer::load(kSpmGguf);
  ASSERT_TRUE(derived.ok());
  const auto json = nlohmann::json::parse((*derived)->source_json());
  SpmMetadata m = fixture_metadata();
  m.scores.reset();
  m.merges.emplace();
  for (const auto& pair : json["model"]["merges"]) {
    m.merges->push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  }
  ASSERT_GT(m.merges->size(), 100u);
  auto given = Tokenizer::load(write_spm(m, "merges"));
  ASSERT_TRUE(given.ok()) << given.status().to_string();
  for (const auto& c : spm_expected()["cases"]) {
    EXPECT_EQ((*given)->encode(case_input(c)), test::ids_of(c["ids"])) << show(case_input(c));
  }
  // Without them (or with only the first few), the text is spelled in shorter pieces.
  m.merges->resize(10);
  auto few = Tokenizer::load(write_spm(m, "few-merges"));
  ASSERT_TRUE(few.ok()) << few.status().to_string();
  EXPECT_GT((*few)->encode("The quick brown fox").size(),
            (*given)->encode("The quick brown fox").size());
}

TEST(GgufTokenizerSpm, BosEosFollowTheMetadata) {
  auto tok = Tokenizer::load(kSpmGguf);
  ASSERT_TRUE(tok.ok());
  const int32_t bos = *(*tok)->bos_token_id();
  const int32_t eos = *(*tok)->eos_token_id();
  std::vector<int32_t> plain = (*tok)->encode("Hello world", false);
  std::vector<int32_t> with = (*tok)->encode("Hello world", true);
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], bos);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), plain);
  EXPECT_EQ((*tok)->encode("", true), std::vector<int32_t>{bos});
  EXPECT_EQ((*tok)->decode(with, true), "Hello world");

  SpmMetadata m = fixture_metadata();
  m.add_bos = false;
  m.add_eos = true;
  auto eos_only = Tokenizer::load(write_spm(m, "eos-only"));
  ASSERT_TRUE(eos_only.ok()) << eos_only.status().to_string();
  std::vector<int32_t> want = plain;
  want.push_back(eos);
  EXPECT_EQ((*eos_only)->encode("Hello world", true), want);
  EXPECT_EQ((*eos_only)->encode("Hello world", false), plain);
  EXPECT_EQ((*eos_only)->add_bos_token(), false);

  // Without the key, bos is added (llama.cpp's default for SentencePiece vocabularies).
  m = fixture_metadata();
  m.add_bos.reset();
  auto unset = Tokenizer::load(write_spm(m, "bos-unset"));
  ASSERT_TRUE(unset.ok()) << unset.status().to_string();
  EXPECT_EQ((*unset)->encode("Hello world", true), with);

  // Without the key and without a bos token, the file loads and nothing is added (llama.cpp).
  m.bos.reset();
  auto no_bos = Tokenizer::load(write_spm(m, "bos-none"));
  ASSERT_TRUE(no_bos.ok()) << no_bos.status().to_string();
  EXPECT_EQ((*no_bos)->encode("Hello world", true), plain);
  EXPECT_EQ((*no_bos)->add_bos_token(), false);
}

TEST(GgufTokenizerSpm, NoSpacePrefix) {
  SpmMetadata m = fixture_metadata();
  m.add_space_prefix = false;
  auto tok = Tokenizer::load(write_spm(m, "no-prefix"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto with_prefix = Tokenizer::load(kSpmGguf);
  ASSERT_TRUE(with_prefix.ok());
  // "x y" without the prefix is "▁x y" with it, minus the first space.
  EXPECT_EQ((*tok)->encode(" Hello world", false), (*with_prefix)->encode("Hello world", false));
  const std::vector<int32_t> ids = (*tok)->encode("Hello world", false);
  EXPECT_EQ((*tok)->decode(ids), "Hello world");
  EXPECT_EQ((*tok)->decode((*tok)->encode(" Hello", false)), " Hello");
}

TEST(GgufTokenizerSpm, CharactersOutsideTheVocabularyFallBackToBytes) {
  auto tok = Tokenizer::load(kSpmGguf);
  ASSERT_TRUE(tok.ok());
  // U+9F98 (3 UTF-8 bytes E9 BE 98) is not a piece of the fixture; U+1F680 is in the corpus
  // once, below the character coverage.
  ASSERT_FALSE((*tok)->token_to_id("\xE9\xBE\x98").has_value());
  const std::vector<int32_t> ids = (*tok)->encode("\xE9\xBE\x98", false);
  const std::vector<int32_t> want = {id_of(**tok, "\xE2\x96\x81"), id_of(**tok, "<0xE9>"),
                                     id_of(**tok, "<0xBE>"), id_of(**tok, "<0x98>")};
  EXPECT_EQ(ids, want);
  EXPECT_EQ((*tok)->decode(ids), "\xE9\xBE\x98");
  for (int32_t id : want) EXPECT_FALSE((*tok)->is_special(id));
  EXPECT_TRUE((*tok)->is_byte_token(want[1]));
  // A lone byte token decodes to U+FFFD, as in HF's ByteFallback.
  EXPECT_EQ((*tok)->decode(std::vector<int32_t>{want[1]}), "\xEF\xBF\xBD");
}

TEST(GgufTokenizerSpm, ControlAndUserDefinedTokens) {
  SpmMetadata m = fixture_metadata();
  // A user-defined piece (type 4, as convert_hf_to_gguf.py writes added_tokens.json entries) is
  // matched whole in text, like the control tokens, but is not special.
  m.tokens.push_back("[INST]");
  m.scores->push_back(0.0f);
  m.types->push_back(4);
  auto tok = Tokenizer::load(write_spm(m, "user-defined"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const int32_t inst = static_cast<int32_t>(m.tokens.size()) - 1;
  const int32_t eos = *(*tok)->eos_token_id();
  // Hugging Face tokenizers 0.23.2, on transformers' tokenizer.json for the fixture with
  // AddedToken("[INST]", normalized=False, special=False) added: the text after an added token is
  // normalized on its own, so " hi" gets the "▁" prefix too ("▁▁" "h" "i"), and decoding keeps
  // both spaces (Strip only looks at the start of the whole text).
  const std::vector<int32_t> ids = (*tok)->encode("[INST] hi</s>", false);
  const std::vector<int32_t> want = {inst, id_of(**tok, "\xE2\x96\x81\xE2\x96\x81"),
                                     id_of(**tok, "h"), id_of(**tok, "i"), eos};
  EXPECT_EQ(ids, want);
  EXPECT_FALSE((*tok)->is_special(inst));
  EXPECT_TRUE((*tok)->is_special(eos));
  EXPECT_EQ((*tok)->decode(ids, true), "[INST]  hi");
  EXPECT_EQ((*tok)->decode(ids, false), "[INST]  hi</s>");
}

// Each malformed variant is refused with a message naming the key.
TEST(GgufTokenizerSpm, MalformedMetadataIsRefused) {
  struct Case {
    std::string name;
    std::function<void(SpmMetadata&)> change;
    std::string key;
  };
  const std::vector<Case> cases = {
      {"no-scores", [](SpmMetadata& m) { m.scores.reset(); }, "tokenizer.ggml.scores"},
      {"short-scores", [](SpmMetadata& m) { m.scores->pop_back(); }, "tokenizer.ggml.scores"},
      {"nan-score",
       [](SpmMetadata& m) { (*m.scores)[5] = std::numeric_limits<float>::quiet_NaN(); },
       "tokenizer.ggml.scores[5]"},
      {"short-types", [](SpmMetadata& m) { m.types->pop_back(); }, "tokenizer.ggml.token_type"},
      {"bad-type", [](SpmMetadata& m) { (*m.types)[7] = 9; }, "tokenizer.ggml.token_type[7]"},
      {"bad-byte-token", [](SpmMetadata& m) { (*m.types)[0] = 6; },
       "tokenizer.ggml.token_type[0]"},
      {"repeated-token", [](SpmMetadata& m) { m.tokens[10] = m.tokens[9]; },
       "tokenizer.ggml.tokens"},
      {"bos-out-of-range", [](SpmMetadata& m) { m.bos = static_cast<int32_t>(m.tokens.size()); },
       "tokenizer.ggml.bos_token_id"},
      {"eos-negative", [](SpmMetadata& m) { m.eos = -1; }, "tokenizer.ggml.eos_token_id"},
      {"unk-out-of-range", [](SpmMetadata& m) { m.unk = 1 << 30; },
       "tokenizer.ggml.unknown_token_id"},
      {"add-bos-without-bos",
       [](SpmMetadata& m) {
         m.bos.reset();
         m.add_bos = true;
       },
       "tokenizer.ggml.bos_token_id"},
      {"no-tokens", [](SpmMetadata& m) { m.tokens.clear(); }, "tokenizer.ggml.tokens"},
      {"bad-merge", [](SpmMetadata& m) { m.merges = std::vector<std::string>{"a b", "ab"}; },
       "tokenizer.ggml.merges[1]"},
  };
  for (const Case& c : cases) {
    SpmMetadata m = fixture_metadata();
    c.change(m);
    auto tok = Tokenizer::load(write_spm(m, c.name));
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_NE(tok.status().message().find(c.key), std::string::npos)
        << c.name << ": " << tok.status().to_string();
    EXPECT_NE(tok.status().message().find("spm-" + c.name + ".gguf"), std::string::npos)
        << c.name << ": " << tok.status().to_string();
  }
}

}  // namespace
}  // namespace ls
