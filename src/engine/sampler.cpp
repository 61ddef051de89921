#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

namespace ls {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Portable SIMD through the GCC / Clang vector extension: 16 floats, lowered to what the target
// has (one AVX-512 register, two AVX2 ones, or scalar code). Vectors travel by reference only:
// passing them by value would change the ABI between -march levels (-Wpsabi).
using F32x16 = float __attribute__((vector_size(64)));
using I32x16 = int32_t __attribute__((vector_size(64)));
constexpr size_t kVec = 16;
// Scans test this many logits at once before looking at any of them one by one.
constexpr size_t kScanBlock = 4 * kVec;
// Dense draws find the block holding the draw from per-block masses, then the token inside it.
constexpr size_t kBlockTokens = 256;
// top_p's quickselect sorts search ranges at most this long instead of splitting them.
constexpr size_t kTopPSortBlock = 64;
// Dense top_p samples by rejection; after this many rejected draws it orders the candidates.
constexpr int kMaxTopPRejections = 8;

inline void load(F32x16& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
inline void splat(F32x16& v, float x) {
  v = F32x16{} + x;
}
inline bool any_lane(const I32x16& m) {
  uint64_t words[sizeof(m) / sizeof(uint64_t)];
  std::memcpy(words, &m, sizeof m);
  uint64_t all = 0;
  for (uint64_t w : words) all |= w;
  return all != 0;
}

// Calls visit(begin, end) on every block of x in which vector_test(v, mask) sets some lane, and
// on the tail that does not fill a block. vector_test must accept a superset of what visit keeps
// (visit applies the exact scalar test to each index); both may read state that visit changes.
// visit takes ranges so its per-index loop runs without a call per logit.
template <typename VectorTest, typename Visit>
void scan(std::span<const float> x, VectorTest&& vector_test, Visit&& visit) {
  size_t i = 0;
  for (; i + kScanBlock <= x.size(); i += kScanBlock) {
    I32x16 hit = I32x16{};
    for (size_t j = 0; j < kScanBlock; j += kVec) {
      F32x16 v;
      load(v, x.data() + i + j);
      I32x16 mask;
      vector_test(v, mask);
      hit |= mask;
    }
    if (any_lane(hit)) visit(i, i + kScanBlock);
  }
  if (i < x.size()) visit(i, x.size());
}

// A token still in the running: its unnormalized probability exp(scaled logit - max) and its id.
struct Candidate {
  float weight;
  int32_t id;
};

// (weight desc, id asc): probability order, a total order so top_p's cut is unique under ties.
bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.weight > b.weight || (a.weight == b.weight && a.id < b.id);
}

// A logit with its id: top_k's selection buffer.
struct Scored {
  float value;
  int32_t id;
};

struct Scratch {
  std::vector<Candidate> candidates;  // [<= vocab] the tokens a draw may pick
  std::vector<float> weights;         // [vocab] f32 exp(scaled) by id, for dense draws
  std::vector<double> block_mass;     // [ceil(vocab / kBlockTokens)] sums of `weights`
  std::vector<Scored> selection;      // [< 2 * top_k + 256 usually] top_k's running buffer
  std::vector<float> raw_logits;      // [vocab] f32, the input row when logprobs are asked
  std::vector<std::pair<int32_t, float>> forbidden_saved;  // (id, logit) before forbidding
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// exp(x) for x <= 0, within 1e-7 relative of exp (Cody-Waite reduction by ln 2, degree-7 Taylor
// on |r| <= 0.35). Branch-free so the loops that call it vectorize; -inf, NaN and anything below
// -87 (where exp leaves the normal floats) give 0, which is what a filtered token weighs.
inline float exp_nonpositive(float x) {
  const bool zero = !(x >= -87.0f);
  x = zero ? -87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;            // x - n ln 2
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>(static_cast<int32_t>(n + 127.0f) << 23);  // 2^n
  return zero ? 0.0f : p * scale;
}

// Largest value; NaN ignored; -inf when there is nothing else.
float max_value(std::span<const float> x) {
  F32x16 lanes;
  splat(lanes, kNegInf);
  size_t i = 0;
  for (; i + kVec <= x.size(); i += kVec) {
    F32x16 v;
    load(v, x.data() + i);
    lanes = v > lanes ? v : lanes;  // a NaN in v keeps the lane
  }
  float m = kNegInf;
  for (; i < x.size(); ++i) m = x[i] > m ? x[i] : m;
  for (size_t j = 0; j < kVec; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m;
}

// Lowest id among the maxima; NaN never wins; 0 when nothing beats -inf.
int32_t argmax(std::span<const float> logits) {
  const float m = max_value(logits);
  if (!(m > kNegInf)) return 0;
  int32_t found = -1;
  scan(
      logits,
      [&](const F32x16& v, I32x16& mask) {
        F32x16 mv;
        splat(mv, found < 0 ? m : std::numeric_limits<float>::quiet_NaN());
        mask = v == mv;
      },
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end && found < 0; ++i) {
          if (logits[i] == m) found = static_cast<int32_t>(i);
        }
      });
  return found;
}

// sum_i exp((x_i - max) * inv_t) in double, blockwise. With kStore, also writes each weight to
// weights[i] and each block's sum to block_mass[b] (the dense draw's index). Independent float
// lanes let the compiler vectorize the sum without reassociating it.
template <bool kStore>
double sum_exp(std::span<const float> x, float max_x, float inv_t, float* weights,
               double* block_mass) {
  double total = 0.0;
  for (size_t start = 0, b = 0; start < x.size(); start += kBlockTokens, ++b) {
    const size_t end = std::min(x.size(), start + kBlockTokens);
    float lanes[kVec] = {};
    size_t i = start;
    for (; i + kVec <= end; i += kVec) {
      for (size_t j = 0; j < kVec; ++j) {
        const float w = exp_nonpositive((x[i + j] - max_x) * inv_t);
        if constexpr (kStore) weights[i + j] = w;
        lanes[j] += w;
      }
    }
    double mass = 0.0;
    for (; i < end; ++i) {
      const float w = exp_nonpositive((x[i] - max_x) * inv_t);
      if constexpr (kStore) weights[i] = w;
      mass += w;
    }
    for (float v : lanes) mass += v;
    if constexpr (kStore) block_mass[b] = mass;
    total += mass;
  }
  return total;
}

bool any_above_neg_inf(std::span<const float> logits) {
  return std::any_of(logits.begin(), logits.end(), [](float x) { return x > kNegInf; });
}

// Sets the active forbidden ids to -inf unless that would leave no token at all (then the row is
// left as it was: a sequence must produce some token).
void apply_forbidden(std::span<float> logits, const SequenceSamplingState& state, Scratch& s) {
  std::span<const int32_t> ids = state.active_forbidden_ids();
  if (ids.empty()) return;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  s.forbidden_saved.clear();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) continue;
    s.forbidden_saved.emplace_back(id, logits[id]);
    logits[id] = kNegInf;
  }
  if (any_above_neg_inf(logits)) return;
  for (const auto& [id, value] : s.forbidden_saved) logits[id] = value;
}

