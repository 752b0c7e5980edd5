// Forward values of the nn family (softmax, log_softmax, the normalizations, dropout) on cases
// small enough to compute by hand, identities between the ops, and shape errors. Gradients are
// checked against finite differences by op_table_test and against PyTorch by nn_torch_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/op_def.h"
#include "ir/ops/nn.h"
#include "ir/random.h"
#include "support/random_fill.h"

namespace mn {
namespace {

// A graph whose inputs are fed exact double values (constants would be rounded to f32).
struct Fed {
  Graph g;
  reference::Feeds feeds;
  Tensor input(const std::string& name, Shape shape, std::vector<double> values) {
    Tensor t = g.input(name, shape);
    feeds[name] = Array(std::move(shape), DType::f32, std::move(values));
    return t;
  }
  Tensor random(const std::string& name, Shape shape, double lo = -2.0, double hi = 2.0) {
    auto rng = testing::rng_for("nn_test/" + name);
    Array a = testing::random_array(rng, {shape, DType::f32}, lo, hi);
    return input(name, std::move(shape), std::move(a.data));
  }
  Array eval(Tensor t) {
    return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0];
  }
};

void expect_values(const Array& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got.data[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

void expect_close(const Array& got, const Array& want, double tol = 1e-12) {
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LE(testing::relative_error(got, want), tol);
}

// Runs f and checks it throws E with every fragment in the message.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const char* s : fragments)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

// ---- softmax, log_softmax ----

TEST(Softmax, HandComputedRow) {
  Fed f;
  Tensor x = f.input("x", {3}, {std::log(1.0), std::log(2.0), std::log(3.0)});
  expect_values(f.eval(softmax(x)), {1.0 / 6, 2.0 / 6, 3.0 / 6});
  expect_values(f.eval(log_softmax(x)), {std::log(1.0 / 6), std::log(2.0 / 6), std::log(3.0 / 6)});
}

TEST(Softmax, LargeInputsStayFinite) {
  Fed f;
  Tensor x = f.input("x", {3}, {1000.0, 1000.0, -1000.0});
  expect_values(f.eval(softmax(x)), {0.5, 0.5, 0.0});
  expect_values(f.eval(log_softmax(x)), {-std::log(2.0), -std::log(2.0), -2000.0 - std::log(2.0)});
}

TEST(Softmax, MiddleAxisMatchesTextbookFormula) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 4});
  Array xv = f.feeds["x"];
  Array y = f.eval(softmax(x, 1));
  Array ly = f.eval(log_softmax(x, -2));
  for (int a = 0; a < 2; ++a) {
    for (int c = 0; c < 4; ++c) {
      double total = 0;
      for (int b = 0; b < 3; ++b) total += std::exp(xv.data[(a * 3 + b) * 4 + c]);
      for (int b = 0; b < 3; ++b) {
        const int i = (a * 3 + b) * 4 + c;
        EXPECT_NEAR(y.data[i], std::exp(xv.data[i]) / total, 1e-14);
        EXPECT_NEAR(ly.data[i], xv.data[i] - std::log(total), 1e-13);
      }
    }
  }
}

TEST(Softmax, NegativeAxisIsStoredNormalized) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 4});
  Tensor y = softmax(x, -1);
  EXPECT_EQ(g.node(y.id()).attrs.as<SoftmaxAttrs>().axis, 2);
  EXPECT_EQ(g.node(y.id()).attrs, g.node(softmax(x, 2).id()).attrs);
}

// ---- layer_norm, rms_norm ----

TEST(LayerNorm, HandComputed) {
  Fed f;
  Tensor x = f.input("x", {1, 4}, {1, 2, 3, 4});
  Tensor gamma = f.input("gamma", {4}, {1, 2, 1, 1});
  Tensor beta = f.input("beta", {4}, {0, 0, 1, 0});
  // mean 2.5, biased variance 1.25
  const double r = 1.0 / std::sqrt(1.25 + 1e-5);
  expect_values(f.eval(layer_norm(x, gamma, beta)), {-1.5 * r, -0.5 * r * 2, 0.5 * r + 1, 1.5 * r},
                1e-9);
  expect_values(f.eval(layer_norm(x, {}, {}, 1, 0.0)),
                {-1.5 / std::sqrt(1.25), -0.5 / std::sqrt(1.25), 0.5 / std::sqrt(1.25),
                 1.5 / std::sqrt(1.25)});
}

