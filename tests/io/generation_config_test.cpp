#include "io/generation_config.h"

#include <gtest/gtest.h>

#include "io_test_util.h"

namespace ls {
namespace {

TEST(GenerationConfig, Llama31Instruct) {
  // generation_config.json of Llama-3.1-8B-Instruct.
  auto g = parse_generation_config(R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
      "transformers_version": "4.42.3"})",
                                   "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->bos_token_id, 128000);
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(g->do_sample, true);
  EXPECT_EQ(g->temperature, 0.6);
  EXPECT_EQ(g->top_p, 0.9);
  EXPECT_EQ(g->top_k, std::nullopt);
  EXPECT_EQ(g->repetition_penalty, std::nullopt);
  EXPECT_EQ(g->pad_token_id, std::nullopt);
}

TEST(GenerationConfig, Qwen25Instruct) {
  auto g = parse_generation_config(R"({"bos_token_id": 151643, "pad_token_id": 151643,
      "do_sample": true, "eos_token_id": [151645, 151643], "repetition_penalty": 1.05,
      "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "max_new_tokens": 2048,
      "transformers_version": "4.37.0"})",
                                   "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(g->pad_token_id, 151643);
  EXPECT_EQ(g->repetition_penalty, 1.05);
  EXPECT_EQ(g->top_k, 20);
  EXPECT_EQ(g->min_p, 0.0);
  EXPECT_EQ(g->max_new_tokens, 2048);
}

TEST(GenerationConfig, SingleEosAndNulls) {
  auto g =
      parse_generation_config(R"({"eos_token_id": 2, "temperature": null, "top_k": 1})", "g.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(g->temperature, std::nullopt);
  EXPECT_EQ(g->top_k, 1);
  // An integer temperature is a number too.
  EXPECT_EQ(parse_generation_config(R"({"temperature": 1})", "g.json")->temperature, 1.0);
}

TEST(GenerationConfig, AbsentFileIsEmptyConfig) {
  io_test::TempDir dir;
  auto g = load_generation_config(dir.path());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(g->eos_token_ids.empty());
  EXPECT_EQ(g->temperature, std::nullopt);
  EXPECT_EQ(g->do_sample, std::nullopt);
}

TEST(GenerationConfig, LoadsFromDirectory) {
  io_test::TempDir dir;
  io_test::write_text(dir / "generation_config.json", R"({"eos_token_id": [7, 8], "top_p": 0.5})");
  auto g = load_generation_config(dir.path());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(g->top_p, 0.5);
}

TEST(GenerationConfig, MalformedNamesFileAndField) {
  io_test::TempDir dir;
  const std::string path = (dir / "generation_config.json").string();
  struct Case {
    const char* json;
    StatusCode code;
    const char* fragment;
  };
  const Case cases[] = {
      {R"({"temperature": 0.7,)", StatusCode::kDataLoss, "parse error"},
      {R"([0.7])", StatusCode::kInvalidArgument, "must be a JSON object"},
      {R"({"temperature": "hot"})", StatusCode::kInvalidArgument,
       "field \"temperature\" must be a number, got a string"},
      {R"({"top_k": 2.5})", StatusCode::kInvalidArgument, "field \"top_k\" must be an integer"},
      {R"({"do_sample": 1})", StatusCode::kInvalidArgument,
       "field \"do_sample\" must be a boolean"},
      {R"({"eos_token_id": {"a": 1}})", StatusCode::kInvalidArgument,
       "field \"eos_token_id\" must be an integer or a list of integers"},
      {R"({"eos_token_id": [1, 2.5]})", StatusCode::kInvalidArgument,
       "field \"eos_token_id[1]\" must be an integer"},
      {R"({"bos_token_id": [1, 2]})", StatusCode::kInvalidArgument, "one is expected"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    io_test::write_text(dir / "generation_config.json", c.json);
    auto g = load_generation_config(dir.path());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), c.code) << g.status().to_string();
    EXPECT_EQ(g.status().message().rfind(path + ": ", 0), 0u) << g.status().message();
    EXPECT_NE(g.status().message().find(c.fragment), std::string::npos) << g.status().message();
  }
}

}  // namespace
}  // namespace ls
