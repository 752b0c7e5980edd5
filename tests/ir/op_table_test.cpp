// Tests that iterate the op table: every op listed in the IR issue exists with a reference and
// a backward (or is marked non-differentiable); every differentiable op passes a float64
// gradient check on its samples; every composite's decomposition evaluates like the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/op_def.h"
#include "support/random_fill.h"

namespace mn {
namespace {

std::vector<std::string> public_op_names() {
  std::vector<std::string> names;
  for (const OpDef* d : all_op_defs()) {
    if (d->archetype != Archetype::source) names.push_back(d->name);
  }
  return names;
}

// The ops the graph language promises (the IR issue's list).
const char* const kRequiredOps[] = {"add",
                                    "sub",
                                    "mul",
                                    "div",
                                    "pow",
                                    "maximum",
                                    "minimum",
                                    "neg",
                                    "abs",
                                    "exp",
                                    "log",
                                    "sqrt",
                                    "rsqrt",
                                    "sin",
                                    "cos",
                                    "tanh",
                                    "sigmoid",
                                    "relu",
                                    "leaky_relu",
                                    "gelu",
                                    "silu",
                                    "softplus",
                                    "where",
                                    "eq",
                                    "ne",
                                    "lt",
                                    "le",
                                    "gt",
                                    "ge",
                                    "cast",
                                    "clamp",
                                    "sum",
                                    "mean",
                                    "max",
                                    "min",
                                    "argmax",
                                    "variance",
                                    "matmul",
                                    "reshape",
                                    "permute",
                                    "broadcast_to",
                                    "squeeze",
                                    "unsqueeze",
                                    "slice",
                                    "concat",
                                    "split",
                                    "pad",
                                    "take",
                                    "scatter_add",
                                    "one_hot",
                                    "softmax",
                                    "log_softmax",
                                    "layer_norm",
                                    "rms_norm",
                                    "group_norm",
                                    "batch_norm",
                                    "dropout",
                                    "conv2d",
                                    "conv_transpose2d",
                                    "max_pool2d",
                                    "avg_pool2d",
                                    "adaptive_avg_pool2d",
                                    "upsample_nearest2d",
                                    "upsample_bilinear2d",
                                    "scaled_dot_product_attention",
                                    "rope",
                                    "cross_entropy",
                                    "nll_loss",
                                    "mse_loss",
                                    "l1_loss",
                                    "smooth_l1_loss",
                                    "binary_cross_entropy",
                                    "binary_cross_entropy_with_logits",
                                    "stop_gradient"};

TEST(OpTable, EveryRequiredOpIsComplete) {
  for (const char* name : kRequiredOps) {
    const OpDef* d = find_op_def(name);
    if (!d) {
      ADD_FAILURE() << "missing op: " << name;
      continue;
    }
    EXPECT_TRUE(static_cast<bool>(d->eval)) << name << " has no reference evaluation";
    EXPECT_TRUE(static_cast<bool>(d->infer)) << name << " has no shape inference";
    if (d->differentiable) EXPECT_TRUE(static_cast<bool>(d->vjp)) << name << " has no backward";
    EXPECT_TRUE(static_cast<bool>(d->samples)) << name << " has no samples";
    EXPECT_FALSE(d->summary.empty()) << name << " has no summary";
  }
}

TEST(OpTable, EveryOpHasEvalAndSamples) {
  for (const OpDef* d : all_op_defs()) {
    if (d->archetype == Archetype::source) continue;
    EXPECT_TRUE(static_cast<bool>(d->eval)) << d->name;
    EXPECT_TRUE(static_cast<bool>(d->samples)) << d->name;
  }
}

// One sample's graph: float operands that take gradients are parameters used mid-graph
// (p * 1.0), the op, then loss = sum(out * R) with fixed random R.
struct SampleGraph {
  Graph g;
  reference::Feeds feeds;
  std::vector<Tensor> params;
  std::vector<Tensor> operands;
  Tensor out;
  Tensor loss;
};

void build_sample(SampleGraph& s, const OpDef& d, const OpSample& sample, std::mt19937_64& rng,
                  bool with_grad_inputs) {
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    const TensorType& t = sample.inputs[i];
    auto [lo, hi] = i < sample.ranges.size() ? sample.ranges[i] : std::pair{-1.0, 1.0};
    Array value = testing::random_array(rng, t, lo, hi);
    bool no_grad = i < sample.no_grad.size() && sample.no_grad[i];
    std::string name = "x" + std::to_string(i);
    if (with_grad_inputs && is_float(t.dtype) && !no_grad) {
      Tensor p = s.g.parameter(name, t.shape, Init::zeros(), t.dtype);
      s.params.push_back(p);
      s.operands.push_back(p * 1.0);
    } else {
      s.operands.push_back(s.g.input(name, t.shape, t.dtype));
    }
    s.feeds[name] = std::move(value);
  }
  s.out = s.g.apply(d.name, sample.attrs, s.operands);
}

class OpGradCheck : public ::testing::TestWithParam<std::string> {};

TEST_P(OpGradCheck, grad) {
  const OpDef& d = op_def(GetParam());
  if (!d.samples) GTEST_SKIP() << "no samples";
  auto samples = d.samples();
  ASSERT_FALSE(samples.empty()) << d.name << " has an empty sample list";
  for (const OpSample& sample : samples) {
    SCOPED_TRACE(d.name + "/" + sample.label);
    auto rng = testing::rng_for(d.name + "/" + sample.label);
    SampleGraph s;
    build_sample(s, d, sample, rng, d.differentiable);
    auto fwd = reference::evaluate_nodes(s.g, s.feeds, std::vector<NodeId>{s.out.id()});
    ASSERT_EQ(fwd[0].shape, s.out.shape());
    if (!d.differentiable || s.params.empty()) continue;
    ASSERT_TRUE(is_float(s.out.dtype()));

    Array r = testing::random_array(rng, s.out.type(), -1.0, 1.0);
    s.loss = sum(s.out * s.g.constant(r));
    auto grads = gradients(s.loss, s.params);
    std::vector<NodeId> ids;
    for (const Tensor& t : grads) ids.push_back(t.id());
    auto analytic = reference::evaluate_nodes(s.g, s.feeds, ids);

    const NodeId loss_id = s.loss.id();
    auto loss_at = [&](reference::Feeds& f) {
      return reference::evaluate_nodes(s.g, f, std::span<const NodeId>(&loss_id, 1))[0].data[0];
    };
    for (size_t k = 0; k < s.params.size(); ++k) {
      const std::string& name = s.g.node(s.params[k].id()).name;
      Array& x = s.feeds[name];
      Array numeric(x.shape, x.dtype);
      for (size_t e = 0; e < x.data.size(); ++e) {
        const double x0 = x.data[e];
        const double h = 1e-6 * std::max(1.0, std::abs(x0));
        x.data[e] = x0 + h;
        double fp = loss_at(s.feeds);
        x.data[e] = x0 - h;
        double fm = loss_at(s.feeds);
        x.data[e] = x0;
        numeric.data[e] = (fp - fm) / (2 * h);
      }
      double err = testing::relative_error(analytic[k], numeric);
      EXPECT_LE(err, sample.grad_tolerance)
          << "gradient of input " << name << " " << x.type().str();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpGradCheck, ::testing::ValuesIn(public_op_names()),
                         [](const auto& info) { return info.param; });

std::vector<std::string> composite_op_names() {
  std::vector<std::string> names;
  for (const OpDef* d : all_op_defs()) {
    if (d->decompose) names.push_back(d->name);
  }
  if (names.empty()) names.push_back("none");
  return names;
}

class OpDecomposition : public ::testing::TestWithParam<std::string> {};

TEST_P(OpDecomposition, MatchesDirectEvaluation) {
  if (GetParam() == "none") GTEST_SKIP() << "no composite ops registered";
  const OpDef& d = op_def(GetParam());
  for (const OpSample& sample : d.samples()) {
    SCOPED_TRACE(d.name + "/" + sample.label);
    auto rng = testing::rng_for("decompose/" + d.name + "/" + sample.label);
    SampleGraph s;
    build_sample(s, d, sample, rng, false);
    Node node = s.g.node(s.out.id());
    Tensor dec = d.decompose(node, s.operands);
    ASSERT_EQ(dec.type(), s.out.type());
    auto v = reference::evaluate_nodes(s.g, s.feeds, std::vector<NodeId>{s.out.id(), dec.id()});
    EXPECT_LE(testing::relative_error(v[1], v[0]), 1e-9);
    // The decomposition is written in other ops: it must not contain the op itself.
    for (size_t i = static_cast<size_t>(s.out.id()) + 1; i < s.g.size(); ++i) {
      EXPECT_NE(s.g.node(static_cast<NodeId>(i)).op, &d) << "decomposition uses " << d.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpTable, OpDecomposition, ::testing::ValuesIn(composite_op_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mn
