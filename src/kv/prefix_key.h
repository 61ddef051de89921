#pragma once
// Content keys of the prefix cache (docs/prefix-caching.md): the key of a full page is a hash
// chain over the token ids of every page up to and including it, seeded with what else decides
// the page's K/V bytes (the model, the attention configuration, the KV format). Two independent
// 64-bit chains make a 128-bit key, so a false hit (two prefixes with one key) is not a concern
// at any realistic cache size.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ls {

struct PrefixKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const PrefixKey& o) const { return hi == o.hi && lo == o.lo; }
};

struct PrefixKeyHash {
  size_t operator()(const PrefixKey& k) const { return static_cast<size_t>(k.hi ^ (k.lo * 0x9e3779b97f4a7c15ull)); }
};

// The chain's start: a key of the text that describes the model, attention and KV format.
PrefixKey prefix_seed(std::string_view description);
// The key of a page holding `tokens`, following the page keyed `parent`.
PrefixKey prefix_chain(const PrefixKey& parent, std::span<const int32_t> tokens);

// Token i of a sequence whose tokens are its prompt followed by its outputs, without copying.
struct TokenView {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
  int32_t size() const { return static_cast<int32_t>(prompt.size() + output.size()); }
  int32_t at(int32_t i) const {
    const auto u = static_cast<size_t>(i);
    return u < prompt.size() ? prompt[u] : output[u - prompt.size()];
  }
};

}  // namespace ls