TEST(LayerNorm, TwoTrailingAxesNormalizeEachBlock) {
  Fed f;
  Tensor x = f.random("x", {2, 2, 3});
  Array y = f.eval(layer_norm(x, {}, {}, 2, 0.0));
  for (int b = 0; b < 2; ++b) {
    double s = 0, ss = 0;
    for (int j = 0; j < 6; ++j) {
      s += y.data[b * 6 + j];
      ss += y.data[b * 6 + j] * y.data[b * 6 + j];
    }
    EXPECT_NEAR(s / 6, 0.0, 1e-14);
    EXPECT_NEAR(ss / 6, 1.0, 1e-13);
  }
}

TEST(RmsNorm, HandComputed) {
  Fed f;
  Tensor x = f.input("x", {2, 2}, {3, 4, -1, 1});
  Tensor gamma = f.input("gamma", {2}, {2.0, 0.5});
  // mean squares 12.5 and 1
  expect_values(f.eval(rms_norm(x, gamma, 0.0)),
                {6 / std::sqrt(12.5), 2 / std::sqrt(12.5), -2.0, 0.5});
  expect_values(f.eval(rms_norm(x, {}, 1e-6)),
                {3 / std::sqrt(12.5 + 1e-6), 4 / std::sqrt(12.5 + 1e-6), -1 / std::sqrt(1 + 1e-6),
                 1 / std::sqrt(1 + 1e-6)},
                1e-9);
}

// ---- group_norm ----

TEST(GroupNorm, HandComputed) {
  Fed f;
  Tensor x = f.input("x", {1, 4, 1}, {1, 2, 3, 10});
  Tensor gamma = f.input("gamma", {4}, {1, 2, 3, 4});
  Tensor beta = f.input("beta", {4}, {0, 0, 0, 1});
  // group 0: {1, 2}, mean 1.5, variance 0.25; group 1: {3, 10}, mean 6.5, variance 12.25
  expect_values(f.eval(group_norm(x, 2, gamma, beta, 0.0)), {-1.0, 2.0, -3.0, 5.0});
}

TEST(GroupNorm, OneGroupIsLayerNormOverChannelsAndSpace) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 2});
  expect_close(f.eval(group_norm(x, 1, {}, {})), f.eval(layer_norm(x, {}, {}, 2)));
}

TEST(GroupNorm, GroupPerChannelIsInstanceNorm) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 4});
  expect_close(f.eval(group_norm(x, 3, {}, {})), f.eval(layer_norm(x, {}, {}, 1)));
}

// ---- batch_norm ----

TEST(BatchNorm, TrainingHandComputedWithRunningStatistics) {
  Fed f;
  Tensor x = f.input("x", {3, 2}, {1, 10, 2, 20, 3, 30});
  Tensor rm = f.input("rm", {2}, {1, -1});
  Tensor rv = f.input("rv", {2}, {2, 4});
  auto r = batch_norm(x, {}, {}, rm, rv, true, 0.25, 0.0);
  // channel 0: mean 2, biased variance 2/3, unbiased 1; channel 1: mean 20, 200/3, 100
  const double s0 = std::sqrt(2.0 / 3), s1 = std::sqrt(200.0 / 3);
  expect_values(f.eval(r.y), {-1 / s0, -10 / s1, 0, 0, 1 / s0, 10 / s1});
  expect_values(f.eval(r.running_mean), {0.75 * 1 + 0.25 * 2, 0.75 * -1 + 0.25 * 20});
  expect_values(f.eval(r.running_var), {0.75 * 2 + 0.25 * 1, 0.75 * 4 + 0.25 * 100});
}

TEST(BatchNorm, EvalUsesRunningStatistics) {
  Fed f;
  Tensor x = f.input("x", {2, 2, 1}, {1, 10, 3, 30});
  Tensor gamma = f.input("gamma", {2}, {2, 1});
  Tensor beta = f.input("beta", {2}, {0, 5});
  Tensor rm = f.input("rm", {2}, {1, 10});
  Tensor rv = f.input("rv", {2}, {4, 100});
  auto r = batch_norm(x, gamma, beta, rm, rv, false, 0.1, 0.0);
  expect_values(f.eval(r.y), {0, 5, 2, 7});
  EXPECT_EQ(r.running_mean, rm);
  EXPECT_EQ(r.running_var, rv);
}

