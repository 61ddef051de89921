#include "structured/grammar_constraint.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "structured/json_schema_grammar.h"
#include "structured/regex_grammar.h"

namespace ls::grammar {

GrammarConstraint::GrammarConstraint(std::shared_ptr<CompiledGrammar> grammar,
                                     std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), end_ids_(std::move(end_ids)), state_(grammar_->start()) {}

void GrammarConstraint::mask_logits(std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // End ids keep their logit when the grammar may end here (or already ended).
  thread_local std::vector<std::pair<int32_t, float>> saved;
  saved.clear();
  const bool may_end = ended_ || state_.can_end;
  if (may_end) {
    for (int32_t id : end_ids_) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) saved.emplace_back(id, logits[id]);
    }
  }
  const auto vocab = static_cast<size_t>(grammar_->vocab().vocab_size());
  if (ended_ || state_.n == 0) {
    std::fill(logits.begin(), logits.end(), kNegInf);
  } else {
    const std::shared_ptr<const std::vector<uint32_t>> mask = grammar_->mask(state_);
    const uint32_t* words = mask->data();
    const size_t n = std::min(vocab, logits.size());
    for (size_t w = 0; w * 32 < n; ++w) {
      const uint32_t bits = words[w];
      if (bits == 0xFFFFFFFFu) continue;
      const size_t end = std::min(n, w * 32 + 32);
      for (size_t i = w * 32; i < end; ++i) {
        if (!((bits >> (i - w * 32)) & 1u)) logits[i] = kNegInf;
      }
    }
    for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
  }
  for (const auto& [id, value] : saved) logits[static_cast<size_t>(id)] = value;
}

bool GrammarConstraint::accept(int32_t token) {
  const bool is_end = std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
  if (ended_) return is_end;
  if (is_end && state_.can_end) {
    ended_ = true;
    return true;
  }
  const TokenVocab& vocab = grammar_->vocab();
  if (token < 0 || token >= vocab.vocab_size() || vocab.excluded(token)) return false;
  MatchState cur = state_;
  for (char ch : vocab.bytes(token)) {
    if (!step(grammar_->grammar(), cur, static_cast<uint8_t>(ch), scratch_)) return false;
    std::swap(cur, scratch_);
  }
  state_ = std::move(cur);
  return true;
}

Result<Grammar> compile_spec(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintKind::kJsonObject:
      return json_object_grammar(spec.any_whitespace);
    case ConstraintKind::kJsonSchema: {
      nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(spec.text, nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) return invalid_argument("the JSON schema is not valid JSON");
      return json_schema_grammar(schema, spec.any_whitespace);
    }
    case ConstraintKind::kRegex:
      return regex_grammar(spec.text);
    case ConstraintKind::kChoice:
      return choice_grammar(spec.choices);
  }
  return invalid_argument("unknown constraint kind");
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

Result<std::shared_ptr<CompiledGrammar>> GrammarCache::get(const ConstraintSpec& spec) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(spec.kind)));
  key += spec.any_whitespace ? 'w' : 'c';
  key += spec.text;
  for (const std::string& c : spec.choices) {
    key += '\0';
    key += std::to_string(c.size()) + ":" + c;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
  }
  LS_ASSIGN_OR_RETURN(Grammar g, compile_spec(spec));
  auto compiled = std::make_shared<CompiledGrammar>(
      std::make_shared<const Grammar>(std::move(g)), vocab_);
  if (compiled->start().dead()) return invalid_argument("the constraint accepts no output");
  std::lock_guard<std::mutex> lock(mu_);
  lru_.emplace_front(std::move(key), compiled);
  if (lru_.size() > capacity_) lru_.pop_back();
  return compiled;
}

}  // namespace ls::grammar
