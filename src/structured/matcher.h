#pragma once
// Byte-at-a-time recognition of a Grammar: a nondeterministic pushdown automaton whose state is
// a set of stacks (the "stacks" construction of llama.cpp's GBNF sampler, over bytes).
//
// A stack is a list of grammar positions: the last is the element to match next, the others are
// where to continue when the rule being matched ends. A state keeps every stack in normal form,
// its top on a byte-set element, plus `can_end` when some parse has finished the root rule.
// Expanding a rule reference whose next element is the alternative's end pops the caller's frame
// first (a tail call), so right-recursive repetition keeps a constant depth. Each closure is
// bounded (depth and expansions), so left-recursive or nullable-cyclic grammars cannot hang it;
// the grammars this project generates have neither.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace ls::grammar {

struct MatchState {
  std::vector<std::vector<uint32_t>> stacks;  // [n][depth]; entries past n are spare capacity
  size_t n = 0;
  bool can_end = false;

  bool dead() const { return n == 0 && !can_end; }
  // The canonical bytes of the state (stacks sorted), for cache keys and comparisons.
  std::string key() const;
};

// The state before any byte.
MatchState initial_state(const Grammar& g);
// The state after `byte`; returns false (and leaves `out` dead) when no stack accepts it.
// `out` must not alias `in`; its spare capacity is reused.
bool step(const Grammar& g, const MatchState& in, uint8_t byte, MatchState& out);

// A state plus its grammar, advanced by whole strings (all or nothing).
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  bool accept(std::string_view bytes);
  bool can_end() const { return state_.can_end; }
  // Whether some byte can still follow.
  bool can_continue() const { return state_.n > 0; }
  const MatchState& state() const { return state_; }
  const Grammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const Grammar> grammar_;
  MatchState state_;
  MatchState scratch_;
};

}  // namespace ls::grammar
