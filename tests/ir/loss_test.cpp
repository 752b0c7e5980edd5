// Forward values of the loss ops on small cases whose expectations follow from the definitions
// (written out below with std::log/std::exp), identities between the ops' forms, gradients with
// known closed forms, and the errors bad input must raise. The comparison with PyTorch on random
// inputs is tests/ir/loss_torch_test.cpp; gradients against finite differences are checked for
// every sample by tests/ir/op_table_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/ops/loss.h"

namespace mn {
namespace {

// A graph with fed inputs, evaluated by the reference.
struct Case {
  Graph g;
  reference::Feeds feeds;

  Tensor in(const std::string& name, Shape shape, std::vector<double> values,
            DType dtype = DType::f32) {
    Tensor t = g.input(name, shape, dtype);
    feeds[name] = Array(std::move(shape), dtype, std::move(values));
    return t;
  }
  Array eval(Tensor t) {
    return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()}).at(0);
  }
  double scalar(Tensor t) {
    Array a = eval(t);
    EXPECT_EQ(a.numel(), 1);
    return a.data.at(0);
  }
};

// log_softmax(row)[k], written out.
double lsm(const std::vector<double>& row, size_t k) {
  double s = 0;
  for (double v : row) s += std::exp(v);
  return row[k] - std::log(s);
}

void expect_near_all(const Array& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data[i], want[i], tol) << "element " << i;
}

template <class F>
void expect_error_mentions(F&& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const std::string& w : words) {
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
          << "message '" << e.what() << "' does not mention '" << w << "'";
    }
  }
}

// ---- cross_entropy ----

TEST(CrossEntropy, HandComputedRowsAndReductions) {
  const std::vector<double> r0{1, 2, 3}, r1{0, 0, 0};
  const double l0 = -lsm(r0, 2), l1 = std::log(3.0);
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    Case c;
    Tensor z = c.in("z", {2, 3}, {1, 2, 3, 0, 0, 0});
    Tensor t = c.in("t", {2}, {2, 0}, DType::i32);
    Array out = c.eval(cross_entropy(z, t, {r}));
    if (r == Reduction::none) expect_near_all(out, {l0, l1});
    if (r == Reduction::mean) expect_near_all(out, {(l0 + l1) / 2});
    if (r == Reduction::sum) expect_near_all(out, {l0 + l1});
  }
}

TEST(CrossEntropy, UniformLogitsGiveLogCWhateverTheSmoothing) {
  for (double eps : {0.0, 0.1, 0.7, 1.0}) {
    Case c;
    Tensor z = c.in("z", {2, 4}, std::vector<double>(8, 0.5));
    Tensor t = c.in("t", {2}, {3, 1}, DType::i32);
    EXPECT_NEAR(c.scalar(cross_entropy(z, t, {Reduction::mean, -100, eps})), std::log(4.0), 1e-12);
  }
}

TEST(CrossEntropy, LabelSmoothingMixesTargetAndUniform) {
  const std::vector<double> row{1, 2, 3};
  const double eps = 0.3;
  const double smooth = -(lsm(row, 0) + lsm(row, 1) + lsm(row, 2)) / 3;
  Case c;
  Tensor z = c.in("z", {1, 3}, row);
  Tensor t = c.in("t", {1}, {0}, DType::i32);
  EXPECT_NEAR(c.scalar(cross_entropy(z, t, {Reduction::sum, -100, eps})),
              (1 - eps) * -lsm(row, 0) + eps * smooth, 1e-12);
}

TEST(CrossEntropy, IgnoredTargetsAreZeroAndNotCounted) {
  const std::vector<double> r0{1, 2, 3}, r1{3, 1, 0}, r2{0, 1, 0};
  const double l0 = -lsm(r0, 2), l2 = -lsm(r2, 0);
  for (int64_t ignore : {-100, 1}) {  // outside the classes, and a valid class
    Case c;
    Tensor z = c.in("z", {3, 3}, {1, 2, 3, 3, 1, 0, 0, 1, 0});
    Tensor t = c.in("t", {3}, {2, static_cast<double>(ignore), 0}, DType::i32);
    expect_near_all(c.eval(cross_entropy(z, t, {Reduction::none, ignore})), {l0, 0.0, l2});
    EXPECT_NEAR(c.scalar(cross_entropy(z, t, {Reduction::mean, ignore})), (l0 + l2) / 2, 1e-12);
    EXPECT_NEAR(c.scalar(nll_loss(z, t, Reduction::mean, ignore)), -(3 + 0) / 2.0, 1e-12);
  }
}

