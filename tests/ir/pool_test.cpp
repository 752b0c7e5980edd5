// Pooling and resampling ops: hand-computed values, PyTorch's edge rules (ceil mode, ties, NaN,
// -inf padding, float32 nearest indices), and shape-inference errors. PyTorch comparisons on
// random data are in conv_torch_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/ops/pool.h"

namespace mn {
namespace {

Array iota(Shape shape, double start = 1.0) {
  Array a(std::move(shape), DType::f32);
  std::iota(a.data.begin(), a.data.end(), start);
  return a;
}

// The op's output and the gradient of sum(out * r) with respect to x.
struct ValueAndGrad {
  Array out, grad;
};
ValueAndGrad run(const Array& xv, const std::function<Tensor(Tensor)>& op,
                 const Array* r = nullptr) {
  Graph g;
  auto x = g.parameter("x", xv.shape);
  auto y = op(x);
  Array rv = r ? *r : Array::full(y.shape(), 1.0);
  auto rin = g.input("r", y.shape());
  auto dx = gradients(sum(y * rin), {x})[0];
  auto v =
      reference::evaluate_nodes(g, {{"x", xv}, {"r", rv}}, std::vector<NodeId>{y.id(), dx.id()});
  return {v[0], v[1]};
}

// Element-wise within a few ulps: weights such as 1/3 make sums round differently than by hand.
void expect_values(const Array& a, const std::vector<double>& want) {
  ASSERT_EQ(a.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(a.data[i], want[i]) << "element " << i;
}

TEST(MaxPool2d, HandComputedWithGradient) {
  auto v = run(iota({1, 1, 4, 4}, 0.0), [](Tensor x) { return max_pool2d(x); });
  EXPECT_EQ(v.out.shape, (Shape{1, 1, 2, 2}));
  EXPECT_EQ(v.out.data, (std::vector<double>{5, 7, 13, 15}));
  std::vector<double> want(16, 0.0);
  for (int i : {5, 7, 13, 15}) want[i] = 1.0;
  EXPECT_EQ(v.grad.data, want);
}

TEST(MaxPool2d, TiesGoToTheFirstMaximumInScanOrder) {
  // All equal: every window's gradient lands on its first element (row-major); overlapping
  // windows (stride 1) accumulate.
  auto v = run(Array::full({1, 1, 3, 3}, 2.0), [](Tensor x) {
    return max_pool2d(x, {.kernel = {2, 2}, .stride = {1, 1}});
  });
  EXPECT_EQ(v.out.data, (std::vector<double>{2, 2, 2, 2}));
  EXPECT_EQ(v.grad.data, (std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
  // A tie between a later row's first column and an earlier row's later column: the earlier
  // row wins.
  Array x({1, 1, 2, 2}, DType::f32, {0, 3, 3, 1});
  auto t = run(x, [](Tensor x) { return max_pool2d(x); });
  EXPECT_EQ(t.grad.data, (std::vector<double>{0, 1, 0, 0}));
}

TEST(MaxPool2d, PaddingIsMinusInfinity) {
  // Negative inputs with padding: a zero pad would win, -inf never does.
  Array x = Array::full({1, 1, 2, 2}, -5.0);
  x.data[3] = -4.0;
  auto v = run(x, [](Tensor x) {
    return max_pool2d(x, {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}});
  });
  EXPECT_EQ(v.out.data, (std::vector<double>{-4, -4, -4, -4}));
  EXPECT_EQ(v.grad.data, (std::vector<double>{0, 0, 0, 4}));
}

TEST(MaxPool2d, NanPropagates) {
  Array x = iota({1, 1, 2, 4});
  x.data[1] = std::numeric_limits<double>::quiet_NaN();
  auto v = run(x, [](Tensor x) { return max_pool2d(x); });
  EXPECT_TRUE(std::isnan(v.out.data[0]));
  EXPECT_EQ(v.out.data[1], 8.0);
  EXPECT_EQ(v.grad.data, (std::vector<double>{0, 1, 0, 0, 0, 0, 0, 1}));
}

TEST(MaxPool2d, CeilModeAndDilationShapes) {
  // PyTorch: out = floor((H + 2p - d(k-1) - 1 + (ceil ? s-1 : 0)) / s) + 1, and in ceil mode the
  // last window must start inside the input or its left padding.
  EXPECT_EQ(pool_out_size(5, 2, 2, 0, 1, false), 2);
  EXPECT_EQ(pool_out_size(5, 2, 2, 0, 1, true), 3);
  EXPECT_EQ(pool_out_size(4, 2, 2, 1, 1, true), 3);
  EXPECT_EQ(pool_out_size(5, 3, 3, 1, 1, true), 2);  // a third window would start in the padding
  EXPECT_EQ(pool_out_size(7, 3, 1, 1, 2, false), 5);
  Graph g;
  auto x = g.input("x", {2, 3, 5, 7});
  EXPECT_EQ(max_pool2d(x, {.kernel = {2, 2}, .ceil_mode = true}).shape(), (Shape{2, 3, 3, 4}));
  EXPECT_EQ(
      max_pool2d(x, {.kernel = {3, 3}, .stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 2}})
          .shape(),
      (Shape{2, 3, 3, 3}));
}

TEST(AvgPool2d, HandComputedPaddingModes) {
  auto plain = run(iota({1, 1, 3, 3}), [](Tensor x) {
    return avg_pool2d(x, {.kernel = {2, 2}, .stride = {1, 1}});
  });
  EXPECT_EQ(plain.out.data, (std::vector<double>{3, 4, 6, 7}));
  // Gradient of the sum of all outputs: each x counts once per window, divided by 4.
  EXPECT_EQ(plain.grad.data, (std::vector<double>{.25, .5, .25, .5, 1, .5, .25, .5, .25}));
  // Padding 1, stride 2: windows hold {1}, {2,3}, {4,7}, {5,6,8,9}.
  Pool2dOptions o{.kernel = {2, 2}, .padding = {1, 1}};
  auto inc = run(iota({1, 1, 3, 3}), [&](Tensor x) { return avg_pool2d(x, o); });
  EXPECT_EQ(inc.out.data, (std::vector<double>{0.25, 1.25, 2.75, 7}));
  o.count_include_pad = false;
  auto exc = run(iota({1, 1, 3, 3}), [&](Tensor x) { return avg_pool2d(x, o); });
  expect_values(exc.out, {1, 2.5, 5.5, 7});
}

TEST(AvgPool2d, CeilModeWindowIsClippedToThePaddedInput) {
  // H = W = 3, k = 2, s = 2, ceil: the second window covers index 2 only (index 3 lies beyond
  // even the padded input), so count_include_pad divides by 1 there, not by 2.
  auto v = run(iota({1, 1, 3, 3}), [](Tensor x) {
    return avg_pool2d(x, {.kernel = {2, 2}, .ceil_mode = true});
  });
  EXPECT_EQ(v.out.data, (std::vector<double>{3, 4.5, 7.5, 9}));
}

TEST(AdaptiveAvgPool2d, PyTorchBins) {
  // H = 5 -> 3 bins: [0, 2), [1, 4), [3, 5).
  auto v = run(iota({1, 1, 1, 5}), [](Tensor x) { return adaptive_avg_pool2d(x, 1, 3); });
  expect_values(v.out, {1.5, 3, 4.5});
  expect_values(v.grad, {0.5, 0.5 + 1.0 / 3, 1.0 / 3, 1.0 / 3 + 0.5, 0.5});
  auto gl = run(iota({2, 1, 3, 4}), [](Tensor x) { return global_avg_pool2d(x); });
  EXPECT_EQ(gl.out.shape, (Shape{2, 1, 1, 1}));
  expect_values(gl.out, {6.5, 18.5});
}

TEST(UpsampleNearest2d, SourceIndices) {
  auto v = run(iota({1, 1, 1, 3}), [](Tensor x) { return upsample_nearest2d(x, 1, 5); });
  EXPECT_EQ(v.out.data, (std::vector<double>{1, 1, 2, 2, 3}));  // floor(d·3/5)
  EXPECT_EQ(v.grad.data, (std::vector<double>{2, 2, 1}));
  auto twice = run(iota({1, 1, 2, 1}), [](Tensor x) { return upsample_nearest2d(x, 4, 1); });
  EXPECT_EQ(twice.out.data, (std::vector<double>{1, 1, 2, 2}));
  // PyTorch evaluates floor(d · float(in/out)) in float32: 41 · float(2/82) falls below 1.
  EXPECT_EQ(nearest_source_index(41, 2, 82), 0);
  EXPECT_EQ(nearest_source_index(42, 2, 82), 1);
  EXPECT_EQ(nearest_source_index(10, 14, 20), 7);
}

TEST(UpsampleBilinear2d, AlignCornersBothWays) {
  Array x({1, 1, 1, 2}, DType::f32, {0, 1});
  auto ac = run(x, [](Tensor x) { return upsample_bilinear2d(x, 1, 4, true); });
  ASSERT_EQ(ac.out.data.size(), 4u);
  EXPECT_DOUBLE_EQ(ac.out.data[1], 1.0 / 3);
  EXPECT_DOUBLE_EQ(ac.out.data[2], 2.0 / 3);
  EXPECT_EQ(ac.out.data[3], 1.0);
  // align_corners=false: src = (d + 0.5)/2 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (the
  // right neighbor clamps to the last element).
  auto hc = run(x, [](Tensor x) { return upsample_bilinear2d(x, 1, 4, false); });
  EXPECT_EQ(hc.out.data, (std::vector<double>{0, 0.25, 0.75, 1}));
  EXPECT_EQ(hc.grad.data, (std::vector<double>{1 + 0.75 + 0.25, 0.25 + 0.75 + 1}));
}

void expect_shape_error(const std::function<void()>& f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "expected a ShapeError from " << op;
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}

TEST(Pool2d, ShapeErrorsNameTheOp) {
  Graph g;
  auto x = g.input("x", {1, 2, 4, 4});
  auto flat = g.input("flat", {4, 4});
  auto xi = g.input("xi", {1, 2, 4, 4}, DType::i32);
  expect_shape_error([&] { max_pool2d(x, {.kernel = {2, 2}, .padding = {2, 0}}); }, "max_pool2d");
  expect_shape_error([&] { max_pool2d(x, {.kernel = {5, 5}}); }, "max_pool2d");
  expect_shape_error([&] { max_pool2d(x, {.kernel = {2, 2}, .stride = {-1, 1}}); }, "max_pool2d");
  expect_shape_error([&] { max_pool2d(flat); }, "max_pool2d");
  expect_shape_error([&] { max_pool2d(xi); }, "max_pool2d");
  expect_shape_error([&] { avg_pool2d(x, {.dilation = {2, 2}}); }, "avg_pool2d");
  expect_shape_error([&] { avg_pool2d(x, {.kernel = {0, 2}}); }, "avg_pool2d");
  expect_shape_error([&] { adaptive_avg_pool2d(x, 0, 2); }, "adaptive_avg_pool2d");
  expect_shape_error([&] { upsample_nearest2d(x, 2, -1); }, "upsample_nearest2d");
  expect_shape_error([&] { upsample_bilinear2d(flat, 2, 2); }, "upsample_bilinear2d");
  auto gy = g.input("gy", {1, 2, 3, 3});
  expect_shape_error([&] { max_pool2d_backward(x, gy, MaxPool2dAttrs{}); }, "max_pool2d_backward");
  expect_shape_error([&] { max_pool2d_gather(x, gy, MaxPool2dAttrs{}); }, "max_pool2d_gather");
}

}  // namespace
}  // namespace mn
