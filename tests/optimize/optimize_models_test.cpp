// The optimizer on whole training steps: the built-in classifiers stay numerically identical on
// the reference, and big graphs (a 30-layer MLP, a transformer) are optimized fast. The timing
// test prints its numbers and asserts only correctness of the result.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>

#include "optimize/optimize.h"
#include "optimize_test_util.h"

namespace mn::optimize {
namespace {

void print_report(const char* what, const Graph& g, const OptimizeReport& r) {
  std::printf(
      "%s: %zu graph nodes, %zu -> %zu compute nodes, %zu e-classes, %zu e-nodes, %zu "
      "iterations (%s), %.3f s (%.0f e-nodes/s), bytes %.3g -> %.3g, flops %.3g -> %.3g\n",
      what, g.size(), r.nodes_before, r.nodes_after, r.eclasses, r.enodes, r.iterations,
      r.stop_reason.c_str(), r.seconds, static_cast<double>(r.enodes) / r.seconds, r.bytes_before,
      r.bytes_after, r.flops_before, r.flops_after);
  std::printf("  rules:");
  for (size_t i = 0; i < r.rules.size() && i < 12; ++i)
    std::printf(" %s×%zu", r.rules[i].name.c_str(), r.rules[i].count);
  std::printf("\n");
}

TEST(OptimizeModels, ClassifierTrainingStepsStayIdentical) {
  for (ModelKind kind : {ModelKind::mlp, ModelKind::cnn}) {
    for (const Optimizer& opt : {Optimizer::sgd({.momentum = 0.9}), Optimizer::adamw()}) {
      ClassifierSpec spec;
      spec.kind = kind;
      spec.batch = 4;
      spec.hidden = {16, 8};
      Classifier c = build_classifier(spec);
      add_training_step(c.loss, opt);
      const Graph& g = *c.graph;
      OptimizeResult r = optimize(g);
      SCOPED_TRACE(std::string(model_name(kind)) + " " + optimizer_name(opt.kind));
      print_report(model_name(kind), g, r.report);
      EXPECT_EQ(r.report.stop_reason, "saturated");
      EXPECT_LE(r.report.nodes_after, r.report.nodes_before);
      EXPECT_LE(r.report.bytes_after, r.report.bytes_before);
      EXPECT_FALSE(r.report.rules.empty());
      EXPECT_EQ(r.graph.outputs().size(), g.outputs().size());
      EXPECT_EQ(r.graph.assignments().size(), g.assignments().size());
      EXPECT_EQ(r.graph.parameters().size(), g.parameters().size());
      EXPECT_EQ(r.graph.states().size(), g.states().size());
      auto rng = testing::rng_for(model_name(kind));
      auto feeds = testing::random_feeds(g, rng, spec.classes);
      for (const auto& [n, v] : step_scalars(opt, 1e-2, 3)) feeds[n] = Array::scalar(v);
      // Folded constants are stored in f32 (1 - β₁ becomes 0.1f rather than 1 - 0.9f in
      // double), so agreement is to f32 rounding of a few constants.
      EXPECT_LE(testing::step_difference(g, r.graph, feeds), 1e-6);
    }
  }
}

TEST(OptimizeModels, DisabledReturnsTheGraphUnchanged) {
  ClassifierSpec spec;
  spec.batch = 2;
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, Optimizer::adam());
  OptimizeOptions o;
  o.enabled = false;
  OptimizeResult r = optimize(*c.graph, o);
  EXPECT_EQ(r.report.stop_reason, "disabled");
  EXPECT_EQ(r.graph.hash(), c.graph->hash());
}

// Speed on big graphs (printed, never asserted: the target is <= 1 s for a transformer
// training step on a 2-core machine).
TEST(OptimizeModels, LargeTrainingGraphs) {
  {
    ClassifierSpec spec;
    spec.batch = 8;
    spec.hidden = std::vector<int64_t>(30, 32);
    Classifier c = build_classifier(spec);
    add_training_step(c.loss, Optimizer::adam());
    OptimizeResult r = optimize(*c.graph);
    print_report("mlp-30 adam", *c.graph, r.report);
    EXPECT_EQ(r.report.stop_reason, "saturated");
    EXPECT_LE(r.report.nodes_after, r.report.nodes_before);
  }
  {
    // SmolLM2-135M's shape: 30 layers, forward + backward + AdamW, ~17k nodes. Building and
    // optimizing allocate no tensor data, so the full size is cheap here.
    TransformerSpec spec = smollm2_135m();
    LanguageModel lm = build_transformer(spec);
    add_training_step(lm.loss, Optimizer::adamw());
    OptimizeResult r = optimize(*lm.graph);
    print_report("smollm2-135m adamw", *lm.graph, r.report);
    EXPECT_EQ(r.report.stop_reason, "saturated");
    EXPECT_LE(r.report.nodes_after, r.report.nodes_before);
  }
}

}  // namespace
}  // namespace mn::optimize
