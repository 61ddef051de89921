#include "structured/grammar.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace ls::grammar {

namespace {

// Largest grammar we compile: a bound so that hostile schemas (huge maxLength, deep nesting)
// are refused instead of exhausting memory.
constexpr size_t kMaxElements = 1u << 22;

std::string byte_set_text(const ByteSet& set) {
  std::string out = "[";
  for (int b = 0; b < 256; ++b) {
    if (!byte_set_has(set, static_cast<uint8_t>(b))) continue;
    int e = b;
    while (e + 1 < 256 && byte_set_has(set, static_cast<uint8_t>(e + 1))) ++e;
    auto put = [&](int c) {
      char buf[8];
      if (c >= 0x21 && c < 0x7f && c != ']' && c != '\\' && c != '-') {
        out.push_back(static_cast<char>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        out += buf;
      }
    };
    put(b);
    if (e > b) {
      out.push_back('-');
      put(e);
    }
    b = e;
  }
  return out + "]";
}

}  // namespace

void byte_set_add_range(ByteSet& set, uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) byte_set_add(set, static_cast<uint8_t>(b));
}

Sym GrammarBuilder::bytes(const ByteSet& set) {
  for (size_t i = 0; i < sets_.size(); ++i) {
    if (sets_[i] == set) return Sym{false, static_cast<uint32_t>(i)};
  }
  sets_.push_back(set);
  return Sym{false, static_cast<uint32_t>(sets_.size() - 1)};
}

Sym GrammarBuilder::byte(uint8_t b) {
  ByteSet set{};
  byte_set_add(set, b);
  return bytes(set);
}

Sym GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet set{};
  byte_set_add_range(set, lo, hi);
  return bytes(set);
}

Seq GrammarBuilder::literal(std::string_view text) {
  Seq out;
  out.reserve(text.size());
  for (char c : text) out.push_back(byte(static_cast<uint8_t>(c)));
  return out;
}

uint32_t GrammarBuilder::declare_rule() {
  rules_.emplace_back();
  defined_.push_back(false);
  return static_cast<uint32_t>(rules_.size() - 1);
}

void GrammarBuilder::define_rule(uint32_t rule, std::vector<Seq> alternatives) {
  rules_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

Sym GrammarBuilder::rule(std::vector<Seq> alternatives) {
  const uint32_t id = declare_rule();
  define_rule(id, std::move(alternatives));
  return ref(id);
}

Sym GrammarBuilder::optional(Seq seq) { return rule({std::move(seq), Seq{}}); }

Sym GrammarBuilder::star(Seq seq) {
  // R := seq R | "" (the recursive reference is a tail call).
  const uint32_t id = declare_rule();
  Seq body = std::move(seq);
  body.push_back(ref(id));
  define_rule(id, {std::move(body), Seq{}});
  return ref(id);
}

Sym GrammarBuilder::plus(Seq seq) {
  Seq body = seq;
  body.push_back(star(std::move(seq)));
  return rule({std::move(body)});
}

Sym GrammarBuilder::repeat(Seq seq, int32_t min, int32_t max) {
  Seq out;
  for (int32_t i = 0; i < min; ++i) append(out, seq);
  if (max < 0) {
    out.push_back(star(seq));
  } else if (max > min) {
    // T_1 := seq | "";  T_k := seq T_{k-1} | "".
    Sym tail = optional(seq);
    for (int32_t k = 2; k <= max - min; ++k) {
      Seq body = seq;
      body.push_back(tail);
      tail = rule({std::move(body), Seq{}});
    }
    out.push_back(tail);
  }
  return rule({std::move(out)});
}

Result<Grammar> GrammarBuilder::build(Sym root) && {
  Grammar g;
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (!defined_[r]) return internal_error("grammar: rule {} declared but never defined", r);
  }
  // Position 0: [ref root][end], so matching starts from one stack of one position.
  Sym start = root;
  if (!start.is_rule) start = rule({Seq{root}});
  g.root_ = start.id;
  g.elements_.push_back({ElementKind::kRule, start.id});
  g.elements_.push_back({ElementKind::kEnd, 0});
  g.rule_alt_begin_.push_back(0);
  for (const std::vector<Seq>& alts : rules_) {
    for (const Seq& seq : alts) {
      g.alt_starts_.push_back(static_cast<uint32_t>(g.elements_.size()));
      for (const Sym& s : seq) {
        g.elements_.push_back({s.is_rule ? ElementKind::kRule : ElementKind::kBytes, s.id});
      }
      g.elements_.push_back({ElementKind::kEnd, 0});
      if (g.elements_.size() > kMaxElements) {
        return invalid_argument("the grammar is too large (over {} symbols)", kMaxElements);
      }
    }
    g.rule_alt_begin_.push_back(static_cast<uint32_t>(g.alt_starts_.size()));
  }
  g.byte_sets_ = std::move(sets_);
  return g;
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < num_rules(); ++r) {
    out += "r" + std::to_string(r) + " ::=";
    bool first = true;
    for (uint32_t start : alternatives(static_cast<uint32_t>(r))) {
      out += first ? " " : " | ";
      first = false;
      bool empty = true;
      for (uint32_t p = start; elements_[p].kind != ElementKind::kEnd; ++p) {
        const Element& e = elements_[p];
        if (!empty) out += " ";
        empty = false;
        out += e.kind == ElementKind::kRule ? "r" + std::to_string(e.arg)
                                             : byte_set_text(byte_sets_[e.arg]);
      }
      if (empty) out += "\"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace ls::grammar