// top_k in one pass: leaves in buf every finite logit >= the k-th largest (ties kept) and returns
// that k-th value, or -inf when fewer than k logits are finite (buf then holds all of them). The
// floor rises as the pass goes: whenever the buffer fills, it is cut back to the values >= its
// k-th largest, so most blocks are skipped by one vector compare. A value >= the final k-th value
// is >= every floor on the way, so it is never skipped nor dropped.
float select_top_k(std::span<const float> x, int32_t k, std::vector<Scored>& buf) {
  const size_t keep = static_cast<size_t>(k);
  size_t capacity = 2 * keep + 256;
  auto by_value = [](const Scored& a, const Scored& b) { return a.value > b.value; };
  buf.clear();
  float floor_value = kNegInf;
  F32x16 neg_inf_v;
  splat(neg_inf_v, kNegInf);
  scan(
      x,
      [&](const F32x16& v, I32x16& mask) {
        F32x16 fv;
        splat(fv, floor_value);
        mask = (v >= fv) & (v > neg_inf_v);
      },
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          if (!(x[i] >= floor_value) || !(x[i] > kNegInf)) continue;
          buf.push_back({x[i], static_cast<int32_t>(i)});
          if (buf.size() < capacity) continue;
          std::nth_element(buf.begin(), buf.begin() + (keep - 1), buf.end(), by_value);
          floor_value = buf[keep - 1].value;
          const float f = floor_value;
          buf.erase(
              std::partition(buf.begin(), buf.end(), [f](const Scored& e) { return e.value >= f; }),
              buf.end());
          if (buf.size() * 2 >= capacity) capacity *= 2;  // many ties with the floor
        }
      });
  if (buf.size() < keep) return kNegInf;
  std::nth_element(buf.begin(), buf.begin() + (keep - 1), buf.end(), by_value);
  return buf[keep - 1].value;
}

