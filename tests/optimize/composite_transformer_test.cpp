// The composite rules on the built-in transformer (written in primitive ops): every RMSNorm,
// attention, softmax and SwiGLU gate is recognized, in the forward graph and in a whole training
// step (forward + backward, ~10k nodes at 30 layers), within the optimizer's time budget.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/models.h>

#include "composite_test_util.h"
#include "ir/ops/nn.h"
#include "optimize/optimize.h"
#include "support/small_transformer.h"

namespace mn::testing {
namespace {

TransformerSpec small_spec(int64_t layers) { return small_transformer(layers, 32, 64, 8, 0); }

// The training step's differentiable part: the loss and every parameter's gradient as outputs.
void add_gradients(LanguageModel& m) {
  Graph& g = *m.graph;
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  std::vector<Tensor> grads = gradients(m.loss, params);
  for (size_t i = 0; i < grads.size(); ++i) g.output("grad" + std::to_string(i), grads[i]);
}

size_t count_in_egraph(const optimize::TensorEGraph& teg, std::string_view op) {
  return teg.egraph().nodes_with_op(teg.op(op)).size();
}
// RMSNorms with their gain: the one the model writes (the plain x * rsqrt(...) inside it is
// recognized too, as rms_norm without gamma).
size_t count_rms_norm_with_gamma(const optimize::TensorEGraph& teg) {
  size_t n = 0;
  for (egraph::Id id : teg.egraph().nodes_with_op(teg.op("rms_norm"))) {
    n += teg.attrs_as<RmsNormAttrs>(teg.egraph().node(id).attr()).has_gamma ? 1 : 0;
  }
  return n;
}

TEST(CompositeTransformer, ForwardCompositesRecognizedAndExtracted) {
  const int64_t layers = 3;
  LanguageModel m = build_transformer(small_spec(layers));
  auto run = run_composite_rules(*m.graph);
  EXPECT_EQ(count_rms_norm_with_gamma(run->teg), static_cast<size_t>(2 * layers + 1));
  EXPECT_EQ(count_in_egraph(run->teg, "scaled_dot_product_attention"), static_cast<size_t>(layers));
  EXPECT_EQ(count_in_egraph(run->teg, "silu"), static_cast<size_t>(layers));
  EXPECT_GE(count_in_egraph(run->teg, "softmax"), static_cast<size_t>(layers));
  EXPECT_EQ(count_in_egraph(run->teg, "log_softmax"), 1u);
  EXPECT_EQ(count_in_egraph(run->teg, "rope"), static_cast<size_t>(2 * layers));  // q and k

  Graph out = run->extract(*m.graph, /*prefer_composites=*/true);
  EXPECT_EQ(count_op(out, "rms_norm"), static_cast<size_t>(2 * layers + 1));
  EXPECT_EQ(count_op(out, "scaled_dot_product_attention"), static_cast<size_t>(layers));
  EXPECT_EQ(count_op(out, "silu"), static_cast<size_t>(layers));
  EXPECT_EQ(count_op(out, "exp"), 0u) << out.str();
  std::mt19937_64 rng(3);
  reference::Feeds feeds = random_feeds(*m.graph, rng, 64);
  EXPECT_LT(step_difference(*m.graph, out, feeds), 1e-5);
}

TEST(CompositeTransformer, TrainingStepAtThirtyLayersIsCheap) {
  const int64_t layers = 30;
  LanguageModel m = build_transformer(small_spec(layers));
  add_gradients(m);
  const size_t nodes = m.graph->size();

  const auto t0 = std::chrono::steady_clock::now();
  optimize::TensorEGraph teg;
  optimize::GraphRoots roots = teg.add_graph(*m.graph);
  teg.egraph().rebuild();
  const size_t enodes_before = teg.egraph().num_nodes();
  std::vector<egraph::Rewrite> rules = optimize::composite_rules(teg);
  const auto t1 = std::chrono::steady_clock::now();
  egraph::Runner runner(teg.egraph());
  // No time limit: saturation, asserted below, must not depend on the machine's load.
  runner.limits({.iterations = 30, .nodes = 2'000'000, .seconds = 1e9});
  runner.scheduler(std::make_unique<egraph::BackoffScheduler>(
      std::max<size_t>(1000, 2 * teg.egraph().num_nodes()), 2));
  egraph::RunReport report = runner.run(rules);
  const auto t2 = std::chrono::steady_clock::now();

  EXPECT_EQ(count_rms_norm_with_gamma(teg), static_cast<size_t>(2 * layers + 1));
  EXPECT_EQ(count_in_egraph(teg, "scaled_dot_product_attention"), static_cast<size_t>(layers));
  EXPECT_EQ(count_in_egraph(teg, "log_softmax"), 1u);
  EXPECT_EQ(count_in_egraph(teg, "rope"), static_cast<size_t>(2 * layers));
  // The rotary embeddings' backward passes, as autodiff wrote them.
  EXPECT_EQ(count_in_egraph(teg, "rope_backward"), static_cast<size_t>(2 * layers));
  EXPECT_GE(count_in_egraph(teg, "silu"), static_cast<size_t>(layers));
  EXPECT_EQ(report.stop_reason, egraph::StopReason::saturated);

  const double build_s = std::chrono::duration<double>(t1 - t0).count();
  const double run_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "training step, %lld layers: %zu graph nodes, %zu -> %zu e-nodes; e-graph + rules %.3f s, "
      "composite saturation %.3f s in %zu iterations\n",
      static_cast<long long>(layers), nodes, enodes_before, teg.egraph().num_nodes(), build_s,
      run_s, report.iterations);
  // The whole optimizer on the same step, for comparison (its budget is the optimizer's).
  optimize::OptimizeResult full = optimize::optimize(*m.graph);
  std::printf(
      "optimize(): %s, %zu iterations, %.3f s, %zu e-nodes; rms_norm %zu, attention %zu, "
      "silu %zu, rope %zu\n",
      full.report.stop_reason.c_str(), full.report.iterations, full.report.seconds,
      full.report.enodes, count_op(full.graph, "rms_norm"),
      count_op(full.graph, "scaled_dot_product_attention"), count_op(full.graph, "silu"),
      count_op(full.graph, "rope"));
  for (const auto& r : report.rules) {
    if (r.applied > 0 || r.search_seconds + r.apply_seconds > 0.01) {
      std::printf("  %-40s applied %6zu  search %.3f s  apply %.3f s\n", r.name.c_str(), r.applied,
                  r.search_seconds, r.apply_seconds);
    }
  }
}

// The whole optimizer (algebra and composite rules, cost-model extraction) on the forward graph
// of two layers: the composites come out, and the values stay.
TEST(CompositeTransformer, OptimizeKeepsValues) {
  LanguageModel m = build_transformer(small_spec(2));
  optimize::OptimizeResult r = optimize::optimize(*m.graph);
  std::printf(
      "optimize(): %s, %zu iterations, %.3f s; rms_norm %zu, attention %zu, silu %zu, "
      "softmax %zu, log_softmax %zu, exp %zu\n",
      r.report.stop_reason.c_str(), r.report.iterations, r.report.seconds,
      count_op(r.graph, "rms_norm"), count_op(r.graph, "scaled_dot_product_attention"),
      count_op(r.graph, "silu"), count_op(r.graph, "softmax"), count_op(r.graph, "log_softmax"),
      count_op(r.graph, "exp"));
  EXPECT_EQ(count_op(r.graph, "rms_norm"), 5u);
  EXPECT_EQ(count_op(r.graph, "scaled_dot_product_attention"), 2u);
  EXPECT_EQ(count_op(r.graph, "silu"), 2u);
  EXPECT_EQ(count_op(r.graph, "exp"), 0u);
  std::mt19937_64 rng(5);
  reference::Feeds feeds = random_feeds(*m.graph, rng, 64);
  EXPECT_LT(step_difference(*m.graph, r.graph, feeds), 1e-5);
}

// The training step's gradients through the whole optimizer: each rotary embedding's backward
// pass (slices, a negation, pads and adds as autodiff writes them) comes out as one
// rope_backward, and every gradient keeps its value.
TEST(CompositeTransformer, TrainingStepRopeBackwardKeepsValues) {
  LanguageModel m = build_transformer(small_spec(2));
  add_gradients(m);
  optimize::OptimizeResult r = optimize::optimize(*m.graph);
  EXPECT_EQ(count_op(r.graph, "rope_backward"), 4u);
  EXPECT_EQ(count_op(r.graph, "pad"), 0u);
  std::mt19937_64 rng(7);
  reference::Feeds feeds = random_feeds(*m.graph, rng, 64);
  EXPECT_LT(step_difference(*m.graph, r.graph, feeds), 1e-5);
}

// Forms the composite rules alone do not match, found with the algebra's help inside
// optimize(): k transposed by an op (folded into the matmul's flag), constants on the left.
TEST(CompositeTransformer, OptimizeRecognizesWithAlgebraHelp) {
  Graph g;
  Tensor q = g.input("q", {2, 4, 16, 8});
  Tensor k = g.input("k", {2, 4, 16, 8});
  Tensor v = g.input("v", {2, 4, 16, 8});
  Tensor qg = reshape(q, {2, 4, 1, 16, 8});
  Tensor kg = reshape(k, {2, 4, 1, 16, 8});
  Tensor vg = reshape(v, {2, 4, 1, 16, 8});
  Tensor s = matmul(qg, transpose(kg)) / sqrt(g.scalar(8.0));
  Tensor e = exp(s - max(s, {-1}, true));
  g.output("y", reshape(matmul(e / sum(e, {-1}, true), vg), {2, 4, 16, 8}));
  optimize::OptimizeResult r = optimize::optimize(g);
  EXPECT_EQ(count_op(r.graph, "scaled_dot_product_attention"), 1u) << r.graph.str();
  EXPECT_LT(eval_difference(g, r.graph), 1e-5);
}

}  // namespace
}  // namespace mn::testing
