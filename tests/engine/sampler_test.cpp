// Sampler tests. Expected distributions come from a naive reference written here in double
// precision straight from the definitions (HF / vLLM rules), not from the sampler's code path:
// full softmax, explicit masks, full sorts. Statistical checks use fixed seeds and bounds from the
// binomial / chi-square math (5 sigma), so a correct sampler passes with overwhelming probability
// and a wrong distribution (off by a few percent of mass) fails.

#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace ls {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct History {
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

// The penalized logits by the HF / OpenAI rules, in double.
std::vector<double> reference_penalized(const std::vector<float>& logits, const SamplingParams& p,
                                        const History& h) {
  std::vector<double> l(logits.begin(), logits.end());
  for (size_t i = 0; i < l.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const bool in_prompt = std::find(h.prompt.begin(), h.prompt.end(), id) != h.prompt.end();
    const auto count = std::count(h.output.begin(), h.output.end(), id);
    if ((in_prompt || count > 0) && p.repetition_penalty != 1.0f) {
      // HF RepetitionPenaltyLogitsProcessor: score < 0 ? score * penalty : score / penalty.
      l[i] = l[i] < 0 ? l[i] * p.repetition_penalty : l[i] / p.repetition_penalty;
    }
    l[i] -= p.frequency_penalty * static_cast<double>(count);
    if (count > 0) l[i] -= p.presence_penalty;
  }
  return l;
}

// The distribution a correct sampler draws from: penalties, temperature, softmax, min_p (relative
// to the most likely token), top_k (ties with the k-th value kept), renormalize, top_p (smallest
// most-likely prefix whose mass reaches top_p), renormalize.
std::vector<double> reference_probs(const std::vector<float>& logits, const SamplingParams& p,
                                    const History& h = {}) {
  std::vector<double> l = reference_penalized(logits, p, h);
  const size_t n = l.size();
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) z[i] = l[i] / p.temperature;
  const double zmax = *std::max_element(z.begin(), z.end());
  std::vector<double> prob(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(z[i] - zmax);
  for (double& x : prob) x /= sum;
  const double pmax = *std::max_element(prob.begin(), prob.end());
  for (double& x : prob) {
    if (x < p.min_p * pmax) x = 0;
  }
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::vector<double> sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double kth = sorted[p.top_k - 1];
    for (size_t i = 0; i < n; ++i) {
      if (z[i] < kth) prob[i] = 0;
    }
  }
  sum = std::accumulate(prob.begin(), prob.end(), 0.0);
  for (double& x : prob) x /= sum;
  if (p.top_p < 1.0f) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return prob[a] > prob[b]; });
    double before = 0;
    for (size_t i : order) {
      const double pi = prob[i];
      if (before >= p.top_p) prob[i] = 0;
      before += pi;
    }
    sum = std::accumulate(prob.begin(), prob.end(), 0.0);
    for (double& x : prob) x /= sum;
  }
  return prob;
}

// Upper 5-sigma point (tail ~3e-7) of chi-square with df degrees of freedom (Wilson-Hilferty).
double chi_square_bound(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 5.0 * std::sqrt(a), 3.0);
}

// Draws `num_draws` tokens from the same logits and checks the counts against `expected`:
// impossible tokens never appear; each possible one is within 5 binomial sigmas; the whole
// histogram passes a chi-square test at the 5-sigma level.
void expect_distribution(const std::vector<float>& logits, const SamplingParams& params,
                         SequenceSamplingState& state, const std::vector<double>& expected,
                         int num_draws = 20000) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int d = 0; d < num_draws; ++d) {
    std::vector<float> row = logits;
    const int32_t token = sample(row, params, state, nullptr);
    ASSERT_GE(token, 0);
    ASSERT_LT(token, static_cast<int32_t>(logits.size()));
    ++counts[token];
  }
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = expected[i];
    if (p == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has zero probability";
      continue;
    }
    const double mean = num_draws * p;
    const double sigma = std::sqrt(num_draws * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(counts[i]), mean, 5 * sigma + 1e-9) << "token " << i;
    chi2 += (counts[i] - mean) * (counts[i] - mean) / mean;
    ++df;
  }
  if (df > 0) {
    EXPECT_LT(chi2, chi_square_bound(df));
  }
}

