#pragma once
// The engine's TokenConstraint for a compiled grammar, and the cache of compiled grammars the
// server keeps per tokenizer (one compile per distinct schema / regex / choice list).

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/token_constraint.h"
#include "structured/matcher.h"
#include "structured/token_mask.h"

namespace ls::grammar {

// Allows the tokens the grammar accepts next, and the end-of-sequence ids once the grammar can
// end (then only those if nothing may follow).
class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> end_ids);
  void mask_logits(std::span<float> logits) override;
  bool accept(int32_t token) override;
  bool can_end() const { return state_.can_end; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  std::vector<int32_t> end_ids_;
  MatchState state_;
  MatchState scratch_;
  bool ended_ = false;
};

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice };

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // schema JSON text (ordered) / regex
  std::vector<std::string> choices;  // kChoice
  bool any_whitespace = true;        // JSON kinds: false gives compact separators only
};

// Compiles specs against one vocabulary; keeps the most recently used ones (and their mask
// caches). Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 64);
  // Errors: kInvalidArgument for a bad or unsupported schema / regex.
  Result<std::shared_ptr<CompiledGrammar>> get(const ConstraintSpec& spec);
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<CompiledGrammar>>> lru_;  // most recent first
};

// Compiles a spec to a grammar (no vocabulary involved).
Result<Grammar> compile_spec(const ConstraintSpec& spec);

}  // namespace ls::grammar
