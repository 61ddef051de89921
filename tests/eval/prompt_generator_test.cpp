// The C++ prompt generator against the contract: the filler pool and the prompts that
// scripts/model/train_tiny.py --emit-only wrote (fixtures/niah_prompts.jsonl, seed 7) must come out
// identical, and generated prompts at other seeds must satisfy the documented format (length
// within one sentence of the target, items where their depth says, answers in the prompt).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "eval/eval_prompt.h"
#include "eval/grid_args.h"
#include "eval/prompt_generator.h"
#include "tokenizer/tokenizer.h"

namespace ls::eval {
namespace {

constexpr const char* kModelDir = "models/tiny-longctx";

std::shared_ptr<const Tokenizer> tokenizer() {
  static std::shared_ptr<const Tokenizer> tok = [] {
    auto t = Tokenizer::load(kModelDir);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::shared_ptr<const Tokenizer>(std::move(*t)) : nullptr;
  }();
  return tok;
}

const PromptGenerator& generator(uint64_t seed) {
  static std::map<uint64_t, PromptGenerator> gens;
  auto it = gens.find(seed);
  if (it == gens.end()) {
    auto g = PromptGenerator::create(tokenizer(), seed);
    EXPECT_TRUE(g.ok());
    it = gens.emplace(seed, std::move(*g)).first;
  }
  return it->second;
}

TEST(FillerPool, MatchesPythonPool) {
  std::ifstream f("tests/eval/fixtures/filler_pool.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  // train_tiny.py's evaluation pool for --seed 7 is seeded with 8.
  const FillerPool& pool = generator(7).pool();
  ASSERT_EQ(pool.texts.size(), j["num_sentences"].get<size_t>());
  EXPECT_DOUBLE_EQ(pool.mean_len, j["mean_len"].get<double>());
  for (size_t i = 0; i < j["texts"].size(); ++i) {
    EXPECT_EQ(pool.texts[i], j["texts"][i].get<std::string>()) << i;
    EXPECT_EQ(pool.lens[i], j["lens"][i].get<int64_t>()) << i;
  }
}

TEST(PromptGenerator, EqualsPythonEmittedPrompts) {
  auto expected = read_prompts_jsonl("tests/eval/fixtures/niah_prompts.jsonl");
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  GridSpec spec{{kAllTasks.begin(), kAllTasks.end()}, {300, 1024}, depth_grid(3), 3, 7};
  auto got = generator(7).grid(spec);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), expected->size());
  for (size_t i = 0; i < got->size(); ++i) {
    const EvalPrompt& g = (*got)[i];
    const EvalPrompt& e = (*expected)[i];
    SCOPED_TRACE(e.id);
    EXPECT_EQ(g.id, e.id);
    EXPECT_EQ(g.task, e.task);
    EXPECT_EQ(g.context_tokens, e.context_tokens);
    EXPECT_EQ(g.num_prompt_tokens, e.num_prompt_tokens);
    EXPECT_EQ(g.depth, e.depth);
    EXPECT_EQ(g.depth_on_grid, e.depth_on_grid);
    EXPECT_EQ(g.prompt, e.prompt);
    EXPECT_EQ(g.answer, e.answer);
    EXPECT_EQ(g.answers, e.answers);
    EXPECT_EQ(g.user_message, e.user_message);
    EXPECT_EQ(g.chat_answer, e.chat_answer);
    EXPECT_EQ(g.needle_depths, e.needle_depths);
    EXPECT_EQ(g.needle_positions, e.needle_positions);
  }
}

TEST(PromptGenerator, DeterministicPerSeedAndCellIndependent) {
  GridSpec spec{{Task::kNiahMultikey, Task::kVt}, {700}, depth_grid(11), 2, 3};
  auto a = generator(3).grid(spec);
  auto b = generator(3).grid(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 4u);
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].prompt, (*b)[i].prompt);
  // A cell's prompts depend on its task, not on which other tasks are evaluated.
  GridSpec only_vt{{Task::kVt}, {700}, depth_grid(11), 2, 3};
  auto c = generator(3).grid(only_vt);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[0].prompt, (*a)[2].prompt);
  // Another seed gives other prompts.
  auto d = generator(4).grid(spec);
  ASSERT_TRUE(d.ok());
  EXPECT_NE((*d)[0].prompt, (*a)[0].prompt);
}

// Splits the haystack line (the prompt's second line) into its elements, each ending with ".".
std::vector<std::string> haystack_elements(const std::string& prompt) {
  const size_t a = prompt.find('\n');
  const size_t b = prompt.find('\n', a + 1);
  const std::string line = prompt.substr(a + 1, b - a - 1);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < line.size()) {
    EXPECT_EQ(line[pos], ' ');
    const size_t end = line.find(". ", pos + 1);
    const size_t stop = end == std::string::npos ? line.size() : end + 1;
    out.push_back(line.substr(pos + 1, stop - pos - 1));
    pos = stop;
  }
  return out;
}

