// NumpyRng against numpy itself: every draw recorded by fixtures/make_eval_fixtures.py from
// numpy.random.default_rng is replayed in the same order and must match exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "eval/numpy_rng.h"

namespace ls::eval {
namespace {

nlohmann::json load(const std::string& name) {
  std::ifstream f("tests/eval/fixtures/" + name);
  EXPECT_TRUE(f.good()) << name;
  return nlohmann::json::parse(f);
}

TEST(NumpyRng, RawStreamMatchesPcg64) {
  const nlohmann::json j = load("numpy_rng.json");
  std::vector<uint64_t> seed = j["raw_seed"].get<std::vector<uint64_t>>();
  NumpyRng rng(seed);
  for (const auto& v : j["raw_uint64"]) {
    EXPECT_EQ(rng.next_uint64(), std::stoull(v.get<std::string>()));
  }
}

TEST(NumpyRng, DrawsMatchNumpyInOrder) {
  const nlohmann::json j = load("numpy_rng.json");
  ASSERT_GE(j["cases"].size(), 3u);
  for (const auto& c : j["cases"]) {
    std::vector<uint64_t> seed = c["seed"].get<std::vector<uint64_t>>();
    NumpyRng rng(seed);
    int step = 0;
    for (const auto& op : c["ops"]) {
      SCOPED_TRACE(testing::Message()
                   << "seed " << c["seed"].dump() << " op " << step++ << " " << op.dump());
      const std::string kind = op["op"];
      if (kind == "integers") {
        EXPECT_EQ(rng.integers(op["low"], op["high"]), op["value"].get<int64_t>());
      } else if (kind == "random") {
        EXPECT_EQ(rng.random(), op["value"].get<double>());
      } else if (kind == "uniform") {
        EXPECT_EQ(rng.uniform(op["low"], op["high"]), op["value"].get<double>());
      } else if (kind == "permutation") {
        EXPECT_EQ(rng.permutation(op["n"]), op["value"].get<std::vector<int64_t>>());
      } else if (kind == "integers_vector") {
        std::vector<int64_t> got;
        for (int i = 0; i < op["size"].get<int>(); ++i)
          got.push_back(rng.integers(op["low"], op["high"]));
        EXPECT_EQ(got, op["value"].get<std::vector<int64_t>>());
      } else {
        FAIL() << "unknown op " << kind;
      }
    }
  }
}

TEST(NumpyRng, SameSeedSameStreamOtherSeedOtherStream) {
  const uint64_t a[] = {5, 6};
  const uint64_t b[] = {5, 7};
  NumpyRng x(a), y(a), z(b);
  int differ = 0;
  for (int i = 0; i < 16; ++i) {
    const uint64_t vx = x.next_uint64();
    EXPECT_EQ(vx, y.next_uint64());
    differ += vx != z.next_uint64();
  }
  EXPECT_GT(differ, 12);
}

}  // namespace
}  // namespace ls::eval