// A small vocabulary with known, well separated probabilities (0.4, 0.25, 0.15, ...).
std::vector<float> small_logits() {
  const std::vector<double> probs = {0.04, 0.4, 0.06, 0.25, 0.15, 0.1};
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p) + 3.0));
  return logits;
}

TEST(SamplerDistribution, ReferenceMatchesHandComputedCases) {
  // Guards the reference itself on cases small enough to do by hand.
  const std::vector<float> logits = small_logits();
  SamplingParams p;
  std::vector<double> prob = reference_probs(logits, p);
  EXPECT_NEAR(prob[1], 0.4, 1e-6);
  EXPECT_NEAR(prob[0], 0.04, 1e-6);
  p.top_k = 2;  // {0.4, 0.25} renormalized
  prob = reference_probs(logits, p);
  EXPECT_NEAR(prob[1], 0.4 / 0.65, 1e-6);
  EXPECT_EQ(prob[4], 0);
  p.top_k = -1;
  p.top_p = 0.7f;  // 0.4 + 0.25 < 0.7, so 0.15 is kept too
  prob = reference_probs(logits, p);
  EXPECT_NEAR(prob[4], 0.15 / 0.8, 1e-6);
  EXPECT_EQ(prob[5], 0);
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keep p >= 0.12
  prob = reference_probs(logits, p);
  EXPECT_NEAR(prob[4], 0.15 / 0.8, 1e-6);
  EXPECT_EQ(prob[5], 0);
}

TEST(SamplerDistribution, Temperature) {
  for (float t : {1.0f, 0.5f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    SequenceSamplingState state(p, 1234 + static_cast<uint64_t>(t * 10), {});
    expect_distribution(small_logits(), p, state, reference_probs(small_logits(), p));
  }
}

TEST(SamplerDistribution, TopK) {
  SamplingParams p;
  p.top_k = 3;
  SequenceSamplingState state(p, 11, {});
  expect_distribution(small_logits(), p, state, reference_probs(small_logits(), p));
}

TEST(SamplerDistribution, TopKKeepsTiesWithTheKthValue) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, 0.5f};
  SamplingParams p;
  p.top_k = 2;  // values 3, 2, 2: both 2s tie with the 2nd largest
  const std::vector<double> expected = reference_probs(logits, p);
  EXPECT_GT(expected[2], 0);
  EXPECT_GT(expected[3], 0);
  SequenceSamplingState state(p, 12, {});
  expect_distribution(logits, p, state, expected);
}

TEST(SamplerDistribution, TopP) {
  for (float top_p : {0.7f, 0.5f, 0.95f}) {
    SamplingParams p;
    p.top_p = top_p;
    SequenceSamplingState state(p, 13, {});
    expect_distribution(small_logits(), p, state, reference_probs(small_logits(), p));
  }
}

TEST(SamplerDistribution, MinP) {
  SamplingParams p;
  p.min_p = 0.3f;
  SequenceSamplingState state(p, 14, {});
  expect_distribution(small_logits(), p, state, reference_probs(small_logits(), p));
}

TEST(SamplerDistribution, AllFiltersTogether) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.min_p = 0.05f;
  p.top_k = 5;
  p.top_p = 0.9f;
  SequenceSamplingState state(p, 15, {});
  expect_distribution(small_logits(), p, state, reference_probs(small_logits(), p));
}

TEST(SamplerDistribution, PenaltiesShiftTheDistribution) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  p.temperature = 0.9f;
  const History h = {{1, 1, 5}, {3, 3, 0}};
  SequenceSamplingState state(p, 16, h.prompt);
  for (int32_t t : h.output) state.append(t);
  const std::vector<double> expected = reference_probs(small_logits(), p, h);
  SamplingParams no_penalties;
  no_penalties.temperature = p.temperature;
  const std::vector<double> unpenalized = reference_probs(small_logits(), no_penalties);
  EXPECT_LT(expected[3], unpenalized[3] - 0.1);  // the setting really matters
  expect_distribution(small_logits(), p, state, expected);
}