// top_p: keeps candidate i (in ranks_before order) while the mass ranked strictly before it is
// below `target`. Quickselect on mass: [0, lo) is known kept with mass `kept_mass`, the cut lies
// in (lo, hi]. Leaves the kept candidates in cands[0, result).
size_t top_p_cut(std::vector<Candidate>& cands, double target) {
  size_t lo = 0;
  size_t hi = cands.size();
  double kept_mass = 0.0;
  while (hi - lo > kTopPSortBlock) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(cands.begin() + lo, cands.begin() + mid, cands.begin() + hi, ranks_before);
    double mass = 0.0;  // of [lo, mid), all ranked before cands[mid]
    for (size_t i = lo; i < mid; ++i) mass += cands[i].weight;
    if (kept_mass + mass >= target) {
      hi = mid;  // cands[mid] is cut, so the cut is at or before mid
    } else {
      kept_mass += mass;
      lo = mid;  // cands[mid] is kept
    }
  }
  std::sort(cands.begin() + lo, cands.begin() + hi, ranks_before);
  size_t kept = lo;
  while (kept < hi && kept_mass < target) kept_mass += cands[kept++].weight;
  return kept;
}

// A prefix of the ranking (weight desc, id asc): the tokens with weight > weight, or weight ==
// weight and id <= id.
struct RankCut {
  float weight;
  int64_t id;
  bool contains(float w, size_t i) const {
    return w > weight || (w == weight && static_cast<int64_t>(i) <= id);
  }
};

// The mass of the tokens ranked strictly before token i: top_p keeps i iff it is below the
// target. One vectorized pass; ties with w[i] (rare) are settled by a scalar pass over [0, i).
double mass_ranked_before(std::span<const float> w, size_t i) {
  const float wi = w[i];
  F32x16 wv;
  splat(wv, wi);
  double mass = 0.0;
  int64_t ties = 0;
  size_t k = 0;
  const size_t vector_end = w.size() - w.size() % kVec;
  while (k < vector_end) {
    F32x16 lanes = F32x16{};
    I32x16 equal = I32x16{};
    const size_t end = std::min(vector_end, k + kBlockTokens);
    for (; k < end; k += kVec) {
      F32x16 v;
      load(v, w.data() + k);
      lanes += v > wv ? v : F32x16{};
      equal -= v == wv;  // true lanes are -1
    }
    for (size_t j = 0; j < kVec; ++j) {
      mass += lanes[j];
      ties += equal[j];
    }
  }
  for (; k < w.size(); ++k) {
    if (w[k] > wi) mass += w[k];
    ties += w[k] == wi;
  }
  if (ties > 1) {
    for (k = 0; k < i; ++k) {
      if (w[k] == wi) mass += wi;
    }
  }
  return mass;
}

// Inverse CDF over the candidates in their current order; r in [0, total mass).
int32_t pick_candidate(const std::vector<Candidate>& cands, double r) {
  double acc = 0.0;
  int32_t last_positive = cands.front().id;  // the maximum is always a candidate, weight 1
  for (const Candidate& c : cands) {
    if (!(c.weight > 0.0f)) continue;
    acc += c.weight;
    last_positive = c.id;
    if (r < acc) return c.id;
  }
  return last_positive;  // only through rounding, when u is within an ulp of 1
}

// The mass of the tokens within `cut`, per block into block_mass, and in total: weights above the
// cut weight by vector; blocks holding ties with it are redone one by one.
double mass_within_cut(const RankCut& cut, Scratch& s) {
  const std::span<const float> w(s.weights);
  F32x16 cut_v;
  splat(cut_v, cut.weight);
  double total = 0.0;
  for (size_t b = 0, start = 0; start < w.size(); ++b, start += kBlockTokens) {
    const size_t end = std::min(w.size(), start + kBlockTokens);
    F32x16 lanes = F32x16{};
    I32x16 ties = I32x16{};
    size_t i = start;
    for (; i + kVec <= end; i += kVec) {
      F32x16 v;
      load(v, w.data() + i);
      lanes += v > cut_v ? v : F32x16{};
      ties |= v == cut_v;
    }
    double mass = 0.0;
    for (size_t j = 0; j < kVec; ++j) mass += lanes[j];
    if (any_lane(ties) || i < end) {
      mass = 0.0;
      for (size_t k = start; k < end; ++k) {
        if (cut.contains(w[k], k)) mass += w[k];
      }
    }
    s.block_mass[b] = mass;
    total += mass;
  }
  return total;
}

