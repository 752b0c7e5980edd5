// conv2d, conv_transpose2d and their backward ops: hand-computed values, identities (adjointness,
// batch axes), and shape-inference errors. PyTorch comparisons are in conv_torch_test.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/ops/conv.h"
#include "support/random_fill.h"

namespace mn {
namespace {

Array iota(Shape shape, double start = 1.0) {
  Array a(std::move(shape), DType::f32);
  std::iota(a.data.begin(), a.data.end(), start);
  return a;
}

Array eval(const Graph& g, const reference::Feeds& feeds, Tensor t) {
  return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0];
}

double dot(const Array& a, const Array& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.data.size(); ++i) s += a.data[i] * b.data[i];
  return s;
}

TEST(Conv2d, HandComputedValid) {
  Graph g;
  auto x = g.input("x", {1, 1, 3, 3});
  auto w = g.input("w", {1, 1, 2, 2});
  auto b = g.input("b", {1});
  auto y = conv2d(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  // x = [[1,2,3],[4,5,6],[7,8,9]], w = [[1,2],[3,4]]: y00 = 1·1 + 2·2 + 4·3 + 5·4 = 37.
  auto v = eval(
      g,
      {{"x", iota({1, 1, 3, 3})}, {"w", iota({1, 1, 2, 2})}, {"b", Array({1}, DType::f32, {0.5})}},
      y);
  EXPECT_EQ(v.data, (std::vector<double>{37.5, 47.5, 67.5, 77.5}));
}

TEST(Conv2d, HandComputedStridePadding) {
  Graph g;
  auto x = g.input("x", {1, 1, 3, 3});
  auto w = g.input("w", {1, 1, 3, 3});
  auto y = conv2d(x, w, {}, {.stride = {2, 2}, .padding = {1, 1}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  // An all-ones kernel sums each window; the windows at stride 2 cover x's 2×2 corners.
  auto v = eval(g, {{"x", iota({1, 1, 3, 3})}, {"w", Array::full({1, 1, 3, 3}, 1.0)}}, y);
  EXPECT_EQ(v.data, (std::vector<double>{12, 16, 24, 28}));
}

TEST(Conv2d, HandComputedDilation) {
  Graph g;
  auto x = g.input("x", {1, 1, 5, 5});
  auto w = g.input("w", {1, 1, 2, 2});
  auto y = conv2d(x, w, {}, {.dilation = {2, 2}});
  ASSERT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  // x[i][j] = 5i + j; taps at (i, j), (i, j+2), (i+2, j), (i+2, j+2) sum to 4(5i + j) + 24.
  auto v = eval(g, {{"x", iota({1, 1, 5, 5}, 0.0)}, {"w", Array::full({1, 1, 2, 2}, 1.0)}}, y);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(v.data[i * 3 + j], 4.0 * (5 * i + j) + 24.0);
  }
}

TEST(Conv2d, GroupsKeepChannelsApart) {
  Graph g;
  auto x = g.input("x", {1, 2, 2, 2});
  auto w = g.input("w", {2, 1, 1, 1});
  auto y = conv2d(x, w, {}, {.groups = 2});
  auto v = eval(g, {{"x", iota({1, 2, 2, 2})}, {"w", Array({2, 1, 1, 1}, DType::f32, {2, 3})}}, y);
  EXPECT_EQ(v.data, (std::vector<double>{2, 4, 6, 8, 15, 18, 21, 24}));
}

TEST(Conv2d, LeadingBatchAxesActLikeOneBatch) {
  auto rng = testing::rng_for("conv2d/batch_axes");
  Array xv = testing::random_array(rng, {{2, 3, 2, 4, 4}, DType::f32});
  Array wv = testing::random_array(rng, {{3, 2, 3, 3}, DType::f32});
  Graph g;
  auto x = g.input("x", {2, 3, 2, 4, 4});
  auto w = g.input("w", {3, 2, 3, 3});
  auto y5 = conv2d(x, w, {}, {.padding = {1, 1}});
  auto y4 = conv2d(reshape(x, {6, 2, 4, 4}), w, {}, {.padding = {1, 1}});
  EXPECT_EQ(y5.shape(), (Shape{2, 3, 3, 4, 4}));
  auto v =
      reference::evaluate_nodes(g, {{"x", xv}, {"w", wv}}, std::vector<NodeId>{y5.id(), y4.id()});
  EXPECT_EQ(v[0].data, v[1].data);
}

TEST(ConvTranspose2d, HandComputed) {
  Graph g;
  auto x = g.input("x", {1, 1, 2, 2});
  auto w = g.input("w", {1, 1, 2, 2});
  auto y1 = conv_transpose2d(x, w);
  auto y2 = conv_transpose2d(x, w, {}, {.stride = {2, 2}});
  reference::Feeds f{{"x", iota({1, 1, 2, 2})}, {"w", Array::full({1, 1, 2, 2}, 1.0)}};
  // Stride 1: each x value spreads over a 2×2 block, overlapping blocks add.
  EXPECT_EQ(eval(g, f, y1).data, (std::vector<double>{1, 3, 2, 4, 10, 6, 3, 7, 4}));
  // Stride 2: the blocks tile the 4×4 output.
  EXPECT_EQ(eval(g, f, y2).data,
            (std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
}

// conv_transpose2d is the adjoint of conv2d with the same weight and options:
// <conv2d(x, w), y> = <x, conv_transpose2d(y, w)>.
TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    std::array<int64_t, 2> output_padding;
  };
  const Case cases[] = {
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .groups = 2}, {0, 0}},
      {{1, 3, 8, 9},
       {3, 1, 3, 3},
       {.stride = {2, 3}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 3},
       {1, 0}},
  };
  for (const Case& c : cases) {
    auto rng = testing::rng_for("conv_transpose2d/adjoint");
    Graph g;
    auto x = g.input("x", c.x);
    auto w = g.input("w", c.w);
    auto y = conv2d(x, w, {}, c.o);
    auto yin = g.input("y", y.shape());
    auto xt = conv_transpose2d(
        yin, w, {}, {c.o.stride, c.o.padding, c.output_padding, c.o.dilation, c.o.groups});
    ASSERT_EQ(xt.shape(), x.shape());
    reference::Feeds f{{"x", testing::random_array(rng, x.type())},
                       {"w", testing::random_array(rng, w.type())},
                       {"y", testing::random_array(rng, y.type())}};
    auto v = reference::evaluate_nodes(g, f, std::vector<NodeId>{y.id(), xt.id()});
    EXPECT_NEAR(dot(v[0], f["y"]), dot(f["x"], v[1]), 1e-12 * (1 + std::abs(dot(v[0], f["y"]))));
  }
}

