#pragma once
// Which tokens a grammar allows next: a bitmask over the vocabulary ([ceil(vocab / 32)] uint32,
// bit id % 32 of word id / 32 set when id is allowed), and a per-grammar cache of masks by
// matcher state.
//
// The mask walks the tokens in byte order (TokenVocab), keeping one matcher state per prefix
// length: a token costs only the bytes past its common prefix with the one before, and a prefix
// the grammar rejects skips every token under it. A token is allowed when the grammar accepts all
// of its bytes (the parse may then continue or be complete).
//
// Cost: one walk per distinct matcher state. Generation revisits the same states (inside a JSON
// string the state is the same for every character), so CompiledGrammar caches masks by the
// state's canonical key; repeated requests with the same schema share the cache, and a walk is
// only paid the first time a state is seen.

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"
#include "structured/token_vocab.h"

namespace ls::grammar {

inline size_t mask_words(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }
inline bool mask_has(std::span<const uint32_t> mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

// Fills `mask` ([mask_words(vocab.vocab_size())]) for `state`; excluded tokens are never set.
void compute_token_mask(const Grammar& g, const MatchState& state, const TokenVocab& vocab,
                        std::span<uint32_t> mask);

// A grammar ready for decoding with one vocabulary: the grammar, its start state and the mask
// cache. Thread-safe (requests on any thread may share it).
class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  const MatchState& start() const { return start_; }

  // The mask for `state`, computed once and then served from the cache.
  std::shared_ptr<const std::vector<uint32_t>> mask(const MatchState& state);

  size_t cached_masks() const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  MatchState start_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> cache_;
};

}  // namespace ls::grammar