// Inverse CDF by id over the weights that `keep` accepts, using the block masses (sums of exactly
// those weights) to skip ahead; r in [0, total).
template <typename Keep>
int32_t pick_dense(const Scratch& s, double r, Keep&& keep) {
  const size_t vocab = s.weights.size();
  const size_t num_blocks = s.block_mass.size();
  double before = 0.0;
  size_t b = 0;
  while (b + 1 < num_blocks && !(r < before + s.block_mass[b])) before += s.block_mass[b++];
  // Rounding between the lane sums and this scan can leave r just past a block's end, or in an
  // empty last block: then the last accepted weight at or before that block is taken.
  for (;; --b) {
    const size_t start = b * kBlockTokens;
    const size_t end = std::min(vocab, start + kBlockTokens);
    int64_t last_positive = -1;
    double acc = before;
    for (size_t i = start; i < end; ++i) {
      const float w = s.weights[i];
      if (!(w > 0.0f) || !keep(w, i)) continue;
      acc += w;
      last_positive = static_cast<int64_t>(i);
      if (r < acc) return static_cast<int32_t>(i);
    }
    if (last_positive >= 0 || b == 0) {
      return static_cast<int32_t>(std::max<int64_t>(last_positive, 0));
    }
    before -= s.block_mass[b - 1];
  }
}

// Dense top_p by rejection: draw from the proposal (at first every token), keep the token if
// the mass ranked before it is below the target, else shrink the proposal to the tokens ranked
// before the rejected one and draw again. Every proposal contains all kept tokens and is
// proportional to the weights, so an accepted token follows the renormalized top_p distribution
// exactly; a draw is accepted with probability >= top_p, so the expected cost is about 1/top_p
// vectorized passes instead of ordering the vocabulary. After kMaxTopPRejections the remaining
// proposal is ordered (quickselect on mass) and drawn from directly.
int32_t dense_top_p(double target, double total, double u, SequenceSamplingState& state,
                    Scratch& s) {
  const std::span<const float> w(s.weights);
  auto all = [](float, size_t) { return true; };
  size_t token = static_cast<size_t>(pick_dense(s, u * total, all));
  for (int rejections = 0; mass_ranked_before(w, token) >= target; ++rejections) {
    const RankCut proposal{w[token], static_cast<int64_t>(token) - 1};  // ranked before token
    if (rejections + 1 == kMaxTopPRejections) {
      std::vector<Candidate>& cands = s.candidates;
      cands.clear();
      for (size_t i = 0; i < w.size(); ++i) {
        if (w[i] > 0.0f && proposal.contains(w[i], i)) {
          cands.push_back({w[i], static_cast<int32_t>(i)});
        }
      }
      cands.resize(top_p_cut(cands, target));
      double kept = 0.0;
      for (const Candidate& c : cands) kept += c.weight;
      return pick_candidate(cands, state.next_uniform() * kept);
    }
    const double mass = mass_within_cut(proposal, s);
    token = static_cast<size_t>(
        pick_dense(s, state.next_uniform() * mass,
                   [&proposal](float x, size_t i) { return proposal.contains(x, i); }));
  }
  return static_cast<int32_t>(token);
}

