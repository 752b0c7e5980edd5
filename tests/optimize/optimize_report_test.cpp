// The report and the budgets of optimize(): a run cut short by any budget still returns a
// correct graph, and the report says why it stopped.
#include <gtest/gtest.h>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>

#include "optimize/optimize.h"
#include "optimize_test_util.h"

namespace mn::optimize {
namespace {

Classifier training_step() {
  ClassifierSpec spec;
  spec.batch = 4;
  spec.hidden = {16, 16};
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, Optimizer::adamw());
  return c;
}

double difference(const Graph& a, const Graph& b) {
  auto rng = testing::rng_for("report");
  auto feeds = testing::random_feeds(a, rng, 10);
  for (const auto& [n, v] : step_scalars(Optimizer::adamw(), 1e-2, 2)) feeds[n] = Array::scalar(v);
  return testing::step_difference(a, b, feeds);
}

TEST(OptimizeReport, FieldsDescribeTheRun) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor y = g.apply("mul", {}, {g.apply("neg", {}, {g.apply("neg", {}, {x})}), g.scalar(1.0)});
  g.output("y", exp(y));
  OptimizeResult r = optimize(g);
  const OptimizeReport& rep = r.report;
  EXPECT_EQ(rep.stop_reason, "saturated");
  EXPECT_GE(rep.iterations, 1u);
  EXPECT_GE(rep.enodes, rep.eclasses);
  EXPECT_GT(rep.eclasses, 0u);
  EXPECT_GT(rep.seconds, 0);
  EXPECT_EQ(rep.nodes_before, 4u);
  EXPECT_EQ(rep.nodes_after, 1u);
  EXPECT_DOUBLE_EQ(rep.bytes_after, 2 * 4 * 32);  // exp reads and writes 32 floats
  EXPECT_GT(rep.bytes_before, rep.bytes_after);
  EXPECT_DOUBLE_EQ(rep.flops_after, 8 * 32);
  ASSERT_FALSE(rep.rules.empty());
  for (size_t i = 1; i < rep.rules.size(); ++i)
    EXPECT_GE(rep.rules[i - 1].count, rep.rules[i].count);
  EXPECT_EQ(rep.dispatches_before, 0u);  // the planner's to fill
}

TEST(OptimizeReport, BudgetsStopEarlyAndStayCorrect) {
  Classifier c = training_step();
  const Graph& g = *c.graph;
  struct Budget {
    const char* reason;
    OptimizeOptions options;
  };
  OptimizeOptions nodes, iterations, time;
  nodes.max_enodes = 10;
  iterations.max_iterations = 1;
  time.max_seconds = 0;
  for (const Budget& b : {Budget{"node limit", nodes}, Budget{"iteration limit", iterations},
                          Budget{"time limit", time}}) {
    OptimizeResult r = optimize(g, b.options);
    EXPECT_EQ(r.report.stop_reason, b.reason);
    EXPECT_LE(difference(g, r.graph), 1e-6) << b.reason;
  }
}

TEST(OptimizeReport, OutputsMayBeSourcesAndSharedValues) {
  Graph g;
  Tensor x = g.input("x", {3});
  Tensor p = g.parameter("p", {3}, Init::ones());
  Tensor unused_input = g.input("unused", {2});
  (void)unused_input;
  g.output("p", p);                                          // a parameter read back as it was
  g.output("same", g.apply("mul", {}, {x, g.scalar(1.0)}));  // simplifies to the input itself
  g.assign(p, g.apply("add", {}, {p, g.scalar(0.0)}));       // assigns the parameter to itself
  OptimizeResult r = optimize(g);
  EXPECT_EQ(r.graph.inputs().size(), 2u);
  EXPECT_EQ(r.report.nodes_after, 0u);
  auto rng = testing::rng_for("sources");
  EXPECT_EQ(testing::step_difference(g, r.graph, testing::random_feeds(g, rng)), 0.0);
}

}  // namespace
}  // namespace mn::optimize
