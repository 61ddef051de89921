#include "eval/numpy_rng.h"

#include <algorithm>

namespace ls::eval {

namespace {

// SeedSequence's hash constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

}  // namespace

std::vector<uint32_t> seed_sequence_state(std::span<const uint32_t> entropy, int num_words) {
  // [kPoolSize] u32: the entropy pool; entropy shorter than the pool is zero-padded.
  uint32_t pool[kPoolSize] = {};
  std::vector<uint32_t> ent(entropy.begin(), entropy.end());
  if (ent.size() < kPoolSize) ent.resize(kPoolSize, 0);
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) pool[i] = hashmix(ent[static_cast<size_t>(i)], hash_const);
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < ent.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst)
      pool[dst] = mix(pool[dst], hashmix(ent[src], hash_const));
  }
  std::vector<uint32_t> out(static_cast<size_t>(num_words));
  uint32_t hash_b = kInitB;
  for (int i = 0; i < num_words; ++i) {
    uint32_t d = pool[i % kPoolSize];
    d ^= hash_b;
    hash_b *= kMultB;
    d *= hash_b;
    d ^= d >> kXShift;
    out[static_cast<size_t>(i)] = d;
  }
  return out;
}

NumpyRng::NumpyRng(std::span<const uint64_t> seed_ints) {
  std::vector<uint32_t> words;
  for (uint64_t v : seed_ints) {
    // Python's _int_to_uint32_array: 0 is one zero word; otherwise words until v is exhausted.
    do {
      words.push_back(static_cast<uint32_t>(v & 0xffffffffu));
      v >>= 32;
    } while (v != 0);
  }
  // PCG64 seeds from generate_state(4, uint64): pairs of 32-bit words, low word first.
  const std::vector<uint32_t> w = seed_sequence_state(words, 8);
  uint64_t u[4];
  for (int i = 0; i < 4; ++i) {
    u[i] = static_cast<uint64_t>(w[static_cast<size_t>(2 * i)]) |
           (static_cast<uint64_t>(w[static_cast<size_t>(2 * i + 1)]) << 32);
  }
  const u128 init_state = (static_cast<u128>(u[0]) << 64) | u[1];
  const u128 init_seq = (static_cast<u128>(u[2]) << 64) | u[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = (init_seq << 1) | 1u;
  next_uint64();
  state_ += init_state;
  next_uint64();
  has_uint32_ = false;
}

uint64_t NumpyRng::next_uint64() {
  const u128 mult = (static_cast<u128>(0x2360ed051fc65da4ull) << 64) | 0x4385df649fccf645ull;
  state_ = state_ * mult + inc_;
  const auto x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const auto rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64u - rot) & 63u));
}

uint32_t NumpyRng::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uint32_;
  }
  const uint64_t v = next_uint64();
  has_uint32_ = true;
  uint32_ = static_cast<uint32_t>(v >> 32);
  return static_cast<uint32_t>(v & 0xffffffffu);
}

int64_t NumpyRng::integers(int64_t low, int64_t high) {
  // numpy's random_bounded_uint64 for a range that fits 32 bits: Lemire's multiply-shift with
  // rejection, drawing 32-bit halves.
  const auto rng = static_cast<uint64_t>(high - low - 1);
  if (high <= low + 1) return low;
  if (rng == 0xffffffffu) return low + next_uint32();
  const auto range = static_cast<uint32_t>(rng);
  const uint64_t range_excl = static_cast<uint64_t>(range) + 1;
  uint64_t m = static_cast<uint64_t>(next_uint32()) * range_excl;
  auto leftover = static_cast<uint32_t>(m & 0xffffffffu);
  if (leftover < range_excl) {
    const auto threshold = static_cast<uint32_t>((0xffffffffu - range) % range_excl);
    while (leftover < threshold) {
      m = static_cast<uint64_t>(next_uint32()) * range_excl;
      leftover = static_cast<uint32_t>(m & 0xffffffffu);
    }
  }
  return low + static_cast<int64_t>(m >> 32);
}

double NumpyRng::random() {
  return static_cast<double>(next_uint64() >> 11) * (1.0 / 9007199254740992.0);
}

double NumpyRng::uniform(double low, double high) {
  return low + (high - low) * random();
}

uint64_t NumpyRng::bounded_masked(uint64_t max_value) {
  // random_interval: the smallest all-ones mask covering max_value, then rejection.
  if (max_value == 0) return 0;
  uint64_t mask = max_value;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  if (max_value <= 0xffffffffu) {
    while (true) {
      const uint64_t v = next_uint32() & mask;
      if (v <= max_value) return v;
    }
  }
  while (true) {
    const uint64_t v = next_uint64() & mask;
    if (v <= max_value) return v;
  }
}

std::vector<int64_t> NumpyRng::permutation(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<int64_t>(bounded_masked(static_cast<uint64_t>(i)));
    std::swap(out[static_cast<size_t>(i)], out[static_cast<size_t>(j)]);
  }
  return out;
}

}  // namespace ls::eval