TEST(BatchNorm, SpatialStatisticsPerChannel) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 2, 2});
  Array y = f.eval(batch_norm(x, {}, {}, {}, {}, true, 0.1, 0.0).y);
  for (int c = 0; c < 3; ++c) {
    double s = 0, ss = 0;
    for (int b = 0; b < 2; ++b) {
      for (int j = 0; j < 4; ++j) {
        const double v = y.data[(b * 3 + c) * 4 + j];
        s += v;
        ss += v * v;
      }
    }
    EXPECT_NEAR(s / 8, 0.0, 1e-14);
    EXPECT_NEAR(ss / 8, 1.0, 1e-13);
  }
}

TEST(BatchNorm, RunningStatisticsTakeNoGradient) {
  Fed f;
  Tensor x = f.random("x", {4, 3});
  Tensor gamma = f.random("gamma", {3}, 0.5, 1.5);
  Tensor rm = f.input("rm", {3}, {0, 0, 0});
  Tensor rv = f.input("rv", {3}, {1, 1, 1});
  auto r = batch_norm(x, gamma, {}, rm, rv, true);
  auto grads = gradients(sum(r.running_mean) + sum(r.running_var), {x, rm});
  for (const Tensor& gr : grads) {
    for (double v : f.eval(gr).data) EXPECT_EQ(v, 0.0);
  }
  // The normalized output still differentiates.
  Array gg = f.eval(gradients(sum(r.y * r.y * r.y), {gamma})[0]);
  EXPECT_GT(std::abs(gg.data[0]), 1e-3);
}

TEST(BatchNorm, TrainingWithoutRunningStatistics) {
  Graph g;
  Tensor x = g.input("x", {4, 3});
  auto r = batch_norm(x, {}, {}, {}, {}, true);
  EXPECT_TRUE(r.y.valid());
  EXPECT_FALSE(r.running_mean.valid());
  EXPECT_FALSE(r.running_var.valid());
}

TEST(BatchNorm, BadInput) {
  Graph g;
  Tensor x = g.input("x", {4, 3});
  Tensor c3 = g.input("c3", {3});
  Tensor c4 = g.input("c4", {4});
  expect_error<Error>([&] { batch_norm(x, {}, {}, {}, {}, false); },
                      {"batch_norm", "running_mean"});
  expect_error<Error>([&] { batch_norm(x, {}, {}, c3, {}, true); }, {"batch_norm", "together"});
  expect_error<Error>([&] { batch_norm(x, {}, {}, c3, c3, true, 1.5); }, {"momentum"});
  expect_error<ShapeError>([&] { batch_norm(x, c4, {}, c3, c3, true); }, {"batch_norm", "[3]"});
  expect_error<ShapeError>([&] { batch_norm(x, {}, {}, c4, c4, true); }, {"batch_norm", "f32[3]"});
  expect_error<ShapeError>([&] { batch_norm(x, {}, {}, c3, c4, false); }, {"batch_norm", "f32[4]"});
  Tensor one = g.input("one", {1, 3});
  expect_error<ShapeError>([&] { batch_norm(one, {}, {}, {}, {}, true); },
                           {"batch_norm", "more than one value per channel"});
  EXPECT_NO_THROW(batch_norm(one, {}, {}, c3, c3, false));
  Tensor v = g.input("v", {3});
  expect_error<ShapeError>([&] { batch_norm(v, {}, {}, c3, c3, false); }, {"batch_norm", "[N, C"});
}

// ---- dropout ----

TEST(Dropout, IdentityWhenDisabled) {
  Graph g;
  Tensor x = g.input("x", {3, 4});
  EXPECT_EQ(dropout(x, 0.0, 1), x);
  EXPECT_EQ(dropout(x, 0.5, 1, false), x);
  EXPECT_NE(dropout(x, 0.5, 1), x);
}

TEST(Dropout, RejectsProbabilitiesOutsideZeroOne) {
  Graph g;
  Tensor x = g.input("x", {3});
  for (double p : {1.0, -0.1, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    expect_error<Error>([&] { dropout(x, p, 0); }, {"dropout", "p must be in [0, 1)"});
    expect_error<Error>([&] { dropout(x, p, 0, false); }, {"dropout"});
    expect_error<Error>([&] { g.apply("dropout", DropoutAttrs{p, 0}, {x}); }, {"dropout"});
  }
}

TEST(Dropout, KeepsWhereTheCounterStreamIsAtLeastP) {
  const double p = 0.3;
  const uint64_t seed = 42;
  Fed f;
  const int n = 4000;
  Tensor x = f.input("x", {n}, std::vector<double>(n, 1.0));
  Array y = f.eval(dropout(x, p, seed));
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    const bool keep = random_uniform(seed, static_cast<uint64_t>(i)) >= p;
    EXPECT_EQ(y.data[i], keep ? 1.0 / (1.0 - p) : 0.0) << i;
    kept += keep;
  }
  // The stream is uniform: about 1 - p of the elements survive (7 standard deviations here).
  EXPECT_NEAR(kept / double(n), 1.0 - p, 0.05);
}

