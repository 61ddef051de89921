// Token masks (the sorted-vocabulary walk and the cache) against matching each token's bytes
// on its own, at states along random walks; and the constraint's end-of-sequence handling.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/grammar_constraint.h"
#include "structured/json_schema_grammar.h"
#include "structured/regex_grammar.h"
#include "structured/token_mask.h"

namespace ls::grammar {
namespace {

std::shared_ptr<const TokenVocab> random_vocab(std::mt19937& rng, int n) {
  const std::string alphabet = "{}\":, ab1[]\\\xC3\xA9";
  std::vector<std::string> bytes;
  std::vector<bool> excluded;
  for (int i = 0; i < 256; ++i) {  // every single byte, as byte-level vocabularies have
    bytes.push_back(std::string(1, static_cast<char>(i)));
    excluded.push_back(false);
  }
  for (int i = 0; i < n; ++i) {
    std::string s;
    const size_t len = 1 + rng() % 6;
    for (size_t k = 0; k < len; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
    bytes.push_back(s);
    excluded.push_back(rng() % 17 == 0);
  }
  bytes.push_back(bytes[300]);  // a duplicate
  excluded.push_back(false);
  bytes.push_back("");          // no bytes: never allowed
  excluded.push_back(false);
  return std::make_shared<TokenVocab>(std::move(bytes), std::move(excluded));
}

bool token_ok(const Grammar& g, const MatchState& state, const TokenVocab& vocab, int32_t id) {
  if (vocab.excluded(id)) return false;
  MatchState cur = state;
  MatchState next;
  for (char c : vocab.bytes(id)) {
    if (!step(g, cur, static_cast<uint8_t>(c), next)) return false;
    std::swap(cur, next);
  }
  return true;
}

TEST(TokenMask, EqualsPerTokenMatchingAlongRandomWalks) {
  std::mt19937 rng(3);
  auto vocab = random_vocab(rng, 3000);
  std::vector<std::shared_ptr<const Grammar>> grammars;
  grammars.push_back(std::make_shared<const Grammar>(json_object_grammar().value()));
  grammars.push_back(std::make_shared<const Grammar>(
      json_schema_grammar(nlohmann::ordered_json::parse(
          R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array"}},"required":["a"]})"))
          .value()));
  grammars.push_back(std::make_shared<const Grammar>(regex_grammar("(ab|\"1)*[{}]?").value()));
  for (const auto& g : grammars) {
    CompiledGrammar compiled(g, vocab);
    MatchState state = compiled.start();
    for (int stepi = 0; stepi < 40 && !state.dead(); ++stepi) {
      const auto mask = compiled.mask(state);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
        const bool expect = token_ok(*g, state, *vocab, id);
        ASSERT_EQ(mask_has(*mask, id), expect) << "token " << id << " '" << vocab->bytes(id) << "'";
        if (expect) allowed.push_back(id);
      }
      // The cached mask is the same object next time.
      EXPECT_EQ(compiled.mask(state).get(), mask.get());
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      MatchState next;
      for (char c : vocab->bytes(pick)) {
        ASSERT_TRUE(step(*g, state, static_cast<uint8_t>(c), next));
        std::swap(state, next);
      }
    }
  }
}

TEST(GrammarConstraint, MasksLogitsAndAllowsEndOnlyWhenComplete) {
  std::vector<std::string> bytes = {"y", "e", "s", "yes", "n", "o", "<eos>"};
  std::vector<bool> excluded = {false, false, false, false, false, false, true};
  auto vocab = std::make_shared<TokenVocab>(bytes, excluded);
  auto compiled = std::make_shared<CompiledGrammar>(
      std::make_shared<const Grammar>(choice_grammar({"yes", "no"}).value()), vocab);
  GrammarConstraint c(compiled, {6});
  std::vector<float> logits(8, 1.0f);  // one id past the tokenizer's vocabulary
  c.mask_logits(logits);
  const std::vector<bool> first = {true, false, false, true, true, false, false, false};
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(std::isfinite(logits[i]), first[i]) << i;
  EXPECT_FALSE(c.accept(1));  // "e" cannot start
  EXPECT_TRUE(c.accept(3));   // "yes"
  std::fill(logits.begin(), logits.end(), 1.0f);
  c.mask_logits(logits);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(std::isfinite(logits[i]), i == 6) << i;
  EXPECT_TRUE(c.accept(6));
}

}  // namespace
}  // namespace ls::grammar