TEST(PromptGenerator, FormatLengthDepthAndNeedlePositions) {
  const Tokenizer& tok = *tokenizer();
  const std::vector<double> depths = {0.0, 0.3, 0.5, 1.0};
  GridSpec spec{{kAllTasks.begin(), kAllTasks.end()}, {600, 2048}, depths, 4, 11};
  auto prompts = generator(11).grid(spec);
  ASSERT_TRUE(prompts.ok());
  ASSERT_EQ(prompts->size(), 4u * 2u * 4u);
  int64_t longest_sentence = 0;
  for (int64_t n : generator(11).pool().lens) longest_sentence = std::max(longest_sentence, n);
  for (const EvalPrompt& p : *prompts) {
    SCOPED_TRACE(p.id);
    const std::vector<int32_t> ids = tok.encode(p.prompt, true);
    // At most L tokens with BOS, short of L by less than one sentence (and a merge or two).
    EXPECT_EQ(static_cast<int32_t>(ids.size()), p.num_prompt_tokens);
    EXPECT_LE(p.num_prompt_tokens, p.context_tokens);
    EXPECT_GT(p.num_prompt_tokens, p.context_tokens - longest_sentence - 2);
    // Every item starts at its recorded token position.
    const std::vector<std::string> elements = haystack_elements(p.prompt);
    std::vector<std::string> items;
    for (const std::string& e : elements) {
      if (e.rfind("The special magic number for ", 0) == 0 || e.rfind("VAR ", 0) == 0)
        items.push_back(e);
    }
    ASSERT_EQ(items.size(), p.needle_positions.size());
    for (size_t k = 0; k < items.size(); ++k) {
      const auto pos = static_cast<size_t>(p.needle_positions[k]);
      const std::vector<int32_t> item_ids = tok.encode(" " + items[k], false);
      ASSERT_LE(pos + item_ids.size(), ids.size());
      // The last element merges with the "\n" that follows; compare all but its final token.
      const size_t n = item_ids.size() - 1;
      EXPECT_TRUE(std::equal(item_ids.begin(), item_ids.begin() + static_cast<ptrdiff_t>(n),
                             ids.begin() + static_cast<ptrdiff_t>(pos)))
          << items[k];
    }
    if (p.task == "niah_single") {
      // Depth d: the needle precedes filler sentence round(d * m) of m.
      ASSERT_EQ(items.size(), 1u);
      const auto m = static_cast<double>(elements.size() - 1);
      const auto at = std::find(elements.begin(), elements.end(), items[0]) - elements.begin();
      EXPECT_EQ(static_cast<double>(at), std::nearbyint(p.depth * m));
      EXPECT_TRUE(p.depth_on_grid);
      EXPECT_NE(std::find(depths.begin(), depths.end(), p.depth), depths.end());
      EXPECT_NE(items[0].find(p.answer), std::string::npos);
    }
    // Every answer item occurs in the haystack, and the prompt ends with the answer prefix.
    for (const std::string& a : p.answers) EXPECT_NE(p.prompt.find(a), std::string::npos);
    EXPECT_EQ(p.prompt.rfind("\nAnswer: The ") != std::string::npos, true);
    EXPECT_EQ(p.chat_answer.substr(p.chat_answer.size() - p.answer.size()), p.answer);
  }
}

TEST(PromptGenerator, RandomDepthPromptsAreApartFromTheGrid) {
  GridSpec spec{{Task::kNiahSingle}, {500}, depth_grid(11), 3, 0};
  auto rnd = generator(0).random_depth_prompts(spec);
  auto grid = generator(0).grid(spec);
  ASSERT_TRUE(rnd.ok() && grid.ok());
  ASSERT_EQ(rnd->size(), 3u);
  for (const EvalPrompt& p : *rnd) {
    EXPECT_FALSE(p.depth_on_grid);
    for (const EvalPrompt& g : *grid) EXPECT_NE(p.prompt, g.prompt);
  }
}

TEST(GridArgs, ParsesListsCountsAndRejectsBadInput) {
  auto l = parse_lengths("2048, 4K,16k");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<int32_t>{2048, 4096, 16384}));
  EXPECT_FALSE(parse_lengths("0").ok());
  EXPECT_FALSE(parse_lengths("abc").ok());
  EXPECT_FALSE(parse_lengths("").ok());
  auto d = parse_depths("5");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
  auto d11 = parse_depths("11");
  ASSERT_TRUE(d11.ok());
  EXPECT_EQ((*d11)[3], 0.3);
  auto dl = parse_depths("0,0.5,1");
  ASSERT_TRUE(dl.ok());
  EXPECT_EQ(*dl, (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_FALSE(parse_depths("1.5").ok());
  EXPECT_FALSE(parse_depths("0").ok());
  auto t = parse_tasks("vt,niah_single");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (std::vector<Task>{Task::kVt, Task::kNiahSingle}));
  EXPECT_EQ(parse_tasks("all")->size(), 4u);
  EXPECT_FALSE(parse_tasks("niah").ok());
}

}  // namespace
}  // namespace ls::eval