// A 32K vocabulary exercises the paths that only run on many candidates: dense top_p's bracketing
// passes and its final cut, top_k's selection buffer being cut back, min_p's scan. Tokens are
// grouped into 8 buckets of about equal expected mass; a token outside the reference's kept set
// must never be drawn.
void expect_bucketed_distribution(const std::vector<float>& logits, const SamplingParams& p,
                                  uint64_t seed, int num_draws = 8000) {
  const std::vector<double> expected = reference_probs(logits, p);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] > 0) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return expected[a] > expected[b]; });
  std::vector<int> bucket_of(logits.size(), -1);
  std::vector<double> bucket_mass(8, 0.0);
  double acc = 0;
  for (int32_t id : ids) {
    const int b = std::min(7, static_cast<int>(acc * 8));
    bucket_of[id] = b;
    bucket_mass[b] += expected[id];
    acc += expected[id];
  }
  SequenceSamplingState state(p, seed, {});
  std::vector<int64_t> counts(8, 0);
  for (int d = 0; d < num_draws; ++d) {
    std::vector<float> row = logits;
    const int32_t token = sample(row, p, state, nullptr);
    ASSERT_GE(bucket_of[token], 0) << "token " << token << " should have been filtered out";
    ++counts[bucket_of[token]];
  }
  for (int b = 0; b < 8; ++b) {
    if (bucket_mass[b] == 0) continue;
    const double mean = num_draws * bucket_mass[b];
    EXPECT_NEAR(counts[b], mean, 5 * std::sqrt(mean * (1 - bucket_mass[b]))) << "bucket " << b;
  }
}

std::vector<float> normal_logits(size_t vocab, float sigma, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(gen);
  return logits;
}

TEST(SamplerDistribution, LargeVocabularyTopP) {
  const std::vector<float> logits = normal_logits(32768, 2.0f, 7);
  for (const auto& [temperature, top_p] : std::vector<std::pair<float, float>>{
           {1.0f, 0.9f}, {0.7f, 0.5f}, {1.5f, 0.99f}, {2.0f, 0.05f}}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    SCOPED_TRACE(testing::Message() << "t=" << temperature << " top_p=" << top_p);
    expect_bucketed_distribution(logits, p, 17);
  }
}

TEST(SamplerDistribution, LargeVocabularyTopKAndMinP) {
  const std::vector<float> logits = normal_logits(32768, 2.0f, 8);
  SamplingParams p;
  p.top_k = 1000;
  expect_bucketed_distribution(logits, p, 18);
  p.top_k = -1;
  p.min_p = 0.02f;
  p.temperature = 1.2f;
  expect_bucketed_distribution(logits, p, 19);
}

// top_p's cut falls inside a group of 4096 equally likely tokens: the tie goes to the lower ids,
// so exactly the group's first ids up to the mass are kept.
TEST(SamplerDistribution, LargeVocabularyTopPCutInsideTies) {
  std::vector<float> logits = normal_logits(32768, 1.0f, 9);
  for (float& x : logits) x -= 4.0f;
  for (size_t i = 0; i < logits.size(); i += 8) logits[i] = 2.0f;
  SamplingParams p;
  p.top_p = 0.6f;
  const std::vector<double> expected = reference_probs(logits, p);
  int kept_ties = 0;
  for (size_t i = 0; i < logits.size(); i += 8) kept_ties += expected[i] > 0;
  ASSERT_GT(kept_ties, 100);
  ASSERT_LT(kept_ties, 4000);
  expect_bucketed_distribution(logits, p, 20);
}

// A tiny top_p over 32K equal logits keeps ids 0..32: dense top_p's rejection loop then rejects
// many draws in a row, which exercises its shrinking proposals and its final ordered fallback.
TEST(SamplerDistribution, LargeVocabularyTinyTopPOverTies) {
  const std::vector<float> logits(32768, 1.5f);
  SamplingParams p;
  p.top_p = 0.001f;
  const std::vector<double> expected = reference_probs(logits, p);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(expected[i] > 0, i <= 32) << i;
  expect_bucketed_distribution(logits, p, 21, /*num_draws=*/3000);
}