// As PyTorch: the mean over no counted element is 0/0 = NaN, and no gradient flows.
TEST(CrossEntropy, AllIgnoredMeanIsNaNWithZeroGradient) {
  for (double eps : {0.0, 0.2}) {
    Case c;
    Tensor z = c.in("z", {2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor t = c.in("t", {2}, {-100, -100}, DType::i32);
    Tensor loss = cross_entropy(z, t, {Reduction::mean, -100, eps});
    EXPECT_TRUE(std::isnan(c.scalar(loss)));
    expect_near_all(c.eval(gradients(loss, {z})[0]), std::vector<double>(6, 0.0), 0.0);
    EXPECT_TRUE(std::isnan(c.scalar(nll_loss(z, t))));
  }
}

TEST(CrossEntropy, GradientIsSoftmaxMinusSmoothedTarget) {
  const std::vector<double> row{0.5, -1, 2, 0};
  double s = 0;
  for (double v : row) s += std::exp(v);
  const double eps = 0.2;
  Case c;
  Tensor z = c.in("z", {2, 4}, {0.5, -1, 2, 0, 0.5, -1, 2, 0});
  Tensor t = c.in("t", {2}, {1, 3}, DType::i32);
  Array g = c.eval(gradients(cross_entropy(z, t, {Reduction::mean, -100, eps}), {z})[0]);
  for (int b = 0; b < 2; ++b) {
    for (int k = 0; k < 4; ++k) {
      const double target = (k == (b == 0 ? 1 : 3) ? 1 - eps : 0.0) + eps / 4;
      EXPECT_NEAR(g.data[b * 4 + k], (std::exp(row[k]) / s - target) / 2, 1e-12);
    }
  }
}

// Probability targets need not sum to 1: d/dz = softmax * sum(t) - t, d/dt = -log_softmax.
TEST(CrossEntropy, ProbabilityTargetGradients) {
  const std::vector<double> row{0.3, 1.2, -0.4};
  const std::vector<double> target{0.2, 0.5, 0.6};
  double s = 0;
  for (double v : row) s += std::exp(v);
  Case c;
  Tensor z = c.in("z", {1, 3}, row);
  Tensor t = c.in("t", {1, 3}, target);
  Tensor loss = cross_entropy(z, t, {Reduction::sum});
  EXPECT_NEAR(c.scalar(loss), -(0.2 * lsm(row, 0) + 0.5 * lsm(row, 1) + 0.6 * lsm(row, 2)), 1e-12);
  auto g = gradients(loss, {z, t});
  Array gz = c.eval(g[0]), gt = c.eval(g[1]);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(gz.data[k], std::exp(row[k]) / s * 1.3 - target[k], 1e-12);
    EXPECT_NEAR(gt.data[k], -lsm(row, k), 1e-12);
  }
}

// One-hot probabilities and class indices are the same loss, smoothing included.
TEST(CrossEntropy, OneHotProbabilitiesMatchIndices) {
  const std::vector<double> logits{0.1, -0.7, 1.3, 0.4, 2.0, -1.1, 0.0, 0.9, -0.2, 0.6, 1.1, -0.5};
  const std::vector<double> index{2, 0, 1, 2};  // [N=1, H=2, W=2], C = 3
  std::vector<double> onehot(12, 0.0);
  for (int p = 0; p < 4; ++p) onehot[static_cast<size_t>(index[p]) * 4 + p] = 1.0;
  for (double eps : {0.0, 0.15}) {
    for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
      Case c;
      Tensor z = c.in("z", {1, 3, 2, 2}, logits);
      Tensor ti = c.in("ti", {1, 2, 2}, index, DType::i32);
      Tensor tp = c.in("tp", {1, 3, 2, 2}, onehot);
      Tensor li = cross_entropy(z, ti, {r, -100, eps});
      Tensor lp = cross_entropy(z, tp, {r, -100, eps});
      expect_near_all(c.eval(li), c.eval(lp).data);
      Tensor ct = c.in("ct", li.shape(), std::vector<double>(li.numel(), 0.75));
      expect_near_all(c.eval(gradients(li, {z}, ct)[0]), c.eval(gradients(lp, {z}, ct)[0]).data);
    }
  }
}

