// Forward values and gradients of the elementwise ops against hand-computed cases and PyTorch,
// and their shape-inference errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/op_def.h"
#include "ir/ops/elementwise.h"

namespace mn {
namespace {

std::vector<double> values(Graph& g, const reference::Feeds& feeds, Tensor t) {
  return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0].data;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;  // also equal infinities, which EXPECT_NEAR rejects
    EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

// Message of the ShapeError thrown by f, or "" when it throws none.
template <class F>
std::string shape_error(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "";
}

TEST(Elementwise, BroadcastArithmetic) {
  Graph g;
  auto a = g.input("a", {2, 3});
  auto b = g.input("b", {3});
  reference::Feeds f{{"a", Array({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6})},
                     {"b", Array({3}, DType::f32, {10, 20, 40})}};
  expect_near(values(g, f, a + b), {11, 22, 43, 14, 25, 46}, 0);
  expect_near(values(g, f, a - b), {-9, -18, -37, -6, -15, -34}, 0);
  expect_near(values(g, f, a * b), {10, 40, 120, 40, 100, 240}, 0);
  expect_near(values(g, f, b / a), {10, 10, 40.0 / 3, 2.5, 4, 40.0 / 6}, 1e-15);
  expect_near(values(g, f, pow(a, g.scalar(2))), {1, 4, 9, 16, 25, 36}, 1e-12);
  expect_near(values(g, f, maximum(a, g.scalar(3.5))), {3.5, 3.5, 3.5, 4, 5, 6}, 0);
  expect_near(values(g, f, minimum(a, g.scalar(3.5))), {1, 2, 3, 3.5, 3.5, 3.5}, 0);
  EXPECT_EQ((a + b).shape(), (Shape{2, 3}));
}

TEST(Elementwise, ScalarOperatorsKeepTheTensorDtype) {
  Graph g;
  auto x = g.input("x", {3}, DType::f16);
  reference::Feeds f{{"x", Array({3}, DType::f16, {1, 2, 4})}};
  EXPECT_EQ((x * 2.0).dtype(), DType::f16);
  expect_near(values(g, f, 2.0 - x), {1, 0, -2}, 0);
  expect_near(values(g, f, x - 2.0), {-1, 0, 2}, 0);
  expect_near(values(g, f, 8.0 / x), {8, 4, 2}, 0);
  expect_near(values(g, f, x / 4.0), {0.25, 0.5, 1}, 0);
  expect_near(values(g, f, 1.0 + x * 3.0), {4, 7, 13}, 0);
  expect_near(values(g, f, -x), {-1, -2, -4}, 0);
}

// Values and d/dx of sum(f(x)) in float64 from PyTorch 1.13:
//   x = torch.tensor([-2.5, -1.0, -0.25, 0.0, 0.5, 1.5, 3.0], dtype=torch.float64,
//                    requires_grad=True)
//   y = f(x); g, = torch.autograd.grad(y.sum(), x)
// with f = F.gelu, F.gelu(approximate="tanh"), F.silu, F.softplus(beta=2, threshold=1),
// torch.sigmoid, torch.erf, F.leaky_relu(0.1).
struct Case {
  const char* name;
  std::function<Tensor(Tensor)> f;
  std::vector<double> y, dy;
  double tol;            // of the gradient
  double y_tol = 1e-12;  // of the value
};

TEST(Elementwise, ActivationsMatchPyTorch) {
  // The tanh GELU keeps its constants at f32 precision (as f32 kernels do): ~1e-8 from float64.
  const std::vector<Case> cases{
      {"gelu",
       [](Tensor t) { return gelu(t); },
       {-0.015524163314440398, -0.15865525393145702, -0.10032341857926907, 0.0, 0.34573123063700656,
        1.399789198096713, 2.99595030590511},
       {-0.03761108590814519, -0.08331547058768635, 0.304626645116364, 0.5, 0.8674951246561629,
        1.1274691922299795, 1.011945647204184},
       1e-12},
      {"gelu_tanh",
       [](Tensor t) { return gelu(t, GeluApprox::tanh); },
       {-0.015084266089998577, -0.15880800939172324, -0.100324649298315, 0.0, 0.34571400982514394,
        1.3995715769802328, 2.996362607918227},
       {-0.03795157621266618, -0.08296408384578252, 0.30464590484893955, 0.5, 0.8673699035346424,
        1.127710793151433, 1.0115841666309695},
       1e-6,
       1e-8},
      {"silu",
       [](Tensor t) { return silu(t); },
       {-0.18964545005310887, -0.2689414213699951, -0.10945587477855048, 0.0, 0.3112296656009273,
        1.2263617142904655, 2.8577223804672998},
       {-0.09940111134152683, 0.07232948812851325, 0.37628997842980233, 0.5, 0.7399611873026519,
        1.041294154299143, 1.0881041060151693},
       1e-12},
      {"softplus",
       [](Tensor t) { return softplus(t, 2.0, 1.0); },
       {0.003357674244559034, 0.06346400552148625, 0.23703849209005334, 0.34657359027997264,
        0.6566308437591114, 1.5, 3.0},
       {0.006692850924284856, 0.11920292202211755, 0.37754066879814546, 0.5, 0.7310585786300049,
        1.0, 1.0},
       1e-12},
      {"sigmoid",
       [](Tensor t) { return sigmoid(t); },
       {0.07585818002124355, 0.2689414213699951, 0.43782349911420193, 0.5, 0.6224593312018546,
        0.8175744761936437, 0.9525741268224334},
       {0.07010371654510815, 0.19661193324148185, 0.24613408273759835, 0.25, 0.2350037122015945,
        0.14914645207033286, 0.045176659730912},
       1e-12},
      {"erf",
       [](Tensor t) { return erf(t); },
       {-0.999593047982555, -0.8427007929497149, -0.27632639016823696, 0.0, 0.5204998778130465,
        0.9661051464753108, 0.9999779095030014},
       {0.00217828423035271, 0.4151074974205947, 1.0600141293761143, 1.1283791670955126,
        0.8787825789354448, 0.11893028922362936, 0.00013925305194674786},
       1e-12},
      {"leaky_relu",
       [](Tensor t) { return leaky_relu(t, 0.1); },
       {-0.25, -0.1, -0.025, 0.0, 0.5, 1.5, 3.0},
       {0.1, 0.1, 0.1, 0.1, 1.0, 1.0, 1.0},
       1e-12},
  };
  const std::vector<double> xs{-2.5, -1.0, -0.25, 0.0, 0.5, 1.5, 3.0};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g;
    auto x = g.parameter("x", {7});
    auto y = c.f(x);
    auto dx = gradients(sum(y), {x})[0];
    reference::Feeds f{{"x", Array({7}, DType::f32, xs)}};
    expect_near(values(g, f, y), c.y, c.y_tol);
    expect_near(values(g, f, dx), c.dy, c.tol);
  }
}

TEST(Elementwise, KinksFollowPyTorch) {
  Graph g;
  auto x = g.parameter("x", {5});
  reference::Feeds f{{"x", Array({5}, DType::f32, {-1, 0, 0.5, 1, 2})}};
  auto grad = [&](Tensor y) { return values(g, f, gradients(sum(y), {x})[0]); };
  expect_near(grad(relu(x)), {0, 0, 1, 1, 1}, 0);  // relu'(0) = 0
  expect_near(grad(abs(x)), {-1, 0, 1, 1, 1}, 0);  // sign, 0 at 0
  // clamp passes the gradient on the closed interval [lo, hi].
  expect_near(values(g, f, clamp(x, 0, 1)), {0, 0, 0.5, 1, 1}, 0);
  expect_near(grad(clamp(x, 0, 1)), {0, 1, 1, 1, 0}, 0);
  // Ties of maximum/minimum split the gradient in halves.
  auto c = g.constant(Array({5}, DType::f32, {0, 0, 0, 0, 0}));
  expect_near(grad(maximum(x, c)), {0, 0.5, 1, 1, 1}, 0);
  expect_near(grad(minimum(x, c)), {1, 0.5, 0, 0, 0}, 0);
}

TEST(Elementwise, PowGradients) {
  Graph g;
  auto a = g.parameter("a", {3});
  auto b = g.parameter("b", {3});
  reference::Feeds f{{"a", Array({3}, DType::f32, {0, 2, 3})},
                     {"b", Array({3}, DType::f32, {2, 3, 0.5})}};
  auto y = pow(a, b);
  auto grads = gradients(sum(y), {a, b});
  expect_near(values(g, f, y), {0, 8, std::sqrt(3.0)}, 1e-15);
  // d/da = b a^(b-1); d/db = a^b log a, 0 at a == 0.
  expect_near(values(g, f, grads[0]), {0, 12, 0.5 / std::sqrt(3.0)}, 1e-15);
  expect_near(values(g, f, grads[1]), {0, 8 * std::log(2.0), std::sqrt(3.0) * std::log(3.0)},
              1e-15);
}

TEST(Elementwise, BroadcastGradientsSumBack) {
  Graph g;
  auto a = g.parameter("a", {2, 3});
  auto b = g.parameter("b", {3});
  auto c = g.parameter("c", {2, 1});
  reference::Feeds f{{"a", Array({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6})},
                     {"b", Array({3}, DType::f32, {1, 2, 3})},
                     {"c", Array({2, 1}, DType::f32, {2, 4})}};
  auto grads = gradients(sum((a * b) / c), {a, b, c});
  EXPECT_EQ(grads[1].shape(), (Shape{3}));
  EXPECT_EQ(grads[2].shape(), (Shape{2, 1}));
  expect_near(values(g, f, grads[0]), {0.5, 1, 1.5, 0.25, 0.5, 0.75}, 1e-15);
  expect_near(values(g, f, grads[1]), {0.5 + 1.0, 1 + 1.25, 1.5 + 1.5}, 1e-15);
  // d/dc of sum_j a_ij b_j / c_i = -(sum_j a_ij b_j) / c_i^2 = -14/4, -32/16.
  expect_near(values(g, f, grads[2]), {-3.5, -2}, 1e-15);
}

TEST(Elementwise, ComparisonsAreFloatMasks) {
  Graph g;
  auto a = g.input("a", {4}, DType::i32);
  auto b = g.input("b", {}, DType::i32);
  reference::Feeds f{{"a", Array({4}, DType::i32, {0, 1, 2, 3})},
                     {"b", Array({}, DType::i32, {2})}};
  EXPECT_EQ(eq(a, b).dtype(), DType::f32);
  expect_near(values(g, f, eq(a, b)), {0, 0, 1, 0}, 0);
  expect_near(values(g, f, ne(a, b)), {1, 1, 0, 1}, 0);
  expect_near(values(g, f, lt(a, b)), {1, 1, 0, 0}, 0);
  expect_near(values(g, f, le(a, b)), {1, 1, 1, 0}, 0);
  expect_near(values(g, f, gt(a, b)), {0, 0, 0, 1}, 0);
  expect_near(values(g, f, ge(a, b)), {0, 0, 1, 1}, 0);
  auto h = g.input("h", {2}, DType::f16);
  EXPECT_EQ(lt(h, h).dtype(), DType::f16);
  EXPECT_FALSE(op_def("eq").differentiable);
}

TEST(Elementwise, WhereBroadcastsAndRoutesGradients) {
  Graph g;
  auto cond = g.input("cond", {2, 1});
  auto a = g.parameter("a", {3});
  auto b = g.parameter("b", {});
  reference::Feeds f{{"cond", Array({2, 1}, DType::f32, {1, 0})},
                     {"a", Array({3}, DType::f32, {1, 2, 3})},
                     {"b", Array({}, DType::f32, {-1})}};
  auto y = where(cond, a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  expect_near(values(g, f, y), {1, 2, 3, -1, -1, -1}, 0);
  auto grads = gradients(sum(y * y), {a, b});
  expect_near(values(g, f, grads[0]), {2, 4, 6}, 0);
  expect_near(values(g, f, grads[1]), {-6}, 0);
}

TEST(Elementwise, CastRoundsNarrowTypesAndCastsGradientsBack) {
  Graph g;
  auto x = g.parameter("x", {4});
  reference::Feeds f{{"x", Array({4}, DType::f32, {1.0 + 1.0 / 4096, -2.7, 3.7, 70000})}};
  expect_near(values(g, f, cast(x, DType::f16)), {1, -2.69921875, 3.69921875, INFINITY}, 0);
  expect_near(values(g, f, cast(x, DType::i32)), {1, -2, 3, 70000}, 0);
  EXPECT_EQ(cast(x, DType::f32), x);  // a same-type cast is no op
  // The gradient of an f16 round trip is the cotangent rounded to f16 and cast back.
  auto w = g.constant(Array({4}, DType::f32, {1.0 + 1.0 / 4096, 1, 1, 1}));
  auto grad_half = gradients(sum(cast(cast(x, DType::f16), DType::f32) * w), {x})[0];
  EXPECT_EQ(grad_half.dtype(), DType::f32);
  expect_near(values(g, f, grad_half), {1, 1, 1, 1}, 0);
  // No gradient flows through an integer cast.
  auto grad_int = gradients(sum(cast(cast(x, DType::i32), DType::f32)), {x})[0];
  expect_near(values(g, f, grad_int), {0, 0, 0, 0}, 0);
}

TEST(Elementwise, StopGradientIsIdentityThatBlocksGradients) {
  Graph g;
  auto x = g.parameter("x", {3});
  reference::Feeds f{{"x", Array({3}, DType::f32, {1, 2, 3})}};
  auto y = stop_gradient(x) * x;
  expect_near(values(g, f, y), {1, 4, 9}, 0);
  expect_near(values(g, f, gradients(sum(y), {x})[0]), {1, 2, 3}, 0);
}

TEST(Elementwise, UnaryValues) {
  Graph g;
  auto x = g.input("x", {3});
  reference::Feeds f{{"x", Array({3}, DType::f32, {0.25, 1, 4})}};
  expect_near(values(g, f, sqrt(x)), {0.5, 1, 2}, 1e-15);
  expect_near(values(g, f, rsqrt(x)), {2, 1, 0.5}, 1e-15);
  expect_near(values(g, f, log(exp(x))), {0.25, 1, 4}, 1e-15);
  expect_near(values(g, f, sin(x)), {std::sin(0.25), std::sin(1.0), std::sin(4.0)}, 1e-15);
  expect_near(values(g, f, cos(x)), {std::cos(0.25), std::cos(1.0), std::cos(4.0)}, 1e-15);
  expect_near(values(g, f, tanh(x)), {std::tanh(0.25), std::tanh(1.0), std::tanh(4.0)}, 1e-15);
  expect_near(values(g, f, softplus(x * 10.0)),
              {std::log1p(std::exp(2.5)), std::log1p(std::exp(10.0)), 40}, 1e-12);
}

TEST(Elementwise, BadInputIsAShapeErrorNamingTheOp) {
  Graph g;
  auto a = g.input("a", {2, 3});
  auto b = g.input("b", {4});
  auto i = g.input("i", {2, 3}, DType::i32);
  auto h = g.input("h", {2, 3}, DType::f16);
  std::string msg = shape_error([&] { add(a, b); });
  EXPECT_NE(msg.find("add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_NE(shape_error([&] { mul(a, h); }).find("mul"), std::string::npos);
  EXPECT_NE(shape_error([&] { log(i); }).find("log"), std::string::npos);
  EXPECT_NE(shape_error([&] { div(i, i); }).find("div"), std::string::npos);
  EXPECT_NE(shape_error([&] { where(a, a, h); }).find("where"), std::string::npos);
  EXPECT_NE(shape_error([&] { where(b, a, a); }).find("where"), std::string::npos);
  EXPECT_NE(shape_error([&] { clamp(a, 1, 0); }).find("clamp"), std::string::npos);
  EXPECT_NE(shape_error([&] { clamp(i, 0.5, 2); }).find("clamp"), std::string::npos);
  EXPECT_EQ(clamp(i, 0, 2).dtype(), DType::i32);
  EXPECT_NE(shape_error([&] { eq(a, b); }).find("eq"), std::string::npos);
  EXPECT_THROW(add(a, Tensor{}), Error);
  Graph other;
  EXPECT_THROW(add(a, other.input("c", {2, 3})), Error);
}

}  // namespace
}  // namespace mn
