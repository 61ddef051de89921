#include "core/status.h"

#include <gtest/gtest.h>

namespace ls {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("value {} is not positive", x);
  return x;
}

Result<int> doubled(int x) {
  LS_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check(int x) {
  LS_RETURN_IF_ERROR(parse_positive(x).status());
  return {};
}

TEST(Status, OkAndError) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  Status err = not_found("tensor {} missing in {}", "w", "a.safetensors");
  EXPECT_FALSE(err.ok());
  EXPECT_EQ(err.code(), StatusCode::kNotFound);
  EXPECT_EQ(err.message(), "tensor w missing in a.safetensors");
  EXPECT_EQ(err.to_string(), "not found: tensor w missing in a.safetensors");
  EXPECT_EQ(err.with_context("loading").message(), "loading: tensor w missing in a.safetensors");
}

TEST(Status, ResultPropagation) {
  auto good = doubled(4);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("-1"), std::string::npos);
  EXPECT_TRUE(check(1).ok());
  EXPECT_FALSE(check(0).ok());
}

}  // namespace
}  // namespace ls