TEST(SamplerDeterminism, SameSeedSameTokensDifferentSeedsDiffer) {
  SamplingParams p;
  const std::vector<float> logits = small_logits();
  auto run = [&](uint64_t seed) {
    SequenceSamplingState state(p, seed, {});
    std::vector<int32_t> tokens;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> row = logits;
      tokens.push_back(sample(row, p, state, nullptr));
      state.append(tokens.back());
    }
    return tokens;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(SamplerDeterminism, IndependentOfOtherSequencesInTheBatch) {
  SamplingParams p;
  p.top_p = 0.9f;
  const std::vector<float> logits = small_logits();
  SequenceSamplingState alone(p, 5, {});
  std::vector<int32_t> expected;
  for (int i = 0; i < 100; ++i) {
    std::vector<float> row = logits;
    expected.push_back(sample(row, p, alone, nullptr));
  }
  // Same sequence interleaved with others sampling with different settings in between.
  SequenceSamplingState mine(p, 5, {});
  SamplingParams other_params;
  other_params.temperature = 0.3f;
  other_params.top_k = 2;
  SequenceSamplingState other(other_params, 5, {});
  std::vector<int32_t> got;
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < i % 3; ++j) {
      std::vector<float> row = logits;
      sample(row, other_params, other, nullptr);
    }
    std::vector<float> row = logits;
    got.push_back(sample(row, p, mine, nullptr));
  }
  EXPECT_EQ(got, expected);
}

TEST(SamplerDeterminism, SequenceSeed) {
  SamplingParams p;
  EXPECT_EQ(sequence_seed(p, 3, 99), 99u);
  p.seed = 7;
  EXPECT_EQ(sequence_seed(p, 0, 99), 7u);
  EXPECT_EQ(sequence_seed(p, 2, 99), 9u);
}

TEST(SamplerGreedy, ArgmaxWithTiesToLowestId) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1000;  // ignored when greedy
  p.top_p = 0.1f;
  SequenceSamplingState state(p, 0, {});
  std::vector<float> a = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(sample(a, p, state, nullptr), 1);
  std::vector<float> b = {3.0f, 3.0f, 3.0f};
  EXPECT_EQ(sample(b, p, state, nullptr), 0);
  std::vector<float> c = {-kInf, -5.0f, -5.0f, -6.0f};
  EXPECT_EQ(sample(c, p, state, nullptr), 1);
  p.temperature = 5e-6f;  // below 1e-5 is greedy too
  std::vector<float> d = {0.0f, 0.1f, 0.2f, 0.19f};
  EXPECT_EQ(sample(d, p, state, nullptr), 2);
}

TEST(SamplerGreedy, DrawsNoRandomness) {
  SamplingParams sampled;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<float> logits = small_logits();
  SequenceSamplingState fresh(sampled, 77, {});
  SequenceSamplingState used(sampled, 77, {});
  for (int i = 0; i < 10; ++i) {
    std::vector<float> row = logits;
    sample(row, greedy, used, nullptr);
  }
  for (int i = 0; i < 50; ++i) {
    std::vector<float> r1 = logits;
    std::vector<float> r2 = logits;
    EXPECT_EQ(sample(r1, sampled, fresh, nullptr), sample(r2, sampled, used, nullptr));
  }
}

TEST(SamplerGreedy, PenaltiesApplyBeforeArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0};
  SequenceSamplingState state(p, 0, prompt);
  std::vector<float> row = {3.0f, 2.0f, 1.0f};  // 3 / 2 = 1.5 < 2
  EXPECT_EQ(sample(row, p, state, nullptr), 1);
}