// [N, C, H, W] scores are rows of C classes at every (n, h, w); [C] is a single row.
TEST(CrossEntropy, SpatialAndSingleSampleLayouts) {
  const std::vector<double> logits{0.1, -0.7, 1.3, 0.4, 2.0, -1.1, 0.0, 0.9, -0.2, 0.6, 1.1, -0.5};
  const std::vector<double> target{2, 0, 1, 2};
  Case c;
  Tensor z = c.in("z", {1, 3, 2, 2}, logits);
  Tensor t = c.in("t", {1, 2, 2}, target, DType::i32);
  Array per = c.eval(cross_entropy(z, t, {Reduction::none}));
  ASSERT_EQ(per.shape, (Shape{1, 2, 2}));
  for (int p = 0; p < 4; ++p) {
    std::vector<double> row{logits[p], logits[4 + p], logits[8 + p]};
    EXPECT_NEAR(per.data[p], -lsm(row, static_cast<size_t>(target[p])), 1e-12);
    Case single;
    Tensor zs = single.in("z", {3}, row);
    Tensor ts = single.in("t", {}, {target[p]}, DType::i32);
    Tensor l = cross_entropy(zs, ts, {Reduction::none});
    EXPECT_EQ(l.shape(), Shape{});
    EXPECT_NEAR(single.scalar(l), per.data[p], 1e-12);
  }
}