// The weight gradient contracted with any weight equals the output it would produce:
// <conv2d_backward_weight(x, gy), w> = <conv2d(x, w), gy>.
TEST(Conv2dBackward, WeightGradientIsTheAdjointInW) {
  auto rng = testing::rng_for("conv2d_backward_weight/adjoint");
  Conv2dAttrs a{2, 1, 1, 2, 1, 2, 2};
  Graph g;
  auto x = g.input("x", {2, 4, 7, 6});
  auto w = g.input("w", {6, 2, 3, 2});
  auto y = g.apply("conv2d", a, {x, w});
  auto gy = g.input("gy", y.shape());
  auto dw = conv2d_backward_weight(x, gy, a, 3, 2);
  ASSERT_EQ(dw.shape(), w.shape());
  reference::Feeds f{{"x", testing::random_array(rng, x.type())},
                     {"w", testing::random_array(rng, w.type())},
                     {"gy", testing::random_array(rng, y.type())}};
  auto v = reference::evaluate_nodes(g, f, std::vector<NodeId>{y.id(), dw.id()});
  EXPECT_NEAR(dot(v[0], f["gy"]), dot(v[1], f["w"]), 1e-12 * (1 + std::abs(dot(v[0], f["gy"]))));
}

// Second order: the gradient of <grad_x sum(conv2d(x, w) * r), v> with respect to w goes
// through conv2d_backward_input's vjp; it must equal the first-order weight gradient of
// <conv2d(v, w), r> (the expression is bilinear).
TEST(Conv2dBackward, SecondOrderThroughTheBackwardOps) {
  auto rng = testing::rng_for("conv2d/second_order");
  Graph g;
  auto x = g.parameter("x", {1, 2, 5, 5});
  auto w = g.parameter("w", {3, 2, 3, 3});
  auto r = g.input("r", {1, 3, 3, 3});
  auto v = g.input("v", {1, 2, 5, 5});
  Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  auto gx = gradients(sum(conv2d(x, w, {}, o) * r), {x})[0];
  auto ddw = gradients(sum(gx * v), {w})[0];
  auto direct = gradients(sum(conv2d(v, w, {}, o) * r), {w})[0];
  reference::Feeds f{{"x", testing::random_array(rng, x.type())},
                     {"w", testing::random_array(rng, w.type())},
                     {"r", testing::random_array(rng, r.type())},
                     {"v", testing::random_array(rng, v.type())}};
  auto vals = reference::evaluate_nodes(g, f, std::vector<NodeId>{ddw.id(), direct.id()});
  EXPECT_LE(testing::relative_error(vals[0], vals[1]), 1e-12);
}

