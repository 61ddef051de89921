#include "attention/head_pattern.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ls {
namespace {

TEST(HeadPattern, ParsesDuoAttentionTsv) {
  auto g = parse_head_gates("1.0e+00\t2.5e-01\n-1.0e-03\t9.0e-01\n", "t.tsv", 2, 2);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->gates, (std::vector<double>{1.0, 0.25, 0.0, 0.9}));  // clipped to [0, 1]
}

TEST(HeadPattern, ShapeAndSyntaxErrorsNameTheFile) {
  auto rows = parse_head_gates("1\t1\n", "p.tsv", 2, 2);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("p.tsv"), std::string::npos);
  auto cols = parse_head_gates("1\t1\t1\n1\t1\t1\n", "p.tsv", 2, 2);
  EXPECT_FALSE(cols.ok());
  auto nan = parse_head_gates("1\tabc\n1\t1\n", "p.tsv", 2, 2);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("abc"), std::string::npos);
  EXPECT_FALSE(load_head_gates("/nonexistent/x.tsv", 2, 2).ok());
}

// The oracle: threshold = the k-th smallest gate; heads strictly below are streaming, and among
// heads equal to it the ones earliest in (layer, head) order are taken until k are chosen.
std::vector<bool> oracle(const std::vector<double>& gates, double ratio) {
  const size_t k = static_cast<size_t>(std::llround(ratio * static_cast<double>(gates.size())));
  std::vector<bool> out(gates.size(), false);
  if (k == 0) return out;
  std::vector<double> sorted = gates;
  std::sort(sorted.begin(), sorted.end());
  const double thr = sorted[k - 1];
  size_t taken = 0;
  for (size_t i = 0; i < gates.size(); ++i)
    if (gates[i] < thr) out[i] = true, ++taken;
  for (size_t i = 0; i < gates.size() && taken < k; ++i)
    if (gates[i] == thr) out[i] = true, ++taken;
  return out;
}

TEST(HeadPattern, GlobalQuantileWithDeterministicTies) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    HeadGates g;
    g.num_layers = 6;
    g.num_kv_heads = 4;
    std::uniform_int_distribution<int> level(0, 4);  // few distinct values: many ties
    for (int i = 0; i < 24; ++i) g.gates.push_back(level(rng) / 4.0);
    for (double ratio : {0.0, 0.25, 0.5, 0.7, 1.0}) {
      EXPECT_EQ(choose_streaming_heads(g, ratio), oracle(g.gates, ratio));
    }
  }
}

TEST(HeadPattern, DefaultSplitsEveryLayer) {
  auto s = default_streaming_heads(3, 4, 0.5);
  for (int l = 0; l < 3; ++l) {
    EXPECT_FALSE(s[static_cast<size_t>(l * 4 + 0)]);
    EXPECT_FALSE(s[static_cast<size_t>(l * 4 + 1)]);
    EXPECT_TRUE(s[static_cast<size_t>(l * 4 + 2)]);
    EXPECT_TRUE(s[static_cast<size_t>(l * 4 + 3)]);
  }
}

TEST(HeadPattern, WriteThenReadRoundTrips) {
  HeadGates g{2, 3, {0.1, 0.5, 1.0, 0.0, 0.75, 0.3333}};
  const auto path = std::filesystem::temp_directory_path() / "ls_pattern_test.tsv";
  ASSERT_TRUE(write_head_gates(path, g).ok());
  auto back = load_head_gates(path, 2, 3);
  ASSERT_TRUE(back.ok());
  for (size_t i = 0; i < g.gates.size(); ++i) EXPECT_NEAR(back->gates[i], g.gates[i], 1e-6);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ls
