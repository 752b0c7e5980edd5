// The conformance harness: every op of the op table, on every sample the table gives it, runs
// on the GPU (lavapipe in CI) and must match the CPU reference — forward values, and the
// gradients of every float input through the op's backward ops.
#include <gtest/gtest.h>

#include <meganeura/autodiff.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "ir/op_def.h"
#include "schedule/lowering.h"
#include "support/conditioning.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const OpDef* d : all_op_defs()) {
    if (d->archetype != Archetype::source) names.push_back(d->name);
  }
  return names;
}

// Storage precision bounds the agreement: f32 kernels against a float64 reference, and the
// rounding of 16-bit storage on top where the graph holds f16 or bf16 tensors.
double tolerance_for(const Graph& g) {
  double tol = testing::storage_tolerance(DType::f32);
  for (const Node& n : g.nodes()) tol = std::max(tol, testing::storage_tolerance(n.type.dtype));
  return tol;
}

struct Case {
  Graph g;
  reference::Feeds feeds;
  Tensor out;
  std::vector<Tensor> float_inputs;
};

void build(Case& c, const OpDef& d, const OpSample& s, std::mt19937_64& rng) {
  std::vector<Tensor> operands;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    auto [lo, hi] = i < s.ranges.size() ? s.ranges[i] : std::pair{-1.0, 1.0};
    std::string name = "x" + std::to_string(i);
    Tensor t = c.g.input(name, s.inputs[i].shape, s.inputs[i].dtype);
    c.feeds[name] = testing::random_array(rng, s.inputs[i], lo, hi);
    bool no_grad = i < s.no_grad.size() && s.no_grad[i];
    if (is_float(s.inputs[i].dtype) && !no_grad) c.float_inputs.push_back(t);
    operands.push_back(t);
  }
  c.out = c.g.apply(d.name, s.attrs, operands);
}

void run_and_compare(const Graph& g, const reference::Feeds& feeds, const std::string& what) {
  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  auto want = reference::evaluate(g, feeds);
  // Elements that cancel (gradients of normalizations, sums over a batch) are measured against
  // the size of their terms.
  const auto terms = testing::conditioning(g, feeds);
  const double tol = tolerance_for(g);
  for (const auto& [name, expected] : want) {
    Array got = session->get(name);
    ASSERT_EQ(got.shape, expected.shape) << what << " " << name;
    // The reference is exact; round it to the output's storage type before comparing.
    Array rounded = expected;
    for (double& v : rounded.data) v = round_to_dtype(v, expected.dtype);
    EXPECT_TRUE(testing::elementwise_near(got, rounded, tol, terms.at(name)))
        << what << " output " << name;
  }
}

class GpuOp : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuOp, forward) {
  const OpDef& d = op_def(GetParam());
  ASSERT_TRUE(schedule::has_gpu_lowering(d.name)) << d.name << " cannot run on the GPU";
  ASSERT_TRUE(static_cast<bool>(d.samples));
  for (const OpSample& s : d.samples()) {
    SCOPED_TRACE(d.name + "/" + s.label);
    auto rng = testing::rng_for("gpu/" + d.name + "/" + s.label);
    Case c;
    build(c, d, s, rng);
    c.g.output("out", c.out);
    run_and_compare(c.g, c.feeds, d.name + "/" + s.label);
  }
}

TEST_P(GpuOp, grad) {
  const OpDef& d = op_def(GetParam());
  if (!d.differentiable) GTEST_SKIP() << "not differentiable";
  for (const OpSample& s : d.samples()) {
    SCOPED_TRACE(d.name + "/" + s.label);
    auto rng = testing::rng_for("gpu-grad/" + d.name + "/" + s.label);
    Case c;
    build(c, d, s, rng);
    if (c.float_inputs.empty() || !is_float(c.out.dtype())) continue;
    Array r = testing::random_array(rng, c.out.type(), -1.0, 1.0);
    Tensor loss = sum(c.out * c.g.constant(r));
    auto grads = gradients(loss, c.float_inputs);
    for (size_t i = 0; i < grads.size(); ++i) c.g.output("grad" + std::to_string(i), grads[i]);
    run_and_compare(c.g, c.feeds, d.name + "/" + s.label + " gradients");
  }
}

INSTANTIATE_TEST_SUITE_P(Conformance, GpuOp, ::testing::ValuesIn(op_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mn
