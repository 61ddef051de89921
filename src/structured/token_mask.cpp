#include "structured/token_mask.h"

#include <algorithm>
#include <utility>

namespace ls::grammar {

namespace {

// Cache bound per grammar: past it the cache starts over (a schema with unbounded nesting can
// reach unboundedly many states).
constexpr size_t kMaxCachedMasks = 4096;

}  // namespace

void compute_token_mask(const Grammar& g, const MatchState& state, const TokenVocab& vocab,
                        std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0u);
  const std::span<const int32_t> ids = vocab.sorted_ids();
  const std::span<const uint32_t> lcp = vocab.common_prefix();
  // levels[k]: the state after the first k bytes of the current token; levels[0] is `state`.
  thread_local std::vector<MatchState> levels;
  if (levels.size() < vocab.max_token_bytes() + 1) levels.resize(vocab.max_token_bytes() + 1);
  levels[0] = state;
  size_t valid_depth = 0;  // levels[0..valid_depth] hold the current token's prefix states
  size_t i = 0;
  while (i < ids.size()) {
    const std::string& bytes = vocab.bytes(ids[i]);
    size_t depth = std::min<size_t>(valid_depth, lcp[i]);
    bool alive = true;
    while (depth < bytes.size()) {
      if (!step(g, levels[depth], static_cast<uint8_t>(bytes[depth]), levels[depth + 1])) {
        alive = false;
        break;
      }
      ++depth;
    }
    if (alive) {
      mask[static_cast<size_t>(ids[i]) >> 5] |= 1u << (ids[i] & 31);
      valid_depth = depth;
      ++i;
      continue;
    }
    // Byte `depth` of this token is rejected: so is every following token that shares its
    // first depth + 1 bytes.
    valid_depth = depth;
    ++i;
    while (i < ids.size() && lcp[i] > depth) ++i;
  }
}

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), start_(initial_state(*grammar_)) {}

std::shared_ptr<const std::vector<uint32_t>> CompiledGrammar::mask(const MatchState& state) {
  std::string key = state.key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto m = std::make_shared<std::vector<uint32_t>>(mask_words(vocab_->vocab_size()));
  compute_token_mask(*grammar_, state, *vocab_, *m);
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  cache_.emplace(std::move(key), m);
  return m;
}

size_t CompiledGrammar::cached_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

}  // namespace ls::grammar
