#include "io/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ls {
namespace {

// Each helper below is one torch op on float32 tensors or one Python scalar expression; every
// intermediate is a named variable so no compiler contracts a*b+c into an FMA that torch does not
// do.

// base ** (arange(0, dim, 2).float() / dim): the exponent is a float32 division, base is rounded
// to float32 (a Python scalar meeting a float32 tensor), and the power is taken in float32.
std::vector<float> pow_base(float base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  const auto dim_f = static_cast<float>(dim);
  for (size_t i = 0; i < out.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / dim_f;
    out[i] = std::pow(base, exponent);
  }
  return out;
}

// 1.0 / tensor is tensor.reciprocal() * 1.0 in torch: one float32 division.
std::vector<float> reciprocal(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = 1.0f / x[i];
  return out;
}

// _compute_default_rope_parameters / the first lines of linear and llama3.
std::vector<float> default_inv_freq(double theta, int64_t dim) {
  return reciprocal(pow_base(static_cast<float>(theta), dim));
}

std::vector<float> dynamic_inv_freq(const RopeConfig& rope, int64_t dim, int64_t max_pos,
                                    int64_t seq_len) {
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  if (seq_len <= max_pos) {
    // Initialisation: seq_len is the Python int max_position_embeddings, so the base update is
    // double arithmetic (and is 1 up to rounding).
    const double ratio = rope.factor * static_cast<double>(max_pos) / static_cast<double>(max_pos);
    const double scale = std::pow(ratio - (rope.factor - 1), exponent);
    return default_inv_freq(rope.theta * scale, dim);
  }
  // The forward-time update: seq_len is an int64 tensor, so factor * seq_len and every later step
  // are float32 tensor ops; the scalar power goes through std::pow(float, double).
  const float scaled = static_cast<float>(rope.factor) * static_cast<float>(seq_len);
  const float ratio = scaled / static_cast<float>(max_pos);
  const float shifted = ratio - static_cast<float>(rope.factor - 1);
  const auto scale = static_cast<float>(std::pow(static_cast<double>(shifted), exponent));
  const float base = static_cast<float>(rope.theta) * scale;
  return reciprocal(pow_base(base, dim));
}

// find_correction_dim of _compute_yarn_parameters, in Python doubles.
double yarn_correction_dim(double num_rotations, int64_t dim, double base, int64_t orig_max_pos) {
  const double rotations = num_rotations * 2 * std::numbers::pi;
  const double log_ratio = std::log(static_cast<double>(orig_max_pos) / rotations);
  return (static_cast<double>(dim) * log_ratio) / (2 * std::log(base));
}

std::vector<float> yarn_inv_freq(const RopeConfig& rope, int64_t dim, int64_t max_pos) {
  const int64_t orig =
      rope.original_max_position_embeddings > 0 ? rope.original_max_position_embeddings : max_pos;
  const std::vector<float> pos_freqs = pow_base(static_cast<float>(rope.theta), dim);
  const auto factor_f = static_cast<float>(rope.factor);
  const double beta_fast = rope.beta_fast != 0 ? rope.beta_fast : 32;  // Python's `or 32`
  const double beta_slow = rope.beta_slow != 0 ? rope.beta_slow : 1;

  double low = yarn_correction_dim(beta_fast, dim, rope.theta, orig);
  double high = yarn_correction_dim(beta_slow, dim, rope.theta, orig);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero-width ramp
  const auto low_f = static_cast<float>(low);
  const auto width_f = static_cast<float>(high - low);

  std::vector<float> out(pos_freqs.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float scaled_freq = factor_f * pos_freqs[i];
    const float interpolation = 1.0f / scaled_freq;
    const float linear = (static_cast<float>(i) - low_f) / width_f;
    const float ramp = std::clamp(linear, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float interpolation_weight = 1.0f - extrapolation_factor;
    const float a = interpolation * interpolation_weight;
    const float b = extrapolation * extrapolation_factor;
    out[i] = a + b;
  }
  return out;
}

std::vector<float> llama3_inv_freq(const RopeConfig& rope, int64_t dim, int64_t max_pos) {
  const std::vector<float> inv_freq = default_inv_freq(rope.theta, dim);
  const int64_t orig =
      rope.original_max_position_embeddings > 0 ? rope.original_max_position_embeddings : max_pos;
  const auto old_context = static_cast<double>(orig);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;
  // Python scalars meeting float32 tensors are rounded to float32 first.
  const auto two_pi_f = static_cast<float>(2 * std::numbers::pi);
  const auto low_wavelen_f = static_cast<float>(low_freq_wavelen);
  const auto high_wavelen_f = static_cast<float>(high_freq_wavelen);
  const auto factor_f = static_cast<float>(rope.factor);
  const auto old_context_f = static_cast<float>(old_context);
  const auto low_factor_f = static_cast<float>(rope.low_freq_factor);
  const auto smooth_width_f = static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);

  std::vector<float> out(inv_freq.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const float inv = inv_freq[i];
    const float wavelen = (1.0f / inv) * two_pi_f;  // 2π / t is t.reciprocal() * 2π
    const float inv_llama = wavelen > low_wavelen_f ? inv / factor_f : inv;
    const float context_ratio = (1.0f / wavelen) * old_context_f;
    const float smooth = (context_ratio - low_factor_f) / smooth_width_f;
    const float one_minus = 1.0f - smooth;
    const float a_scaled = one_minus * inv_llama;
    const float a = a_scaled / factor_f;
    const float b = smooth * inv_llama;
    const float smoothed = a + b;
    const bool is_medium = !(wavelen < high_wavelen_f) && !(wavelen > low_wavelen_f);
    out[i] = is_medium ? smoothed : inv_llama;
  }
  return out;
}

double get_mscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  const double slope = 0.1 * mscale;
  const double term = slope * std::log(scale);
  return term + 1.0;
}

}  // namespace

std::string_view rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

int64_t rope_rotary_dim(const RopeConfig& rope, int64_t head_dim) {
  return static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim,
                                 int64_t max_position_embeddings, int64_t seq_len) {
  const int64_t dim = rope_rotary_dim(rope, head_dim);
  if (dim <= 0 || dim % 2 != 0) return {};
  switch (rope.type) {
    case RopeType::kDefault:
      return default_inv_freq(rope.theta, dim);
    case RopeType::kLinear: {
      std::vector<float> inv_freq = default_inv_freq(rope.theta, dim);
      const auto factor_f = static_cast<float>(rope.factor);
      for (float& f : inv_freq) f /= factor_f;
      return inv_freq;
    }
    case RopeType::kDynamic:
      if (dim == 2) return {};  // the NTK exponent dim / (dim - 2) is undefined
      return dynamic_inv_freq(rope, dim, max_position_embeddings, seq_len);
    case RopeType::kYarn:
      return yarn_inv_freq(rope, dim, max_position_embeddings);
    case RopeType::kLlama3:
      return llama3_inv_freq(rope, dim, max_position_embeddings);
  }
  return {};
}

double rope_attention_scaling(const RopeConfig& rope) {
  if (rope.type != RopeType::kYarn) return 1.0;
  if (rope.attention_factor) return *rope.attention_factor;
  // Python truthiness: both present and non-zero.
  if (rope.mscale.value_or(0) != 0 && rope.mscale_all_dim.value_or(0) != 0) {
    return get_mscale(rope.factor, *rope.mscale) / get_mscale(rope.factor, *rope.mscale_all_dim);
  }
  return get_mscale(rope.factor, 1);
}

}  // namespace ls
