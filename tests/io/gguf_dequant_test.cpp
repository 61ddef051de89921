// Dequantization of every supported ggml type against gguf-py's (tests/fixtures/gguf/dequant.gguf,
// made by scripts/fixtures/make_gguf_fixtures.py): each tensor "<TYPE>" holds quantized rows and
// "<TYPE>.ref" gguf-py's f32 dequantization of them.
#include "io/gguf_dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace ls {
namespace {

std::filesystem::path fixture() {
  return std::filesystem::path(LONGSERVE_SOURCE_DIR) / "tests/fixtures/gguf/dequant.gguf";
}

TEST(GgufDequant, EveryTypeMatchesGgufPy) {
  auto f = GgufFile::open(fixture());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::set<std::string> checked;
  for (const GgufTensor& t : (*f)->tensors()) {
    if (t.name.ends_with(".ref")) continue;
    const GgufTensor* ref = (*f)->find_tensor(t.name + ".ref");
    ASSERT_NE(ref, nullptr) << t.name;
    ASSERT_EQ(ref->type, GgmlType::kF32);
    ASSERT_EQ(ref->ne, t.ne) << t.name;
    EXPECT_EQ(ggml_type_name(t.type), t.name);
    ASSERT_TRUE(ggml_type_dequantizable(t.type)) << t.name;
    std::vector<float> want(static_cast<size_t>(ref->numel));
    std::memcpy(want.data(), ref->data, static_cast<size_t>(ref->nbytes));
    // Row by row, as the loader does.
    const int64_t row_bytes = t.nbytes / t.rows;
    std::vector<float> got(static_cast<size_t>(t.numel));
    for (int64_t r = 0; r < t.rows; ++r) {
      ASSERT_TRUE(dequantize_row(t.type, t.data + r * row_bytes, got.data() + r * t.row_elems,
                                 t.row_elems)
                      .ok());
    }
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    ASSERT_GT(scale, 0) << t.name;
    for (size_t i = 0; i < got.size(); ++i) {
      // Same formulas; only the order of float operations may differ (d * q - m).
      ASSERT_NEAR(got[i], want[i], 1e-6 * scale) << t.name << " element " << i;
    }
    checked.insert(t.name);
  }
  EXPECT_EQ(checked, (std::set<std::string>{"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                                            "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}));
}

TEST(GgufDequant, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<uint8_t> block(34, 0);
  std::vector<float> out(64);
  EXPECT_EQ(dequantize_row(GgmlType::kQ8_0, block.data(), out.data(), 31).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(ggml_type_dequantizable(GgmlType::kQ8_K));
  EXPECT_EQ(dequantize_row(GgmlType::kQ8_K, block.data(), out.data(), 256).code(),
            StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ls
