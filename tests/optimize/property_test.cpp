// Property: on hundreds of random graphs (support/random_graph.h: elementwise ops with
// broadcasting, reductions, matmul with transposes, shape ops, constants, identities the rules
// remove), the optimized graph evaluates like the original on the reference.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include <meganeura/graph.h>

#include "optimize/optimize.h"
#include "optimize_test_util.h"
#include "support/random_graph.h"

namespace mn::optimize {
namespace {

using testing::RandomGraph;

TEST(OptimizeProperty, RandomGraphsEvaluateLikeTheOriginal) {
  constexpr int kGraphs = 400;
  size_t rewrites = 0, shrunk = 0;
  std::map<std::string, size_t> ops;  // how often each op appears: the generator's coverage
  for (int i = 0; i < kGraphs; ++i) {
    RandomGraph rg(1000 + static_cast<uint64_t>(i));
    rg.build();
    const Graph& g = rg.graph();
    for (const Node& n : g.nodes()) ++ops[std::string(n.op_name())];
    OptimizeResult r = optimize(g);
    ASSERT_NE(r.report.stop_reason, "") << i;
    // Small graphs saturate: a budget stop here means some rule pair grows without end.
    EXPECT_EQ(r.report.stop_reason, "saturated") << "graph " << i << "\n" << g.str();
    for (const RuleFired& f : r.report.rules) rewrites += f.count;
    shrunk += r.report.nodes_after < r.report.nodes_before;
    auto rng = testing::rng_for("property" + std::to_string(i));
    const double err = testing::step_difference(g, r.graph, testing::random_feeds(g, rng));
    ASSERT_LE(err, 1e-9) << "graph " << i << "\n" << g.str() << "-> \n" << r.graph.str();
  }
  for (const char* op :
       {"add",       "sub",     "mul",          "div",       "maximum",  "neg",
        "abs",       "relu",    "tanh",         "sigmoid",   "exp",      "sum",
        "mean",      "max",     "matmul",       "transpose", "permute",  "reshape",
        "unsqueeze", "squeeze", "broadcast_to", "slice",     "concat",   "sum_to",
        "where",     "gt",      "le",           "cast",      "constant", "state"}) {
    EXPECT_GT(ops[op], 10u) << op;
  }
  // The graphs are full of removable identities: most must get smaller.
  EXPECT_GT(shrunk, kGraphs / 2);
  EXPECT_GT(rewrites, static_cast<size_t>(kGraphs));
  std::printf("%d graphs: %zu rewrites, %zu smaller\n", kGraphs, rewrites, shrunk);
}

// Longer chains give the rules more to interact with (constant chains across identities,
// views of views of reductions...): still saturating, still equal.
TEST(OptimizeProperty, LongerRandomGraphs) {
  constexpr int kGraphs = 40;
  size_t nodes = 0, rewrites = 0;
  for (int i = 0; i < kGraphs; ++i) {
    RandomGraph rg(5000 + static_cast<uint64_t>(i), {.min_steps = 40, .max_steps = 90});
    rg.build();
    const Graph& g = rg.graph();
    OptimizeResult r = optimize(g);
    nodes += r.report.nodes_before;
    for (const RuleFired& f : r.report.rules) rewrites += f.count;
    EXPECT_EQ(r.report.stop_reason, "saturated") << "graph " << i;
    auto rng = testing::rng_for("long" + std::to_string(i));
    const double err = testing::step_difference(g, r.graph, testing::random_feeds(g, rng));
    ASSERT_LE(err, 1e-9) << "graph " << i << "\n" << g.str() << "-> \n" << r.graph.str();
  }
  EXPECT_GT(nodes, static_cast<size_t>(kGraphs) * 40);
  std::printf("%d longer graphs: %zu compute nodes, %zu rewrites\n", kGraphs, nodes, rewrites);
}

}  // namespace
}  // namespace mn::optimize
