// Bad tokenizer files end in one clear error (never a crash), and the error names what is
// wrong; unsupported but valid files are told apart (kUnimplemented).

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {

// A minimal valid tokenizer.json with `extra` (a JSON object's members) replacing fields.
std::string minimal(const std::string& model, const std::string& extra = "") {
  nlohmann::json j = nlohmann::json::parse(
      R"({"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,)"
      R"("post_processor":null,"decoder":null})");
  j["model"] = nlohmann::json::parse(model);
  if (!extra.empty()) {
    std::string members = "{";
    members.append(extra, 0, extra.size() - 1);  // drop the trailing comma
    members.push_back('}');
    j.update(nlohmann::json::parse(members));
  }
  return j.dump();
}

const std::string kModel = R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]})";

Status load_error(const std::string& json, const std::string& config = "") {
  auto t = Tokenizer::from_json(json, config);
  return t.ok() ? Status() : t.status();
}

TEST(TokenizerErrors, MalformedFilesAreRejectedWithTheReason) {
  ASSERT_TRUE(Tokenizer::from_json(minimal(kModel)).ok());
  struct Case {
    std::string json;
    StatusCode code;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {"", StatusCode::kDataLoss, "not valid JSON"},
      {"{\"model\":", StatusCode::kDataLoss, "not valid JSON"},
      {"[1,2]", StatusCode::kDataLoss, "JSON object"},
      {R"({"version":"1.0"})", StatusCode::kInvalidArgument, "model"},
      {minimal(R"({"type":"BPE","vocab":{"a":-1}})"), StatusCode::kInvalidArgument, "out of range"},
      {minimal(R"({"type":"BPE","vocab":{"a":"x"}})"), StatusCode::kInvalidArgument, "integer"},
      {minimal(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","c"]]})"),
       StatusCode::kInvalidArgument, "'c' is not in the vocabulary"},
      {minimal(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","b"]]})"),
       StatusCode::kInvalidArgument, "merged token 'ab'"},
      {minimal(R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a  b"]})"),
       StatusCode::kInvalidArgument, "one space"},
      {minimal(R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[3]})"),
       StatusCode::kInvalidArgument, "merges[0]"},
      {minimal(R"({"type":"BPE","vocab":{"a":2000000000}})"), StatusCode::kInvalidArgument,
       "entries"},
      {minimal(R"({"type":"WordPiece","vocab":{"a":0}})"), StatusCode::kUnimplemented, "WordPiece"},
      {minimal(kModel, R"("normalizer":{"type":"Precompiled"},)"), StatusCode::kUnimplemented,
       "Precompiled"},
      {minimal(kModel, R"("pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a"},)"
                       R"("behavior":"Isolated","invert":false},)"),
       StatusCode::kInvalidArgument, "does not compile"},
      {minimal(kModel, R"("added_tokens":[{"id":5}],)"), StatusCode::kInvalidArgument, "content"},
      {minimal(kModel, R"("post_processor":{"type":"TemplateProcessing","single":[)"
                       R"({"SpecialToken":{"id":"<s>","type_id":0}}],"special_tokens":{}},)"),
       StatusCode::kInvalidArgument, "<s>"},
      {minimal(kModel, R"("post_processor":{"type":"TemplateProcessing","single":[)"
                       R"({"SpecialToken":{"id":"<s>","type_id":0}}],)"
                       R"("special_tokens":{"<s>":{"id":"<s>","ids":[77],"tokens":["<s>"]}}},)"),
       StatusCode::kInvalidArgument, "77"},
  };
  for (const Case& c : cases) {
    const Status s = load_error(c.json);
    EXPECT_FALSE(s.ok()) << c.json;
    EXPECT_EQ(s.code(), c.code) << c.json << " -> " << s.to_string();
    EXPECT_NE(s.message().find(c.mentions), std::string::npos) << s.to_string();
    EXPECT_EQ(s.message().rfind("tokenizer.json", 0), 0u) << s.to_string();
  }
  EXPECT_FALSE(load_error(minimal(kModel), "{not json").ok());
  EXPECT_FALSE(load_error(minimal(kModel), R"({"chat_template": 5})").ok());
  EXPECT_FALSE(load_error(minimal(kModel), R"({"bos_token": [1]})").ok());
}

TEST(TokenizerErrors, MissingDirectoryOrFile) {
  auto t = Tokenizer::load("tests/fixtures/tokenizers/no_such_dir");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos);
}

TEST(TokenizerErrors, ConfigTokensResolveThroughTheVocabulary) {
  const std::string json = minimal(
      kModel, R"("added_tokens":[{"id":3,"content":"<s>","single_word":false,"lstrip":false,)"
              R"("rstrip":false,"normalized":false,"special":true}],)");
  auto t = Tokenizer::from_json(
      json, R"({"bos_token":{"content":"<s>","__type":"AddedToken"},"eos_token":"ab",)"
            R"("add_bos_token":false,"chat_template":[{"name":"x","template":"X"}]})");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->bos_token_id(), 3);
  EXPECT_EQ((*t)->eos_token_id(), 2);
  EXPECT_EQ((*t)->add_bos_token(), false);
  // No template named "default": the first one serves.
  EXPECT_EQ((*t)->chat_template(), std::optional<std::string>("X"));
  EXPECT_EQ((*t)->encode("ab<s>ba"), (std::vector<int32_t>{2, 3, 1, 0}));
}

// encode/decode are const and safe from many threads (the word cache is shared).
TEST(TokenizerThreads, ConcurrentEncodeMatchesSequential) {
  auto t = Tokenizer::load(test::fixture_dir("llama3"));
  ASSERT_TRUE(t.ok());
  const auto expected = test::read_json_file(test::fixture_dir("llama3") + "/expected.json");
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> want;
  for (const auto& c : expected["cases"]) {
    if (!c.contains("text")) continue;
    inputs.push_back(c["text"].get<std::string>());
    want.push_back(test::ids_of(c["ids"]));
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          const size_t j = (i * 7 + static_cast<size_t>(k)) % inputs.size();
          if ((*t)->encode(inputs[j]) != want[j]) ++failures[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(failures[k], 0) << "thread " << k;
}

}  // namespace
}  // namespace ls