// The integer form of the keep test that GPU kernels use (see DropoutAttrs).
TEST(Dropout, IntegerThresholdMatchesTheReferenceTest) {
  for (double p : {0.1, 0.3, 0.5, 1.0 / 3.0, 0.9, 0.123456789}) {
    const auto threshold = static_cast<uint64_t>(std::ceil(p * 16777216.0));
    for (uint64_t i = 0; i < 20000; ++i) {
      ASSERT_EQ(random_uniform(5, i) >= p, (random_bits(5, i) >> 40) >= threshold) << p << " " << i;
    }
  }
}

TEST(Dropout, MaskDependsOnlyOnSeedAndIndex) {
  Fed f;
  Tensor x = f.random("x", {5, 7});
  Tensor ones = f.input("ones", {5, 7}, std::vector<double>(35, 1.0));
  Array a = f.eval(dropout(x, 0.5, 7));
  Array b = f.eval(dropout(x, 0.5, 7));
  Array c = f.eval(dropout(x, 0.5, 8));
  Array mask = f.eval(dropout(ones, 0.5, 7));
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  for (size_t i = 0; i < a.data.size(); ++i)
    EXPECT_EQ(a.data[i], f.feeds["x"].data[i] * mask.data[i]);
}

TEST(Dropout, GradientIsTheScaledMask) {
  Fed f;
  Tensor x = f.random("x", {4, 6});
  Tensor ones = f.input("ones", {4, 6}, std::vector<double>(24, 1.0));
  Tensor y = dropout(x, 0.25, 3);
  Array grad = f.eval(gradients(sum(y), {x})[0]);
  EXPECT_EQ(grad.data, f.eval(dropout(ones, 0.25, 3)).data);
}

// ---- shape errors ----

TEST(NnShapeErrors, NameTheOpAndTheInputs) {
  Graph g;
  Tensor x = g.input("x", {2, 3});
  Tensor i = g.input("i", {2, 3}, DType::i32);
  Tensor h = g.input("h", {3}, DType::f16);
  Tensor c3 = g.input("c3", {3});
  Tensor c4 = g.input("c4", {4});
  Tensor x6 = g.input("x6", {2, 6, 5});
  expect_error<ShapeError>([&] { softmax(x, 2); }, {"softmax"});
  expect_error<ShapeError>([&] { log_softmax(i); }, {"log_softmax", "i32[2, 3]"});
  expect_error<ShapeError>([&] { g.apply("softmax", SoftmaxAttrs{-3}, {x}); },
                           {"softmax", "axis -3"});
  expect_error<ShapeError>([&] { layer_norm(x, c4, {}); }, {"layer_norm", "[3]", "f32[4]"});
  expect_error<ShapeError>([&] { layer_norm(x, {}, {}, 3); }, {"layer_norm", "normalized_dims 3"});
  expect_error<ShapeError>([&] { layer_norm(x, {}, {}, 0); }, {"layer_norm", "normalized_dims 0"});
  expect_error<ShapeError>([&] { layer_norm(x, h, {}); }, {"layer_norm", "same dtype"});
  expect_error<ShapeError>([&] { rms_norm(i, {}); }, {"rms_norm", "float"});
  expect_error<ShapeError>([&] { rms_norm(x, c4); }, {"rms_norm", "f32[4]"});
  expect_error<ShapeError>([&] { group_norm(x6, 4, {}, {}); }, {"group_norm", "groups (4)"});
  expect_error<ShapeError>([&] { group_norm(x6, 3, c3, {}); }, {"group_norm", "[6]"});
  expect_error<ShapeError>([&] { group_norm(c3, 1, {}, {}); }, {"group_norm", "[N, C"});
  // Operand lists that disagree with the flags (only reachable through Graph::apply).
  expect_error<ShapeError>(
      [&] {
        g.apply("layer_norm", LayerNormAttrs{1, 1e-5, true, true}, {x, c3});
      },
      {"layer_norm", "gamma, beta"});
  expect_error<Error>([&] { layer_norm(Tensor{}, {}, {}); }, {"layer_norm", "x", "empty"});
  expect_error<Error>([&] { softmax(Tensor{}); }, {"softmax", "empty"});
}

// ---- decompositions stay within primitive ops ----

