#include "core/tensor.h"

#include <gtest/gtest.h>

namespace ls {
namespace {

TEST(TensorView, ShapeStridesRows) {
  float data[24];
  TensorView v(data, DType::kF32, {2, 3, 4});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.nbytes(), 96);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_TRUE(v.is_contiguous());
  TensorView r = v.rows(1, 2);
  EXPECT_EQ(r.ptr<float>(), data + 12);
  EXPECT_EQ(r.dim(0), 1);
  EXPECT_EQ(v.reshaped({6, 4}).dim(-1), 4);
  EXPECT_EQ(v.describe(), "f32[2, 3, 4] cpu");
}

}  // namespace
}  // namespace ls