TEST(SamplerPenalties, MatchTheHuggingFaceRule) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> uni(-4.0f, 4.0f);
  std::vector<float> logits(64);
  for (float& x : logits) x = uni(gen);
  logits[9] = 0.0f;
  const History h = {{1, 2, 2, 5, 9, 40, 2}, {2, 3, 3, 3, 7, 63, 63}};
  for (const auto& [rep, pres, freq] : std::vector<std::tuple<float, float, float>>{
           {1.3f, 0.0f, 0.0f}, {0.7f, 0.0f, 0.0f}, {1.0f, 0.5f, 0.25f}, {1.2f, -0.5f, 1.5f}}) {
    SamplingParams p;
    p.repetition_penalty = rep;
    p.presence_penalty = pres;
    p.frequency_penalty = freq;
    SequenceSamplingState state(p, 0, h.prompt);
    for (int32_t t : h.output) state.append(t);
    std::vector<float> got = logits;
    apply_penalties(got, p, state);
    const std::vector<double> expected = reference_penalized(logits, p, h);
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(got[i], expected[i], 1e-5) << "id " << i << " rep " << rep;
    }
  }
}

TEST(SamplerPenalties, StateCounts) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  const std::vector<int32_t> prompt = {4, 4, 8};
  SequenceSamplingState state(p, 0, prompt);
  state.append(8);
  state.append(2);
  state.append(2);
  EXPECT_EQ(state.num_output_tokens(), 3);
  EXPECT_EQ(state.output_count(2), 2);
  EXPECT_EQ(state.output_count(8), 1);
  EXPECT_EQ(state.output_count(4), 0);  // prompt tokens are not output counts
  EXPECT_TRUE(state.seen(4));
  EXPECT_TRUE(state.seen(2));
  EXPECT_FALSE(state.seen(5));
}

TEST(SamplerPenalties, OutOfVocabularyIdsAreIgnored) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {-3, 1000000, 1};
  SequenceSamplingState state(p, 0, prompt);
  state.append(99999);
  std::vector<float> row = {1.0f, 1.0f, 1.0f};
  apply_penalties(row, p, state);
  EXPECT_EQ(row, (std::vector<float>{1.0f, 0.5f, 1.0f}));
}

// Naive log-softmax in double over the raw logits.
std::vector<double> naive_log_softmax(const std::vector<float>& logits) {
  double m = -std::numeric_limits<double>::infinity();
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  double s = 0;
  for (float x : logits) s += std::exp(static_cast<double>(x) - m);
  std::vector<double> out;
  for (float x : logits) out.push_back(x - m - std::log(s));
  return out;
}

TEST(SamplerLogprobs, RawLogSoftmaxAndTopN) {
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = normal(gen);
  logits[17] = logits[400] = 30.0f;  // tie at the top: lower id first
  logits[500] = 29.0f;
  const std::vector<double> expected = naive_log_softmax(logits);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });

  SamplingParams p;
  p.logprobs = 5;
  p.temperature = 0.6f;  // none of these change the reported logprobs
  p.top_k = 50;
  p.repetition_penalty = 1.4f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {17, 3};
  SequenceSamplingState state(p, 21, prompt);
  state.append(500);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> row = logits;
    SampleOutput out;
    const int32_t token = sample(row, p, state, &out);
    EXPECT_NEAR(out.logprob, expected[token], 1e-5);
    ASSERT_EQ(out.top_logprobs.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(out.top_logprobs[k].token_id, order[k]);
      EXPECT_NEAR(out.top_logprobs[k].logprob, expected[order[k]], 1e-5);
    }
  }
  EXPECT_EQ(order[0], 17);
  EXPECT_EQ(order[1], 400);
}

TEST(SamplerLogprobs, ZeroAndNone) {
  const std::vector<float> logits = small_logits();
  const std::vector<double> expected = naive_log_softmax(logits);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 0;
  SequenceSamplingState state(p, 0, {});
  std::vector<float> row = logits;
  SampleOutput out;
  out.top_logprobs.push_back({1, 1.0f});  // stale content is replaced
  EXPECT_EQ(sample(row, p, state, &out), 1);
  EXPECT_NEAR(out.logprob, expected[1], 1e-6);
  EXPECT_TRUE(out.top_logprobs.empty());

  p.logprobs = -1;
  SampleOutput untouched;
  untouched.logprob = 123.0f;
  row = logits;
  sample(row, p, state, &untouched);
  EXPECT_EQ(untouched.logprob, 123.0f);
}

