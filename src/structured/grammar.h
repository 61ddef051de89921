#pragma once
// A context-free grammar over bytes, the form every constraint (JSON schema, regex, choice,
// tool-call schema) is compiled to before decoding.
//
// Rules are alternatives of sequences; a sequence element is a byte set (256 bits) or a reference
// to a rule. Compiled, every alternative is a run of elements in one flat array ended by kEnd, so
// a parse position is one index (see matcher.h). Grammars are built by GrammarBuilder, whose
// helpers write repetition right-recursively with the recursive reference last (the matcher
// turns such tail references into jumps, so repeating costs no stack depth). Immutable once
// built; shared between requests through a shared_ptr.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::grammar {

// 256 bits, bit b set when byte b is allowed.
using ByteSet = std::array<uint64_t, 4>;

inline bool byte_set_has(const ByteSet& set, uint8_t b) { return (set[b >> 6] >> (b & 63)) & 1; }
inline void byte_set_add(ByteSet& set, uint8_t b) { set[b >> 6] |= uint64_t{1} << (b & 63); }
void byte_set_add_range(ByteSet& set, uint8_t lo, uint8_t hi);

enum class ElementKind : uint8_t { kBytes, kRule, kEnd };

struct Element {
  ElementKind kind = ElementKind::kEnd;
  uint32_t arg = 0;  // kBytes: byte-set index; kRule: rule index
};

// One symbol of a sequence while building: a byte set or a rule.
struct Sym {
  bool is_rule = false;
  uint32_t id = 0;
};
using Seq = std::vector<Sym>;

class Grammar {
 public:
  const Element& at(uint32_t pos) const { return elements_[pos]; }
  bool byte_allowed(uint32_t set, uint8_t b) const { return byte_set_has(byte_sets_[set], b); }
  // Start positions (into the element array) of the rule's alternatives.
  std::span<const uint32_t> alternatives(uint32_t rule) const {
    return {alt_starts_.data() + rule_alt_begin_[rule],
            rule_alt_begin_[rule + 1] - rule_alt_begin_[rule]};
  }
  uint32_t root() const { return root_; }
  // Position of the root reference: [ref root][end], where matching starts.
  uint32_t start_position() const { return 0; }
  size_t num_rules() const { return rule_alt_begin_.size() - 1; }
  size_t num_elements() const { return elements_.size(); }
  // EBNF-like text, for error messages and debugging.
  std::string to_string() const;

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;          // [num_elements]
  std::vector<ByteSet> byte_sets_;         // [num_sets], deduplicated
  std::vector<uint32_t> alt_starts_;       // [num_alternatives]
  std::vector<uint32_t> rule_alt_begin_;   // [num_rules + 1] into alt_starts_
  uint32_t root_ = 0;
};

class GrammarBuilder {
 public:
  Sym bytes(const ByteSet& set);
  Sym byte(uint8_t b);
  Sym byte_range(uint8_t lo, uint8_t hi);
  // One byte-set symbol per byte of text.
  Seq literal(std::string_view text);

  // A rule that is referenced before it is defined (recursion).
  uint32_t declare_rule();
  void define_rule(uint32_t rule, std::vector<Seq> alternatives);
  Sym ref(uint32_t rule) const { return Sym{true, rule}; }
  // A new rule with these alternatives.
  Sym rule(std::vector<Seq> alternatives);

  Sym optional(Seq seq);                        // seq | ""
  Sym star(Seq seq);                            // seq*
  Sym plus(Seq seq);                            // seq+
  // seq{min,max}; max < 0 means unbounded. Bounded tails are nested optionals, so max - min
  // rules are made (callers bound max).
  Sym repeat(Seq seq, int32_t min, int32_t max);

  // Fails if a rule was declared and never defined, or the grammar is too large.
  Result<Grammar> build(Sym root) &&;

 private:
  std::vector<ByteSet> sets_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
};

// Appends seq's symbols to out.
inline void append(Seq& out, const Seq& seq) { out.insert(out.end(), seq.begin(), seq.end()); }

}  // namespace ls::grammar
