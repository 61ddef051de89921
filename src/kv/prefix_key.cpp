#include "kv/prefix_key.h"

namespace ls {

namespace {

// splitmix64's finaliser: a bijective mix of 64 bits.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

PrefixKey prefix_seed(std::string_view description) {
  PrefixKey k{0x243f6a8885a308d3ull, 0x13198a2e03707344ull};
  for (unsigned char c : description) {
    k.hi = mix(k.hi ^ (c + 0x100ull));
    k.lo = mix(k.lo + 0x9e3779b97f4a7c15ull * (c + 1ull));
  }
  return k;
}

PrefixKey prefix_chain(const PrefixKey& parent, std::span<const int32_t> tokens) {
  PrefixKey k{mix(parent.hi ^ 0xa4093822299f31d0ull), mix(parent.lo + 0x082efa98ec4e6c89ull)};
  for (int32_t t : tokens) {
    const auto u = static_cast<uint64_t>(static_cast<uint32_t>(t));
    k.hi = mix(k.hi ^ (u + 0x452821e638d01377ull));
    k.lo = mix(k.lo * 0xff51afd7ed558ccdull + u + 1);
  }
  // The length too, so a page is never confused with a shorter run of the same tokens.
  k.hi = mix(k.hi ^ tokens.size());
  k.lo = mix(k.lo + tokens.size());
  return k;
}

}  // namespace ls
