#include "structured/matcher.h"

#include <algorithm>
#include <utility>

namespace ls::grammar {

namespace {

// Bounds of one closure: a stack deeper than this or a closure with more rule expansions is
// dropped. JSON-schema grammars nest a few frames per JSON level.
constexpr size_t kMaxDepth = 2048;
constexpr int kMaxExpansions = 1 << 14;

struct Closure {
  const Grammar& g;
  MatchState& out;
  int budget = kMaxExpansions;
  // Stacks whose top rule reference was already expanded in this closure: a nullable cycle
  // comes back to the same stack and stops here.
  std::vector<std::vector<uint32_t>> expanded;

  void add(const std::vector<uint32_t>& stack) {
    for (size_t i = 0; i < out.n; ++i) {
      if (out.stacks[i] == stack) return;
    }
    if (out.n == out.stacks.size()) out.stacks.emplace_back();
    out.stacks[out.n++] = stack;
  }

  // Brings `stack` to normal form, adding every resulting stack to `out`. Frames below the top
  // are continuations: where matching resumes when the rule above them ends.
  void expand(std::vector<uint32_t>& stack) {
    while (true) {
      if (stack.empty()) {
        out.can_end = true;
        return;
      }
      const Element& e = g.at(stack.back());
      if (e.kind == ElementKind::kBytes) {
        add(stack);
        return;
      }
      if (e.kind == ElementKind::kEnd) {
        stack.pop_back();  // the rule ended: resume at the continuation below
        continue;
      }
      // A rule reference.
      if (--budget < 0 || stack.size() > kMaxDepth) return;
      if (std::find(expanded.begin(), expanded.end(), stack) != expanded.end()) return;
      expanded.push_back(stack);
      const uint32_t continuation = stack.back() + 1;
      stack.pop_back();
      // Tail call: when the reference ends its alternative, no frame is kept for it.
      if (g.at(continuation).kind != ElementKind::kEnd) stack.push_back(continuation);
      for (uint32_t alt : g.alternatives(e.arg)) {
        std::vector<uint32_t> next = stack;
        next.push_back(alt);
        expand(next);
      }
      return;
    }
  }
};

}  // namespace

std::string MatchState::key() const {
  std::vector<const std::vector<uint32_t>*> order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i) order.push_back(&stacks[i]);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return *a < *b; });
  std::string out;
  out.push_back(can_end ? '1' : '0');
  for (const auto* s : order) {
    const uint32_t len = static_cast<uint32_t>(s->size());
    out.append(reinterpret_cast<const char*>(&len), sizeof len);
    out.append(reinterpret_cast<const char*>(s->data()), s->size() * sizeof(uint32_t));
  }
  return out;
}

MatchState initial_state(const Grammar& g) {
  MatchState out;
  Closure c{g, out};
  std::vector<uint32_t> stack{g.start_position()};
  c.expand(stack);
  return out;
}

bool step(const Grammar& g, const MatchState& in, uint8_t byte, MatchState& out) {
  out.n = 0;
  out.can_end = false;
  Closure c{g, out};
  for (size_t i = 0; i < in.n; ++i) {
    const std::vector<uint32_t>& s = in.stacks[i];
    if (!g.byte_allowed(g.at(s.back()).arg, byte)) continue;
    std::vector<uint32_t> next = s;
    ++next.back();
    c.expand(next);
  }
  return !out.dead();
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), state_(initial_state(*grammar_)) {}

bool Matcher::accept(std::string_view bytes) {
  MatchState cur = state_;
  for (char ch : bytes) {
    if (!step(*grammar_, cur, static_cast<uint8_t>(ch), scratch_)) return false;
    std::swap(cur, scratch_);
  }
  state_ = std::move(cur);
  return true;
}

}  // namespace ls::grammar
