#pragma once
// NumpyRng reproduces numpy.random.default_rng(seed_words) bit for bit: SeedSequence hashing,
// the PCG64 generator (XSL-RR output over a 128-bit LCG), and the draws the retrieval task
// generator uses (integers, random, uniform, permutation). The Python generator
// (scripts/model/retrieval_tasks.py) is the contract for the evaluation prompts; reproducing its
// RNG lets the C++ harness build the very same prompts for a seed instead of a look-alike
// distribution. Verified against numpy 2.x (tests/eval/numpy_rng_test.cpp).

#include <cstdint>
#include <span>
#include <vector>

namespace ls::eval {

class NumpyRng {
 public:
  // == np.random.default_rng([w_0, w_1, ...]) for non-negative Python ints w_i (each one is
  // split into 32-bit words, least significant first, as SeedSequence does).
  explicit NumpyRng(std::span<const uint64_t> seed_ints);

  // == rng.integers(low, high): uniform in [low, high); high - low must fit 32 bits.
  int64_t integers(int64_t low, int64_t high);
  // == rng.random(): uniform double in [0, 1) with 53 random bits.
  double random();
  // == rng.uniform(low, high).
  double uniform(double low, double high);
  // == rng.permutation(n).tolist() (Fisher-Yates with masked rejection, as Generator.shuffle).
  std::vector<int64_t> permutation(int64_t n);

  // The raw streams, exposed for the tests that pin them against numpy.
  uint64_t next_uint64();
  uint32_t next_uint32();

 private:
  uint64_t bounded_masked(uint64_t max_value);

  __extension__ using u128 = unsigned __int128;
  u128 state_ = 0;
  u128 inc_ = 0;
  bool has_uint32_ = false;  // PCG64 hands out 64-bit outputs as two 32-bit halves
  uint32_t uint32_ = 0;
};

// SeedSequence(entropy).generate_state(num_words, uint32) for an entropy of 32-bit words.
std::vector<uint32_t> seed_sequence_state(std::span<const uint32_t> entropy, int num_words);

}  // namespace ls::eval
