// Single normalizers, pre-tokenizers and decoders, and small hand-made tokenizers (BPE options,
// post-processors, added-token id assignment), against what HF `tokenizers` computes on the
// same JSON (tests/fixtures/tokenizers/components.json,
// scripts/fixtures/make_tokenizer_fixtures.py). Components HF rejects must be rejected here too.

#include <gtest/gtest.h>

#include <set>

#include "test_util.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {

// Types HF has that this implementation deliberately leaves out (rejected as unimplemented).
const std::set<std::string> kUnsupported = {"Whitespace"};

const nlohmann::json& components() {
  static const nlohmann::json j =
      test::read_json_file(std::string(test::kFixtureRoot) + "/components.json");
  return j;
}

template <typename ParseFn>
bool check_parse(const nlohmann::json& entry, ParseFn&& parse, int& num_checked) {
  auto parsed = parse(entry["json"]);
  if (entry.value("error", false)) {
    EXPECT_FALSE(parsed.ok()) << "HF rejects " << entry["json"].dump();
    return false;
  }
  if (!parsed.ok() && parsed.status().code() == StatusCode::kUnimplemented &&
      kUnsupported.count(entry["json"]["type"].get<std::string>())) {
    return false;
  }
  EXPECT_TRUE(parsed.ok()) << entry["json"].dump() << ": " << parsed.status().to_string();
  ++num_checked;
  return parsed.ok();
}

TEST(Components, Normalizers) {
  int checked = 0;
  for (const auto& e : components()["entries"]) {
    if (e["kind"] != "normalizer") continue;
    if (!check_parse(
            e, [](const auto& j) { return tok::parse_normalizer(j); }, checked))
      continue;
    auto n = tok::parse_normalizer(e["json"]);
    for (const auto& c : e["cases"]) {
      std::string text = c[0].get<std::string>();
      (*n)->normalize(text);
      EXPECT_EQ(text, c[1].get<std::string>())
          << e["json"].dump() << " on " << test::show(c[0].get<std::string>());
    }
  }
  EXPECT_GE(checked, 12);
}

TEST(Components, PreTokenizers) {
  int checked = 0;
  for (const auto& e : components()["entries"]) {
    if (e["kind"] != "pre_tokenizer") continue;
    if (!check_parse(
            e, [](const auto& j) { return tok::parse_pre_tokenizer(j); }, checked)) {
      continue;
    }
    auto p = tok::parse_pre_tokenizer(e["json"]);
    for (const auto& c : e["cases"]) {
      const std::string input = c[0].get<std::string>();
      std::vector<tok::Piece> pieces;
      if (!input.empty()) pieces.push_back({input, /*at_start=*/true});
      (*p)->pre_tokenize(pieces);
      std::vector<std::string> got;
      for (const auto& piece : pieces) got.push_back(piece.text);
      EXPECT_EQ(got, c[1].get<std::vector<std::string>>())
          << e["json"].dump() << " on " << test::show(input);
    }
  }
  EXPECT_GE(checked, 180);
}

TEST(Components, Decoders) {
  int checked = 0;
  for (const auto& e : components()["entries"]) {
    if (e["kind"] != "decoder") continue;
    if (!check_parse(
            e, [](const auto& j) { return tok::parse_decoder(j); }, checked))
      continue;
    auto d = tok::parse_decoder(e["json"]);
    for (const auto& c : e["cases"]) {
      auto tokens = c[0].get<std::vector<std::string>>();
      (*d)->decode_chain(tokens);
      std::string got;
      for (const auto& t : tokens) got += t;
      EXPECT_EQ(got, c[1].get<std::string>()) << e["json"].dump() << " on " << c[0].dump();
    }
  }
  EXPECT_GE(checked, 12);
}

TEST(Components, SmallTokenizers) {
  int checked = 0;
  for (const auto& e : components()["entries"]) {
    if (e["kind"] != "tokenizer") continue;
    const std::string name = e["name"].get<std::string>();
    auto t = Tokenizer::from_json(e["json"].dump());
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
    EXPECT_EQ((*t)->vocab_size(), e["vocab_size"].get<int32_t>()) << name;
    for (const auto& c : e["cases"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ((*t)->encode(text, true), test::ids_of(c["ids"])) << name << " on " << text;
      EXPECT_EQ((*t)->encode(text, false), test::ids_of(c["ids_no_special"]))
          << name << " on " << text;
      const auto ids = test::ids_of(c["ids"]);
      EXPECT_EQ((*t)->decode(ids, false), c["decode"].get<std::string>()) << name << " " << text;
      EXPECT_EQ((*t)->decode(ids, true), c["decode_skip"].get<std::string>())
          << name << " " << text;
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace ls