TEST(CrossEntropy, OutOfRangeTargetsAreErrorsNamingOpAndValue) {
  Case c;
  Tensor z = c.in("z", {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor t = c.in("t", {2}, {0, 3}, DType::i32);
  expect_error_mentions([&] { c.eval(cross_entropy(z, t)); }, {"cross_entropy", "3", "[1]"});
  expect_error_mentions([&] { c.eval(gradients(cross_entropy(z, t), {z})[0]); },
                        {"cross_entropy_backward", "3"});
  expect_error_mentions([&] { c.eval(nll_loss(z, t)); }, {"nll_loss", "3"});
  Tensor neg = c.in("neg", {2}, {-1, 0}, DType::i32);
  expect_error_mentions([&] { c.eval(cross_entropy(z, neg)); }, {"cross_entropy", "-1"});
  // -1 is fine once it is the ignore_index.
  EXPECT_NEAR(c.scalar(cross_entropy(z, neg, {Reduction::sum, -1})), -lsm({4, 5, 6}, 0), 1e-12);
}

TEST(CrossEntropy, BadShapesAndAttributesAreShapeErrors) {
  Graph g;
  Tensor z = g.input("z", {4, 3, 2});
  auto expect_shape_error = [](auto f, const char* op) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  };
  expect_shape_error([&] { cross_entropy(z, g.input("t1", {4, 3}, DType::i32)); }, "cross_entropy");
  expect_shape_error([&] { cross_entropy(z, g.input("t2", {4, 2}, DType::u32)); }, "cross_entropy");
  expect_shape_error([&] { cross_entropy(z, g.input("t3", {4, 3, 1})); }, "cross_entropy");
  expect_shape_error(
      [&] {
        cross_entropy(z, g.input("t4", {4, 3, 2}, DType::f16));
      },
      "cross_entropy");
  expect_shape_error(
      [&] {
        cross_entropy(z, g.input("t5", {4, 2}, DType::i32), {Reduction::mean, -100, 1.5});
      },
      "label_smoothing");
  expect_shape_error(
      [&] {
        cross_entropy(g.input("zi", {4, 3}, DType::i32), g.input("t6", {4}, DType::i32));
      },
      "cross_entropy");
  expect_shape_error([&] { cross_entropy(g.input("z0", {}), g.input("t7", {}, DType::i32)); },
                     "cross_entropy");
  expect_shape_error([&] { nll_loss(z, g.input("t8", {4, 3, 2})); }, "nll_loss");
  expect_shape_error([&] { nll_loss(z, g.input("t9", {4}, DType::i32)); }, "nll_loss");
}

TEST(CrossEntropy, AttributesPrintByName) {
  Graph g;
  Tensor l =
      cross_entropy(g.input("z", {2, 3}), g.input("t", {2}, DType::i32), {Reduction::sum, 4, 0.25});
  const std::string s = g.node(l.id()).attrs.str();
  EXPECT_NE(s.find("reduction=sum"), std::string::npos) << s;
  EXPECT_NE(s.find("ignore_index=4"), std::string::npos) << s;
  EXPECT_NE(s.find("label_smoothing=0.25"), std::string::npos) << s;
}

// ---- elementwise losses ----

TEST(ElementwiseLoss, HandComputedValues) {
  Case c;
  Tensor x = c.in("x", {4}, {1, 2, 3, 0.25});
  Tensor y = c.in("y", {4}, {0, 0, 1, 0.75});
  // d = x - y = {1, 2, 2, -0.5}
  expect_near_all(c.eval(mse_loss(x, y, Reduction::none)), {1, 4, 4, 0.25});
  EXPECT_NEAR(c.scalar(mse_loss(x, y)), 9.25 / 4, 1e-12);
  EXPECT_NEAR(c.scalar(mse_loss(x, y, Reduction::sum)), 9.25, 1e-12);
  expect_near_all(c.eval(l1_loss(x, y, Reduction::none)), {1, 2, 2, 0.5});
  // beta = 1: |d| >= 1 -> |d| - 0.5; |d| = 0.5 -> 0.5 * 0.25 / 1.
  expect_near_all(c.eval(smooth_l1_loss(x, y, Reduction::none)), {0.5, 1.5, 1.5, 0.125});
  // beta = 4: all quadratic, 0.5 d^2 / 4.
  expect_near_all(c.eval(smooth_l1_loss(x, y, Reduction::none, 4.0)), {0.125, 0.5, 0.5, 0.03125});
  expect_near_all(c.eval(smooth_l1_loss(x, y, Reduction::none, 0.0)), {1, 2, 2, 0.5});
}

// The gradient of |x - y| is sign(x - y), 0 at x == y; smooth_l1 with beta = 0 is l1 there too
// (PyTorch 1.13 gives -1 to both x and y at such a tie, which is no subgradient of |x - y|).
TEST(ElementwiseLoss, L1GradientIsZeroAtTies) {
  for (double beta : {-1.0, 0.0}) {
    Case c;
    Tensor x = c.in("x", {3}, {1, 2, 3});
    Tensor y = c.in("y", {3}, {1, 0, 5});
    Tensor loss =
        beta < 0 ? l1_loss(x, y, Reduction::sum) : smooth_l1_loss(x, y, Reduction::sum, beta);
    auto g = gradients(loss, {x, y});
    expect_near_all(c.eval(g[0]), {0, 1, -1}, 0.0);
    expect_near_all(c.eval(g[1]), {0, -1, 1}, 0.0);
  }
}

TEST(ElementwiseLoss, SmoothL1GradientClampsAtBeta) {
  Case c;
  Tensor x = c.in("x", {4}, {1.25, -0.75, 0.1, 3});
  Tensor y = c.in("y", {4}, {0.75, -0.25, 0, 0});
  // d = {0.5, -0.5, 0.1, 3} with beta 0.5: ±1 from |d| = beta on, d / beta inside.
  Tensor loss = smooth_l1_loss(x, y, Reduction::sum, 0.5);
  expect_near_all(c.eval(gradients(loss, {x})[0]), {1, -1, 0.2, 1});
}

// PyTorch clamps the logs at -100, so p = 0 or 1 give finite losses.
TEST(ElementwiseLoss, BinaryCrossEntropyValuesAndClamp) {
  Case c;
  Tensor p = c.in("p", {5}, {0.5, 0, 1, 1, 0.2});
  Tensor y = c.in("y", {5}, {1, 1, 1, 0, 0.25});
  expect_near_all(c.eval(binary_cross_entropy(p, y, Reduction::none)),
                  {std::log(2.0), 100, 0, 100, -(0.25 * std::log(0.2) + 0.75 * std::log(0.8))});
  Tensor bad = c.in("bad", {2}, {0.5, 1.5});
  Tensor y2 = c.in("y2", {2}, {0, 1});
  expect_error_mentions([&] { c.eval(binary_cross_entropy(bad, y2)); },
                        {"binary_cross_entropy", "outside [0, 1]"});
}

TEST(ElementwiseLoss, BinaryCrossEntropyWithLogitsIsStable) {
  Case c;
  Tensor x = c.in("x", {5}, {0, 100, -100, 800, 2});
  Tensor y = c.in("y", {5}, {0.3, 0, 1, 1, 0.25});
  const double p = 1 / (1 + std::exp(-2.0));
  expect_near_all(c.eval(binary_cross_entropy_with_logits(x, y, Reduction::none)),
                  {std::log(2.0), 100, 100, 0, -(0.25 * std::log(p) + 0.75 * std::log(1 - p))});
  auto g = gradients(binary_cross_entropy_with_logits(x, y, Reduction::sum), {x, y});
  expect_near_all(c.eval(g[0]), {0.5 - 0.3, 1, -1, 0, p - 0.25});
  expect_near_all(c.eval(g[1]), {0, -100, 100, -800, -2});
}

TEST(ElementwiseLoss, ShapeAndDtypeMismatchesAreShapeErrors) {
  Graph g;
  Tensor x = g.input("x", {3, 4});
  for (auto f : {mse_loss, l1_loss, binary_cross_entropy, binary_cross_entropy_with_logits}) {
    EXPECT_THROW(f(x, g.input("y" + std::to_string(g.size()), {1, 4}), Reduction::mean),
                 ShapeError);
  }
  try {
    mse_loss(x, g.input("row", {4}));
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mse_loss"), std::string::npos) << msg;
    EXPECT_NE(msg.find("same shape"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[4]"), std::string::npos) << msg;
  }
  EXPECT_THROW(smooth_l1_loss(x, g.input("h", {3, 4}, DType::f16)), ShapeError);
  EXPECT_THROW(l1_loss(g.input("xi", {3}, DType::i32), g.input("yi", {3}, DType::i32)), ShapeError);
}

TEST(ElementwiseLoss, EmptyOperandsAndBadReductionsAreErrors) {
  Graph g;
  Tensor x = g.input("x", {3});
  expect_error_mentions([&] { mse_loss(Tensor{}, x); }, {"mse_loss", "empty"});
  expect_error_mentions([&] { l1_loss(x, Tensor{}); }, {"l1_loss", "empty"});
  expect_error_mentions([&] { cross_entropy(Tensor{}, x); }, {"cross_entropy", "empty"});
  const auto bad = static_cast<Reduction>(7);
  EXPECT_THROW(mse_loss(x, x, bad), ShapeError);
  EXPECT_THROW(nll_loss(g.input("s", {2, 3}), g.input("t", {2}, DType::i32), bad), ShapeError);
}

TEST(ElementwiseLoss, ReductionsShapeTheOutput) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 2});
  Tensor y = g.input("y", {2, 3, 2});
  EXPECT_EQ(mse_loss(x, y, Reduction::none).shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(mse_loss(x, y, Reduction::mean).shape(), Shape{});
  EXPECT_EQ(l1_loss(x, y, Reduction::sum).shape(), Shape{});
}

}  // namespace
}  // namespace mn