void expect_shape_error(const std::function<void()>& f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "expected a ShapeError from " << op;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}

TEST(Conv2d, ShapeErrorsNameTheOp) {
  Graph g;
  auto x = g.input("x", {1, 4, 5, 5});
  auto w3 = g.input("w3", {2, 3, 3, 3});
  auto w = g.input("w", {2, 4, 3, 3});
  auto big = g.input("big", {2, 4, 7, 7});
  auto b3 = g.input("b3", {3});
  auto flat = g.input("flat", {4, 5});
  auto xi = g.input("xi", {1, 4, 5, 5}, DType::i32);
  expect_shape_error([&] { conv2d(x, w3); }, "conv2d");     // C/groups mismatch
  expect_shape_error([&] { conv2d(x, w, b3); }, "conv2d");  // bias size
  expect_shape_error([&] { conv2d(x, big); }, "conv2d");    // kernel larger than input
  expect_shape_error([&] { conv2d(x, w, {}, {.groups = 3}); }, "conv2d");
  expect_shape_error([&] { conv2d(x, w, {}, {.stride = {0, 1}}); }, "conv2d");
  expect_shape_error([&] { conv2d(x, w, {}, {.padding = {-1, 0}}); }, "conv2d");
  expect_shape_error([&] { conv2d(flat, w); }, "conv2d");
  expect_shape_error([&] { conv2d(xi, w); }, "conv2d");
}

TEST(ConvTranspose2d, ShapeErrorsNameTheOp) {
  Graph g;
  auto x = g.input("x", {1, 4, 3, 3});
  auto w = g.input("w", {4, 2, 3, 3});
  auto w5 = g.input("w5", {5, 2, 3, 3});
  auto b = g.input("b", {4});
  const std::string op = "conv_transpose2d";
  expect_shape_error([&] { conv_transpose2d(x, w5); }, op);
  expect_shape_error([&] { conv_transpose2d(x, w, b); }, op);  // O = 2, not 4
  // output_padding must be below the stride or the dilation.
  expect_shape_error(
      [&] {
        conv_transpose2d(x, w, {}, {.stride = {2, 2}, .output_padding = {2, 0}});
      },
      op);
  expect_shape_error([&] { conv_transpose2d(x, w, {}, {.padding = {3, 3}}); }, op);
  expect_shape_error([&] { conv_transpose2d(x, w, {}, {.groups = 3}); }, op);
  EXPECT_EQ(
      conv_transpose2d(x, w, {}, {.stride = {1, 1}, .output_padding = {1, 1}, .dilation = {2, 2}})
          .shape(),
      (Shape{1, 2, 8, 8}));
}

TEST(Conv2dBackward, ShapeErrorsNameTheOp) {
  Graph g;
  auto gy = g.input("gy", {1, 4, 3, 3});
  auto w = g.input("w", {4, 2, 3, 3});
  auto x = g.input("x", {1, 2, 5, 5});
  auto x2 = g.input("x2", {2, 2, 5, 5});
  expect_shape_error([&] { conv2d_backward_input(gy, w, {}, 4, 4); }, "conv2d_backward_input");
  expect_shape_error([&] { conv2d_backward_weight(x, gy, {}, 4, 4); }, "conv2d_backward_weight");
  expect_shape_error([&] { conv2d_backward_weight(x2, gy, {}, 3, 3); }, "conv2d_backward_weight");
  EXPECT_EQ(conv2d_backward_input(gy, w, {}, 5, 5).shape(), (Shape{1, 2, 5, 5}));
  EXPECT_EQ(conv2d_backward_weight(x, gy, {}, 3, 3).shape(), (Shape{4, 2, 3, 3}));
}

}  // namespace
}  // namespace mn
