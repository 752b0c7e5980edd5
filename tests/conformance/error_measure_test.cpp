// The measure the GPU tests compare with (support/elementwise_error.h), shown to fail where the
// old one, max|Δ| / (1 + max|want|), passed: a softmax probability of about 4e-4 off by 5%,
// an i32 past 2^24 off by thousands, a NaN; and to pass what f32 kernels legitimately do: the
// GPU's own softmax, and a sum that cancels to almost nothing.
#include <gtest/gtest.h>

#include <cmath>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>

#include "gpu_compare.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

TEST(ErrorMeasure, CatchesFivePercentOnASmallProbability) {
  // Rows of 256 logits in [-4, 4]: many probabilities near 4e-4.
  auto rng = testing::rng_for("error-measure-softmax");
  Graph g;
  Tensor z = g.input("z", {4, 256});
  g.output("p", softmax(z, -1));
  const reference::Feeds feeds{{"z", testing::random_array(rng, z.type(), -4, 4)}};
  const Array want = testing::stored(reference::evaluate(g, feeds).at("p"));
  const Array got = testing::run_gpu(g, feeds).at("p");
  EXPECT_TRUE(testing::elementwise_near(got, want, testing::storage_tolerance(DType::f32)));
  size_t small = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    if (std::abs(want.data[i] - 4e-4) < std::abs(want.data[small] - 4e-4)) small = i;
  }
  ASSERT_NEAR(want.data[small], 4e-4, 1e-4);
  Array wrong = got;
  wrong.data[small] *= 1.05;
  EXPECT_LE(testing::relative_error(wrong, want), 2e-5);  // what the old measure let through
  EXPECT_FALSE(testing::elementwise_near(wrong, want, testing::storage_tolerance(DType::f32)));
}

TEST(ErrorMeasure, IntegersAreExact) {
  const Array want({3}, DType::i32, {16777217.0, -5.0, 2e9});
  Array got = want;
  EXPECT_TRUE(testing::elementwise_near(got, want, 0.0));
  got.data[2] += 4096;
  EXPECT_LE(testing::relative_error(got, want), 2e-5);
  EXPECT_FALSE(testing::elementwise_near(got, want, 1e-3));
}

TEST(ErrorMeasure, NanAndInfinityMustMatch) {
  const Array want({3}, DType::f32, {1.0, NAN, INFINITY});
  EXPECT_TRUE(testing::elementwise_near(want, want, 0.0));
  Array got = want;
  got.data[1] = 0;
  EXPECT_FALSE(testing::elementwise_near(got, want, 1.0));
  got = want;
  got.data[2] = -INFINITY;
  EXPECT_FALSE(testing::elementwise_near(got, want, 1.0));
  EXPECT_FALSE(testing::elementwise_near(Array({2}, DType::f32), want, 1.0));  // shape
}

// Elements that cancel to almost nothing are measured against a tenth of the tensor's scale:
// one that should be 1e-9 but is 1e-7 passes at 2e-5; 1% on the largest element fails.
TEST(ErrorMeasure, CancellationIsMeasuredAgainstTheTensorsScale) {
  const Array want({2}, DType::f32, {1e-9, 10.0});
  Array got = want;
  got.data[0] += 1e-7;
  EXPECT_TRUE(testing::elementwise_near(got, want, 2e-5));
  got.data[1] *= 1.01;
  EXPECT_FALSE(testing::elementwise_near(got, want, 2e-5));
  // 0.1 against |10| + a tenth of the largest magnitude.
  EXPECT_NEAR(testing::elementwise_error(got, want).error, 0.1 / 11, 1e-12);
  EXPECT_EQ(testing::elementwise_error(got, want).index, 1u);
}

}  // namespace
}  // namespace mn
