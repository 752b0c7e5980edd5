// Reductions: values on hand-computable inputs, tie handling, gradients and shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/op_def.h"

namespace mn {
namespace {

std::vector<double> values(Graph& g, const reference::Feeds& feeds, Tensor t) {
  return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0].data;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

template <class F>
std::string shape_error(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "";
}

// x[i, j, k] = 12 i + 4 j + k for shape [2, 3, 4].
reference::Feeds arange_feed(const char* name) {
  std::vector<double> v(24);
  std::iota(v.begin(), v.end(), 0.0);
  return {{name, Array({2, 3, 4}, DType::f32, v)}};
}

TEST(Reduce, SumMeanMaxMinOverAxes) {
  Graph g;
  auto x = g.input("x", {2, 3, 4});
  auto f = arange_feed("x");
  expect_near(values(g, f, sum(x)), {276}, 0);
  EXPECT_EQ(sum(x).shape(), Shape{});
  // Sum over i: 2 (4 j + k) + 12.
  expect_near(values(g, f, sum(x, {0})), {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}, 0);
  // Sum over k with keepdims: 4 (12 i + 4 j) + 6.
  auto rows = sum(x, {-1}, true);
  EXPECT_EQ(rows.shape(), (Shape{2, 3, 1}));
  expect_near(values(g, f, rows), {6, 22, 38, 54, 70, 86}, 0);
  // Mean over i and k: 6 + 4 j + 1.5.
  expect_near(values(g, f, mean(x, {2, 0})), {7.5, 11.5, 15.5}, 1e-15);
  expect_near(values(g, f, max(x, {1})), {8, 9, 10, 11, 20, 21, 22, 23}, 0);
  expect_near(values(g, f, min(x, {-2})), {0, 1, 2, 3, 12, 13, 14, 15}, 0);
  auto all_kept = max(x, {}, true);
  EXPECT_EQ(all_kept.shape(), (Shape{1, 1, 1}));
  expect_near(values(g, f, all_kept), {23}, 0);
}

TEST(Reduce, AxesAreNormalizedInAttributes) {
  Graph g;
  auto x = g.input("x", {2, 3, 4});
  auto a = sum(x, {-1, 0, 2});
  auto b = sum(x, {0, 2});
  EXPECT_EQ(g.node(a.id()).attrs, g.node(b.id()).attrs);
  EXPECT_EQ(a.shape(), (Shape{3}));
}

TEST(Reduce, IntegerSumKeepsItsType) {
  Graph g;
  auto x = g.input("x", {3}, DType::i32);
  reference::Feeds f{{"x", Array({3}, DType::i32, {1, 2, 4})}};
  EXPECT_EQ(sum(x).dtype(), DType::i32);
  expect_near(values(g, f, sum(x)), {7}, 0);
  expect_near(values(g, f, max(x)), {4}, 0);
}

TEST(Reduce, MaxAndMinShareTheGradientAmongTies) {
  Graph g;
  auto x = g.parameter("x", {2, 4});
  reference::Feeds f{{"x", Array({2, 4}, DType::f32, {1, 3, 3, 2, 5, 5, 5, -1})}};
  auto grad = [&](Tensor y) { return values(g, f, gradients(sum(y), {x})[0]); };
  const double t = 1.0 / 3.0;
  expect_near(grad(max(x, {-1})), {0, 0.5, 0.5, 0, t, t, t, 0}, 1e-15);
  expect_near(grad(max(x)), {0, 0, 0, 0, t, t, t, 0}, 1e-15);
  expect_near(grad(min(x, {1}, true)), {1, 0, 0, 0, 0, 0, 0, 1}, 0);
  expect_near(grad(min(x, {0})), {1, 1, 1, 0, 0, 0, 0, 1}, 0);
}

TEST(Reduce, ArgmaxTakesTheFirstMaximum) {
  Graph g;
  auto x = g.input("x", {2, 4});
  reference::Feeds f{{"x", Array({2, 4}, DType::f32, {1, 3, 3, 2, 5, 5, 5, -1})}};
  auto rows = argmax(x, -1);
  EXPECT_EQ(rows.dtype(), DType::i32);
  expect_near(values(g, f, rows), {1, 0}, 0);
  expect_near(values(g, f, argmax(x, 0)), {1, 1, 1, 0}, 0);
  EXPECT_EQ(argmax(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_FALSE(op_def("argmax").differentiable);
  // NaN counts as the maximum, as in PyTorch.
  auto y = g.input("y", {3});
  reference::Feeds fy{{"y", Array({3}, DType::f32, {1, NAN, 3})}};
  expect_near(values(g, fy, argmax(y, 0)), {1}, 0);
}

TEST(Reduce, VarianceWithCorrection) {
  Graph g;
  auto x = g.parameter("x", {4});
  reference::Feeds f{{"x", Array({4}, DType::f32, {1, 2, 3, 4})}};
  // Mean 2.5, squared deviations sum to 5.
  expect_near(values(g, f, variance(x)), {1.25}, 1e-15);
  expect_near(values(g, f, variance(x, {}, false, 1)), {5.0 / 3.0}, 1e-15);
  // d/dx = 2 (x - mean) / (N - correction).
  expect_near(values(g, f, gradients(variance(x, {0}, false, 1), {x})[0]),
              {-1, -1.0 / 3.0, 1.0 / 3.0, 1}, 1e-15);
  auto m = g.input("m", {2, 2});
  reference::Feeds fm{{"m", Array({2, 2}, DType::f32, {1, 2, 3, 6})}};
  expect_near(values(g, fm, variance(m, {0}, true)), {1, 4}, 1e-15);
  // Two passes: a large common offset does not cancel the result.
  auto big = g.input("big", {3});
  reference::Feeds fb{{"big", Array({3}, DType::f32, {1e8 + 1, 1e8 + 2, 1e8 + 3})}};
  expect_near(values(g, fb, variance(big)), {2.0 / 3.0}, 1e-15);
}

TEST(Reduce, MeanGradientIsUniform) {
  Graph g;
  auto x = g.parameter("x", {2, 3});
  reference::Feeds f{{"x", Array({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6})}};
  expect_near(values(g, f, gradients(mean(x), {x})[0]), std::vector<double>(6, 1.0 / 6.0), 1e-16);
  auto per_row = gradients(sum(mean(x, {1}) * g.constant(Array({2}, DType::f32, {3, 6}))), {x})[0];
  expect_near(values(g, f, per_row), {1, 1, 1, 2, 2, 2}, 1e-15);
}

TEST(Reduce, SumToUndoesBroadcasting) {
  Graph g;
  auto x = g.parameter("x", {2, 3});
  reference::Feeds f{{"x", Array({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6})}};
  expect_near(values(g, f, sum_to(x, {3})), {5, 7, 9}, 0);
  expect_near(values(g, f, sum_to(x, {1, 3})), {5, 7, 9}, 0);
  expect_near(values(g, f, sum_to(x, {2, 1})), {6, 15}, 0);
  expect_near(values(g, f, sum_to(x, {})), {21}, 0);
  EXPECT_EQ(sum_to(x, {2, 3}), x);  // nothing to sum: no node
  auto w = g.constant(Array({2, 1}, DType::f32, {1, 10}));
  auto grad = gradients(sum(sum_to(x, {2, 1}) * w), {x})[0];
  expect_near(values(g, f, grad), {1, 1, 1, 10, 10, 10}, 0);
}

TEST(Reduce, BadInputIsAShapeErrorNamingTheOp) {
  Graph g;
  auto x = g.input("x", {2, 3, 4});
  auto i = g.input("i", {3}, DType::i32);
  std::string msg = shape_error([&] { sum(x, {3}); });
  EXPECT_NE(msg.find("sum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
  EXPECT_NE(shape_error([&] { max(x, {-4}); }).find("max"), std::string::npos);
  EXPECT_NE(shape_error([&] { mean(i); }).find("mean"), std::string::npos);
  EXPECT_NE(shape_error([&] { argmax(x, 5); }).find("argmax"), std::string::npos);
  EXPECT_NE(shape_error([&] { argmax(g.input("s", {}), 0); }).find("argmax"), std::string::npos);
  EXPECT_NE(shape_error([&] { variance(g.input("one", {1}), {}, false, 1); }).find("variance"),
            std::string::npos);
  msg = shape_error([&] { sum_to(x, {3, 3}); });
  EXPECT_NE(msg.find("sum_to"), std::string::npos) << msg;
  EXPECT_NE(shape_error([&] { sum_to(x, {1, 2, 3, 4}); }).find("sum_to"), std::string::npos);
  EXPECT_EQ(shape_error([&] { sum_to(x, {2, 1, 1}); }), "");  // [2,1,1] -> [2,3,4] is fine
}

}  // namespace
}  // namespace mn