TEST(SamplerLogprobs, NegativeInfinityStaysNegativeInfinity) {
  std::vector<float> logits = {0.0f, -kInf, 1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  SequenceSamplingState state(p, 0, {});
  SampleOutput out;
  EXPECT_EQ(sample(logits, p, state, &out), 2);
  ASSERT_EQ(out.top_logprobs.size(), 3u);
  EXPECT_EQ(out.top_logprobs[2].token_id, 1);
  EXPECT_EQ(out.top_logprobs[2].logprob, -kInf);
  EXPECT_NEAR(out.logprob, -std::log1p(std::exp(-1.0)), 1e-6);
}

TEST(SamplerForbid, ForbiddenUntilEnoughTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  SequenceSamplingState state(p, 0, {});
  const std::vector<int32_t> eos = {0, 3};
  state.forbid_until(eos, 2);
  const std::vector<float> logits = {9.0f, 1.0f, 2.0f, 8.0f};
  std::vector<float> row = logits;
  EXPECT_EQ(sample(row, p, state, nullptr), 2);
  state.append(2);
  row = logits;
  EXPECT_EQ(sample(row, p, state, nullptr), 2);
  state.append(2);
  row = logits;
  EXPECT_EQ(sample(row, p, state, nullptr), 0);
  EXPECT_TRUE(state.active_forbidden_ids().empty());
}

TEST(SamplerForbid, NeverDrawnWhileForbidden) {
  SamplingParams p;
  SequenceSamplingState state(p, 4, {});
  const std::vector<int32_t> banned = {1, 3};
  state.forbid_until(banned, 1000);
  const std::vector<float> logits = small_logits();
  std::vector<double> expected = reference_probs(logits, p);
  const double rest = 1 - expected[1] - expected[3];
  for (double& x : expected) x /= rest;
  expected[1] = expected[3] = 0;
  expect_distribution(logits, p, state, expected);
}

TEST(SamplerForbid, DegenerateRowsStillGiveAToken) {
  SamplingParams p;
  SequenceSamplingState state(p, 0, {});
  const std::vector<int32_t> banned = {2};
  state.forbid_until(banned, 5);
  std::vector<float> only_banned = {-kInf, -kInf, 1.0f};
  EXPECT_EQ(sample(only_banned, p, state, nullptr), 2);  // nothing else is possible
  std::vector<float> nothing = {-kInf, -kInf, -kInf};
  EXPECT_EQ(sample(nothing, p, state, nullptr), 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> with_nan = {nan, 0.0f, nan, 0.5f};
  for (int i = 0; i < 200; ++i) {
    std::vector<float> row = with_nan;
    const int32_t t = sample(row, p, state, nullptr);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  p.temperature = 0.0f;
  std::vector<float> row = with_nan;
  EXPECT_EQ(sample(row, p, state, nullptr), 3);
}

TEST(SamplingParamsValidate, AcceptsDefaultsAndVllmRanges) {
  SamplingParams p;
  EXPECT_TRUE(p.validate(100).ok());
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 1.0f;
  p.repetition_penalty = 0.5f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.logprobs = 20;
  EXPECT_TRUE(p.validate(100).ok());
}

TEST(SamplingParamsValidate, RejectsEachBadField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto bad = [](auto mutate, const std::string& field) {
    SamplingParams p;
    mutate(p);
    const Status s = p.validate(1000);
    EXPECT_FALSE(s.ok()) << field;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  bad([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  bad([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  bad([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  bad([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  bad([](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty");
  bad([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  bad([](SamplingParams& p) { p.logprobs = -2; }, "logprobs");
  SamplingParams p;
  p.logprobs = 10;
  EXPECT_FALSE(p.validate(5).ok());  // more than the vocabulary
  EXPECT_FALSE(SamplingParams{}.validate(0).ok());
}

}  // namespace
}  // namespace ls
