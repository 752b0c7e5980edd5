// The parameter initializers against PyTorch's definitions (torch.nn.init): the spread each
// promises for the fans of 2-D weights ([in, out], as matmul(x, w) reads them) and of
// convolution weights ([out, in, kh, kw]), the shape of the distribution (a uniform is not a
// normal of the same spread), negative slopes, gains, and seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <meganeura/graph.h>

namespace mn {
namespace {

struct Stats {
  double mean = 0, std = 0, largest = 0;
  double within_one_std = 0;  // share of values within one standard deviation of the mean
};

Stats stats(const Array& a) {
  Stats s;
  const double n = static_cast<double>(a.data.size());
  for (double v : a.data) s.mean += v / n;
  for (double v : a.data) s.std += (v - s.mean) * (v - s.mean) / n;
  s.std = std::sqrt(s.std);
  for (double v : a.data) {
    s.largest = std::max(s.largest, std::abs(v));
    s.within_one_std += (std::abs(v - s.mean) <= s.std) / n;
  }
  return s;
}

// 2^16 draws: the sample standard deviation is within 1% of the true one with overwhelming
// probability (its relative error is about 1/sqrt(2·65536) = 0.3%), the mean within 2% of it.
constexpr int64_t kDraws = 65536;

void expect_normal(const Array& a, double mean, double std) {
  const Stats s = stats(a);
  EXPECT_NEAR(s.mean, mean, 0.02 * std);
  EXPECT_NEAR(s.std, std, 0.01 * std);
  EXPECT_NEAR(s.within_one_std, 0.6827, 0.01);  // a normal's share; a uniform's is 0.577
}

void expect_uniform(const Array& a, double bound) {
  const Stats s = stats(a);
  EXPECT_NEAR(s.mean, 0, 0.02 * bound);
  EXPECT_NEAR(s.std, bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_LE(s.largest, bound);
  EXPECT_GT(s.largest, 0.999 * bound);
  EXPECT_NEAR(s.within_one_std, 1 / std::sqrt(3.0), 0.01);
}

TEST(Init, NormalHasItsMeanAndStd) {
  expect_normal(initialize(Init::normal(1.5, 0.25, 1), {kDraws}), 1.5, 0.25);
  expect_normal(initialize(Init::normal(0, 3, 2), {256, 256}), 0, 3);
}

TEST(Init, UniformCoversItsRange) {
  const Stats s = stats(initialize(Init::uniform(2, 6, 3), {kDraws}));
  EXPECT_NEAR(s.mean, 4, 0.02);
  EXPECT_NEAR(s.std, 4 / std::sqrt(12.0), 0.01);
}

// 2-D weights [in, out]: fan_in = in (shape[0]), fan_out = out (shape[1]).
TEST(Init, KaimingUsesTheFanInOfMatmulWeights) {
  const Shape w{512, 128};
  expect_normal(initialize(Init::kaiming_normal(4), w), 0, std::sqrt(2.0 / 512));
  expect_uniform(initialize(Init::kaiming_uniform(5), w), std::sqrt(6.0 / 512));
  // Leaky ReLU of negative slope a: gain sqrt(2 / (1 + a²)).
  expect_normal(initialize(Init::kaiming_normal(6, 0.5), w), 0, std::sqrt(2.0 / 1.25 / 512));
  expect_uniform(initialize(Init::kaiming_uniform(7, std::sqrt(5.0)), w),
                 std::sqrt(2.0 / 6.0) * std::sqrt(3.0 / 512));
}

TEST(Init, XavierUsesBothFans) {
  const Shape w{512, 128};
  expect_normal(initialize(Init::xavier_normal(8), w), 0, std::sqrt(2.0 / 640));
  expect_uniform(initialize(Init::xavier_uniform(9), w), std::sqrt(6.0 / 640));
  expect_uniform(initialize(Init::xavier_uniform(10, 2.0), w), 2 * std::sqrt(6.0 / 640));
}

// Convolution weights [out, in, kh, kw]: fan_in = in·kh·kw, fan_out = out·kh·kw.
TEST(Init, ConvolutionFansCountTheKernel) {
  const Shape w{64, 32, 5, 7};
  expect_normal(initialize(Init::kaiming_normal(11), w), 0, std::sqrt(2.0 / (32 * 35)));
  expect_uniform(initialize(Init::xavier_uniform(12), w), std::sqrt(6.0 / (96 * 35)));
}

TEST(Init, SeedsAndConstants) {
  const Array a = initialize(Init::xavier_normal(13), {64, 64});
  EXPECT_EQ(a.data, initialize(Init::xavier_normal(13), {64, 64}).data);
  EXPECT_NE(a.data, initialize(Init::xavier_normal(14), {64, 64}).data);
  for (double v : initialize(Init::zeros(), {7}).data) EXPECT_EQ(v, 0.0);
  for (double v : initialize(Init::ones(), {7}).data) EXPECT_EQ(v, 1.0);
  for (double v : initialize(Init::constant(-2.5), {7}).data) EXPECT_EQ(v, -2.5);
  // Stored in the parameter's dtype.
  for (double v : initialize(Init::normal(0, 1, 15), {64}, DType::bf16).data) {
    EXPECT_EQ(v, round_to_dtype(v, DType::bf16));
  }
}

}  // namespace
}  // namespace mn