int32_t draw(std::span<const float> logits, const SamplingParams& params,
             SequenceSamplingState& state, Scratch& s) {
  // Drawn first so every non-greedy call consumes a number, degenerate rows included.
  const double u = state.next_uniform();
  const size_t vocab = logits.size();
  const bool top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab;
  // top_k's one pass also yields the maximum (it is among the selected); the others read it first.
  float kth = kNegInf;
  float max_logit = kNegInf;
  if (top_k) {
    kth = select_top_k(logits, params.top_k, s.selection);
    for (const Scored& e : s.selection) max_logit = std::max(max_logit, e.value);
  } else {
    max_logit = max_value(logits);
  }
  if (!(max_logit > kNegInf)) return 0;
  if (std::isinf(max_logit)) return argmax(logits);  // +inf: that token is certain
  const float inv_t = 1.0f / params.temperature;

  if (!top_k && params.min_p <= 0.0f) {
    // Dense: weigh every token (one vectorized pass); top_p then samples by rejection.
    s.weights.resize(vocab);
    s.block_mass.resize((vocab + kBlockTokens - 1) / kBlockTokens);
    const double total =
        sum_exp<true>(logits, max_logit, inv_t, s.weights.data(), s.block_mass.data());
    if (params.top_p >= 1.0f) {
      return pick_dense(s, u * total, [](float, size_t) { return true; });
    }
    return dense_top_p(static_cast<double>(params.top_p) * total, total, u, state, s);
  } else {
    // Sparse: top_k and min_p are thresholds on the logit, so only survivors are weighed.
    // min_p in log space: p_i / p_max = exp(scaled_i) >= min_p  <=>  scaled_i >= log(min_p).
    const float min_scaled = params.min_p > 0.0f ? std::log(params.min_p) : kNegInf;
    std::vector<Candidate>& cands = s.candidates;
    cands.clear();
    auto consider = [&](float x, int32_t id) {
      const float scaled = (x - max_logit) * inv_t;
      if (scaled >= min_scaled) cands.push_back({exp_nonpositive(scaled), id});
    };
    if (top_k) {
      for (const Scored& e : s.selection) {
        if (e.value >= kth) consider(e.value, e.id);
      }
    } else {
      F32x16 max_v, inv_t_v, min_scaled_v, neg_inf_v;
      splat(max_v, max_logit);
      splat(inv_t_v, inv_t);
      splat(min_scaled_v, min_scaled);
      splat(neg_inf_v, kNegInf);
      scan(
          logits,
          [&](const F32x16& v, I32x16& mask) {
            mask = (v > neg_inf_v) & ((v - max_v) * inv_t_v >= min_scaled_v);
          },
          [&](size_t begin, size_t end) {
            for (size_t i = begin; i < end; ++i) {
              if (logits[i] > kNegInf) consider(logits[i], static_cast<int32_t>(i));
            }
          });
    }
    if (params.top_p < 1.0f) {
      double total = 0.0;
      for (const Candidate& c : cands) total += c.weight;
      cands.resize(top_p_cut(cands, static_cast<double>(params.top_p) * total));
    }
  }
  double total = 0.0;
  for (const Candidate& c : s.candidates) total += c.weight;
  return pick_candidate(s.candidates, u * total);
}

// Raw log-softmax: logprob(x) = x - (m + log(sum exp(x_j - m))), the sum in double.
void fill_logprobs(std::span<const float> raw, int32_t chosen, int32_t num_top, SampleOutput* out) {
  const float max_x = max_value(raw);
  double log_norm = std::numeric_limits<double>::infinity();  // non-finite max: all -inf
  if (std::isfinite(max_x)) {
    log_norm = max_x + std::log(sum_exp<false>(raw, max_x, 1.0f, nullptr, nullptr));
  }
  auto logprob_of = [&](int32_t id) -> float {
    const float x = raw[id];
    if (!(x > kNegInf) || !std::isfinite(log_norm)) return kNegInf;
    return static_cast<float>(static_cast<double>(x) - log_norm);
  };
  out->logprob = logprob_of(chosen);

  // Top num_top by (logit desc, id asc): a heap whose front is the worst entry kept so far. Ids
  // arrive in increasing order, so a newcomer must be strictly greater to displace it.
  std::vector<TokenLogprob>& top = out->top_logprobs;
  top.clear();
  if (num_top <= 0) return;
  auto value_of = [&](int32_t id) { return raw[id] > kNegInf ? raw[id] : kNegInf; };
  auto better = [&](const TokenLogprob& a, const TokenLogprob& b) {
    const float va = value_of(a.token_id);
    const float vb = value_of(b.token_id);
    return va > vb || (va == vb && a.token_id < b.token_id);
  };
  const size_t limit = std::min<size_t>(static_cast<size_t>(num_top), raw.size());
  for (size_t i = 0; i < limit; ++i) top.push_back({static_cast<int32_t>(i), 0.0f});
  std::make_heap(top.begin(), top.end(), better);
  float worst = value_of(top.front().token_id);
  const std::span<const float> rest = raw.subspan(limit);
  scan(
      rest,
      [&](const F32x16& v, I32x16& mask) {
        F32x16 wv;
        splat(wv, worst);
        mask = v > wv;
      },
      [&](size_t begin, size_t end) {
        for (size_t j = begin; j < end; ++j) {
          if (!(rest[j] > worst)) continue;
          std::pop_heap(top.begin(), top.end(), better);
          top.back() = {static_cast<int32_t>(limit + j), 0.0f};
          std::push_heap(top.begin(), top.end(), better);
          worst = value_of(top.front().token_id);
        }
      });
  std::sort(top.begin(), top.end(), better);
  for (TokenLogprob& t : top) t.logprob = logprob_of(t.token_id);
}

}  // namespace