TEST(NnDecompositions, UseOnlyPrimitiveOps) {
  const std::set<std::string> primitive{"constant", "add",     "sub",    "mul",   "div",   "neg",
                                        "exp",      "log",     "rsqrt",  "sqrt",  "max",   "sum",
                                        "mean",     "reshape", "matmul", "where", "slice", "concat",
                                        "pow",      "cos",     "sin"};
  for (const char* name : {"softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm",
                           "batch_norm", "scaled_dot_product_attention", "rope"}) {
    const OpDef& d = op_def(name);
    ASSERT_TRUE(static_cast<bool>(d.decompose)) << name;
    for (const OpSample& s : d.samples()) {
      Graph g;
      std::vector<Tensor> operands;
      for (size_t k = 0; k < s.inputs.size(); ++k) {
        operands.push_back(g.input("x" + std::to_string(k), s.inputs[k].shape, s.inputs[k].dtype));
      }
      Tensor out = g.apply(name, s.attrs, operands);
      const Node node = g.node(out.id());
      d.decompose(node, operands);
      for (size_t k = static_cast<size_t>(out.id()) + 1; k < g.size(); ++k) {
        EXPECT_TRUE(primitive.count(std::string(g.node(static_cast<NodeId>(k)).op_name())))
            << name << "/" << s.label << " decomposes into "
            << g.node(static_cast<NodeId>(k)).op_name();
      }
    }
  }
}

// ---- the vjps are graph ops, so they differentiate again ----

// Finite differences of L2 = sum_k sum(dL/dp_k * S_k), where L = sum(op(p) * R): the gradient of
// L2 is a Hessian-vector product, which exercises the vjp of every op each vjp is built from.
TEST(NnSecondOrder, VjpsDifferentiateExactly) {
  for (const char* name : {"softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm",
                           "batch_norm", "scaled_dot_product_attention", "rope"}) {
    const OpDef& d = op_def(name);
    const auto samples = d.samples();
    for (size_t si = 0; si < std::min<size_t>(samples.size(), 3); ++si) {
      const OpSample& s = samples[si];
      SCOPED_TRACE(std::string(name) + "/" + s.label);
      auto rng = testing::rng_for(std::string("second_order/") + name + "/" + s.label);
      Graph g;
      reference::Feeds feeds;
      std::vector<Tensor> operands, params;
      for (size_t k = 0; k < s.inputs.size(); ++k) {
        const std::string pname = "p" + std::to_string(k);
        feeds[pname] =
            testing::random_array(rng, s.inputs[k], s.ranges[k].first, s.ranges[k].second);
        if (s.no_grad[k]) {
          operands.push_back(g.input(pname, s.inputs[k].shape));
        } else {
          params.push_back(g.input(pname, s.inputs[k].shape));
          operands.push_back(params.back());
        }
      }
      Tensor out = g.apply(name, s.attrs, operands);
      auto fed = [&](const std::string& key, const TensorType& t) {
        feeds[key] = testing::random_array(rng, t, -1.0, 1.0);
        return g.input(key, t.shape);
      };
      Tensor loss = sum(out * fed("r", out.type()));
      auto first = gradients(loss, params);
      Tensor l2 = g.scalar(0.0);
      for (size_t k = 0; k < first.size(); ++k) {
        l2 = l2 + sum(first[k] * fed("s" + std::to_string(k), first[k].type()));
      }
      auto second = gradients(l2, params);
      std::vector<NodeId> ids;
      for (const Tensor& t : second) ids.push_back(t.id());
      auto analytic = reference::evaluate_nodes(g, feeds, ids);
      const NodeId l2_id = l2.id();
      for (size_t k = 0; k < params.size(); ++k) {
        Array& x = feeds[g.node(params[k].id()).name];
        Array numeric(x.shape, x.dtype);
        for (size_t e = 0; e < x.data.size(); ++e) {
          const double x0 = x.data[e], h = 1e-5;
          x.data[e] = x0 + h;
          const double fp = reference::evaluate_nodes(g, feeds, std::span(&l2_id, 1))[0].data[0];
          x.data[e] = x0 - h;
          const double fm = reference::evaluate_nodes(g, feeds, std::span(&l2_id, 1))[0].data[0];
          x.data[e] = x0;
          numeric.data[e] = (fp - fm) / (2 * h);
        }
        EXPECT_LE(testing::relative_error(analytic[k], numeric), 1e-6) << "operand " << k;
      }
    }
  }
}

}  // namespace
}  // namespace mn
