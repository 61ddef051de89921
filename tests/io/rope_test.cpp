// RoPE frequencies against transformers itself: tests/fixtures/io/rope_fixtures.json holds, for a
// grid of config.json fragments, the inv_freq and attention scaling that transformers' rotary
// modules compute (scripts/fixtures/make_rope_fixtures.py). Each config goes through
// parse_model_config, so the three spellings of the settings are checked together with the math.

#include "io/rope.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <set>

#include "io/model_config.h"

namespace ls {
namespace {

constexpr double kRelTol = 1e-6;

const nlohmann::json& fixtures() {
  static const nlohmann::json j = [] {
    std::ifstream in("tests/fixtures/io/rope_fixtures.json");
    EXPECT_TRUE(in.good()) << "missing fixture; run scripts/fixtures/make_rope_fixtures.py";
    return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
  }();
  return j;
}

void expect_close(const std::vector<float>& got, const nlohmann::json& want) {
  ASSERT_EQ(got.size(), want.size());
  int num_exact = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto w = static_cast<float>(want[i].get<double>());
    EXPECT_LE(std::abs(got[i] - w), kRelTol * std::abs(w))
        << "element " << i << ": " << got[i] << " vs " << w;
    num_exact += got[i] == w;
  }
  // Beyond the tolerance: the float32 steps mirror torch's, so nearly all values agree to the bit
  // (a last-ulp difference of powf implementations is all that remains).
  EXPECT_GE(num_exact * 10, static_cast<int>(got.size()) * 9);
}

TEST(Rope, MatchesTransformersOnEveryFixture) {
  const auto& cases = fixtures().value("cases", nlohmann::json::array());
  ASSERT_GE(cases.size(), 20u);
  int num_updates = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    auto cfg = parse_model_config(c["config"].dump(), name + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    EXPECT_EQ(cfg->head_dim(), c["head_dim"].get<int64_t>());
    const int64_t max_pos = cfg->max_position_embeddings();

    expect_close(rope_inv_freq(cfg->rope(), cfg->head_dim(), max_pos, max_pos), c["inv_freq"]);
    EXPECT_NEAR(rope_attention_scaling(cfg->rope()), c["attention_scaling"].get<double>(), 1e-12);

    for (const auto& u : c["updates"]) {
      const auto seq_len = u["seq_len"].get<int64_t>();
      SCOPED_TRACE(seq_len);
      ASSERT_GT(seq_len, max_pos);
      expect_close(rope_inv_freq(cfg->rope(), cfg->head_dim(), max_pos, seq_len), u["inv_freq"]);
      EXPECT_NEAR(rope_attention_scaling(cfg->rope()), u["attention_scaling"].get<double>(), 1e-12);
      ++num_updates;
    }
  }
  EXPECT_GE(num_updates, 4);
}

TEST(Rope, FixtureGridCoversEveryTypeAndSpelling) {
  // The grid must keep covering what the tests above claim; fail loudly if it shrinks.
  std::set<RopeType> types;
  std::set<int64_t> head_dims;
  bool partial = false, legacy = false, v5 = false, rope_type_key = false;
  for (const auto& c : fixtures().value("cases", nlohmann::json::array())) {
    auto cfg = parse_model_config(c["config"].dump(), "config.json");
    ASSERT_TRUE(cfg.ok());
    types.insert(cfg->rope().type);
    head_dims.insert(cfg->head_dim());
    partial |= cfg->rope().partial_rotary_factor == 0.5;
    const auto& j = c["config"];
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
      legacy |= j["rope_scaling"].contains("type");
      rope_type_key |= j["rope_scaling"].contains("rope_type");
    }
    v5 |= j.contains("rope_parameters");
  }
  EXPECT_EQ(types.size(), 5u);
  EXPECT_TRUE(head_dims.count(64) && head_dims.count(96) && head_dims.count(128));
  EXPECT_TRUE(partial && legacy && v5 && rope_type_key);
}

TEST(Rope, DynamicDependsOnSequenceLengthOnlyAboveTheMaximum) {
  RopeConfig r;
  r.type = RopeType::kDynamic;
  r.factor = 2.0;
  const auto at_max = rope_inv_freq(r, 64, 2048, 2048);
  EXPECT_EQ(rope_inv_freq(r, 64, 2048, 1), at_max);
  EXPECT_EQ(at_max, rope_inv_freq(RopeConfig{}, 64, 2048, 2048));  // ratio 1: plain RoPE
  const auto above = rope_inv_freq(r, 64, 2048, 8192);
  ASSERT_EQ(above.size(), at_max.size());
  EXPECT_EQ(above[0], 1.0f);
  for (size_t i = 1; i < above.size(); ++i) EXPECT_LT(above[i], at_max[i]);
}

TEST(Rope, AttentionScalingFollowsTransformersRules) {
  RopeConfig r;
  EXPECT_EQ(rope_attention_scaling(r), 1.0);
  r.type = RopeType::kLlama3;
  r.factor = 8;
  EXPECT_EQ(rope_attention_scaling(r), 1.0);
  r.type = RopeType::kYarn;
  EXPECT_DOUBLE_EQ(rope_attention_scaling(r), 0.1 * std::log(8.0) + 1.0);
  r.mscale = 0.707;  // only one of the pair set: ignored
  EXPECT_DOUBLE_EQ(rope_attention_scaling(r), 0.1 * std::log(8.0) + 1.0);
  r.mscale_all_dim = 1.0;
  EXPECT_DOUBLE_EQ(rope_attention_scaling(r),
                   (0.1 * 0.707 * std::log(8.0) + 1.0) / (0.1 * std::log(8.0) + 1.0));
  r.attention_factor = 0.5;  // explicit wins
  EXPECT_EQ(rope_attention_scaling(r), 0.5);
  RopeConfig small;
  small.type = RopeType::kYarn;
  small.factor = 1.0;  // no extension: no scaling
  EXPECT_EQ(rope_attention_scaling(small), 1.0);
}

TEST(Rope, InvalidRotaryDimGivesNoFrequencies) {
  RopeConfig r;
  EXPECT_TRUE(rope_inv_freq(r, 0, 2048, 2048).empty());
  EXPECT_TRUE(rope_inv_freq(r, 7, 2048, 2048).empty());
  r.partial_rotary_factor = 0.25;
  EXPECT_EQ(rope_inv_freq(r, 64, 2048, 2048).size(), 8u);
}

}  // namespace
}  // namespace ls