SequenceSamplingState::SequenceSamplingState(const SamplingParams& params, uint64_t seed,
                                             std::span<const int32_t> prompt_ids)
    : rng_(seed) {
  if (params.repetition_penalty != 1.0f) {
    prompt_set_.assign(prompt_ids.begin(), prompt_ids.end());
    std::sort(prompt_set_.begin(), prompt_set_.end());
    prompt_set_.erase(std::unique(prompt_set_.begin(), prompt_set_.end()), prompt_set_.end());
  }
}

void SequenceSamplingState::append(int32_t token) {
  ++output_counts_[token];
  ++num_output_tokens_;
}

void SequenceSamplingState::forbid_until(std::span<const int32_t> ids, int32_t num_output_tokens) {
  forbidden_ids_.assign(ids.begin(), ids.end());
  forbidden_until_tokens_ = num_output_tokens;
}

std::span<const int32_t> SequenceSamplingState::active_forbidden_ids() const {
  if (num_output_tokens_ >= forbidden_until_tokens_) return {};
  return forbidden_ids_;
}

int32_t SequenceSamplingState::output_count(int32_t token) const {
  auto it = output_counts_.find(token);
  return it == output_counts_.end() ? 0 : it->second;
}

bool SequenceSamplingState::seen(int32_t token) const {
  return output_counts_.contains(token) ||
         std::binary_search(prompt_set_.begin(), prompt_set_.end(), token);
}

double SequenceSamplingState::next_uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

uint64_t sequence_seed(const SamplingParams& params, int32_t choice_index, uint64_t engine_seed) {
  if (!params.seed) return engine_seed;
  return *params.seed + static_cast<uint64_t>(choice_index);
}

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     const SequenceSamplingState& state) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };

  const float r = params.repetition_penalty;
  if (r != 1.0f) {
    auto penalize = [&](int32_t id) {
      float& l = logits[id];
      l = l > 0.0f ? l / r : l * r;
    };
    for (int32_t id : state.prompt_set_) {
      if (in_vocab(id)) penalize(id);
    }
    for (const auto& [id, count] : state.output_counts_) {
      if (in_vocab(id) &&
          !std::binary_search(state.prompt_set_.begin(), state.prompt_set_.end(), id)) {
        penalize(id);
      }
    }
  }

  // Two subtractions in vLLM's order (frequency, then presence), so float results agree.
  const float frequency = params.frequency_penalty;
  const float presence = params.presence_penalty;
  if (frequency != 0.0f || presence != 0.0f) {
    for (const auto& [id, count] : state.output_counts_) {
      if (!in_vocab(id)) continue;
      logits[id] -= frequency * static_cast<float>(count);
      logits[id] -= presence;
    }
  }
}

int32_t sample(std::span<float> logits, const SamplingParams& params, SequenceSamplingState& state,
               SampleOutput* out) {
  if (logits.empty()) return 0;
  Scratch& s = scratch();
  const bool want_logprobs = out != nullptr && params.logprobs >= 0;
  if (want_logprobs) s.raw_logits.assign(logits.begin(), logits.end());

  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] += bias;
  }
  apply_penalties(logits, params, state);
  apply_forbidden(logits, state, s);
  const int32_t token = params.greedy() ? argmax(logits) : draw(logits, params, state, s);

  if (want_logprobs) fill_logprobs(s.raw_logits, token, params.logprobs, out);
  return token;
}

void raw_logprobs(std::span<const float> logits, int32_t token, int32_t num_top, SampleOutput* out) {
  fill_logprobs(logits, token, num_top, out);
}

}  // namespace ls
