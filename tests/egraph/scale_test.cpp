// Micro-benchmark, not a timed test: insertion rate, and saturation of a 10k-node random DAG
// shaped like a training-step graph (local reuse, a few far edges) under two dozen rules.
// Prints rates; asserts only correctness (invariants, and that the run ended by saturation or
// its iteration budget, not by the clock).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>

#include "egraph/extract.h"
#include "egraph/runner.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(Bench, InsertionRate) {
  std::mt19937 rng(1);
  const int n = 300000;
  EGraph eg;
  std::vector<Id> ids;
  auto t0 = Clock::now();
  std::clock_t c0 = std::clock();
  ids.reserve(n + 64);
  for (int i = 0; i < 64; ++i) ids.push_back(eg.add(0, static_cast<Attr>(i), {}));
  for (int i = 0; i < n; ++i) {
    size_t s = ids.size();
    Id a = ids[s - 1 - rng() % std::min<size_t>(s, 64)];
    Id b = ids[rng() % s];
    OpId op = 1 + rng() % 6;
    ids.push_back(op < 4 ? eg.add(op, 0, {a, b}) : eg.add(op, rng() % 3, {a}));
  }
  double secs = since(t0);
  double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  // CPU time too: on a shared machine the wall clock mostly measures the neighbours.
  std::printf(
      "[ bench    ] inserted %d e-nodes (%zu distinct) in %.3f s wall, %.3f s CPU: %.2f M nodes/s "
      "(CPU)\n",
      n, eg.num_nodes(), secs, cpu, n / cpu / 1e6);
  eg.rebuild();
  EXPECT_EQ(eg.num_classes(), eg.num_nodes());
}

class RandomDag {
 public:
  explicit RandomDag(MathLang& m) : m_(m) {
    for (const char* op : {"neg", "exp", "log", "tr", "relu"}) unary_.push_back(m.ops.intern(op));
    binary_ = {m.add, m.mul, m.sub};
  }

  // A DAG of `n` nodes: mostly operands from the last few dozen nodes (layer-local reuse),
  // sometimes from anywhere (residuals, weights), and some redundancy the rules can remove.
  std::vector<Id> build(EGraph& eg, int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Id> ids;
    ids.reserve(n);
    for (int i = 0; i < 200; ++i) ids.push_back(m_.term(eg, "w" + std::to_string(i)));
    Id zero = m_.constant(eg, Rat{0, 1}), one = m_.constant(eg, Rat{1, 1});
    ids.push_back(zero);
    ids.push_back(one);
    auto pick = [&]() {
      size_t s = ids.size();
      return rng() % 8 == 0 ? ids[rng() % s] : ids[s - 1 - rng() % std::min<size_t>(s, 48)];
    };
    while (eg.num_nodes() < static_cast<size_t>(n)) {
      Id x = pick();
      switch (rng() % 16) {
        case 0:
          x = eg.add(unary_[0], 0, {eg.add(unary_[0], 0, {x})});
          break;  // neg neg
        case 1:
          x = eg.add(unary_[3], 0, {eg.add(unary_[3], 0, {x})});
          break;  // tr tr
        case 2:
          x = eg.add(m_.mul, 0, {x, one});
          break;
        case 3:
          x = eg.add(m_.add, 0, {x, zero});
          break;
        case 4: {
          Id a = pick(), b = pick();
          x = eg.add(m_.add, 0, {eg.add(m_.mul, 0, {x, a}), eg.add(m_.mul, 0, {x, b})});
          break;
        }
        case 5:
          x = eg.add(unary_[2], 0, {eg.add(unary_[1], 0, {x})});
          break;  // log exp
        default:
          if (rng() % 3 == 0)
            x = eg.add(unary_[rng() % unary_.size()], 0, {x});
          else
            x = eg.add(binary_[rng() % binary_.size()], 0, {x, pick()});
      }
      ids.push_back(x);
    }
    return std::vector<Id>(ids.end() - 16, ids.end());
  }

  std::vector<Rewrite> rules() {
    std::vector<Rewrite> rs;
    auto add = [&](const char* name, const char* l, const char* r) {
      rs.push_back(m_.rw(name, l, r));
    };
    add("neg-neg", "(neg (neg ?x))", "?x");
    add("tr-tr", "(tr (tr ?x))", "?x");
    add("mul-one", "(* ?x 1)", "?x");
    add("one-mul", "(* 1 ?x)", "?x");
    add("add-zero", "(+ ?x 0)", "?x");
    add("zero-add", "(+ 0 ?x)", "?x");
    add("mul-zero", "(* ?x 0)", "0");
    add("zero-mul", "(* 0 ?x)", "0");
    add("sub-zero", "(- ?x 0)", "?x");
    add("sub-self", "(- ?x ?x)", "0");
    add("add-neg", "(+ ?x (neg ?x))", "0");
    add("neg-mul-l", "(* (neg ?a) ?b)", "(neg (* ?a ?b))");
    add("neg-mul-r", "(* ?a (neg ?b))", "(neg (* ?a ?b))");
    add("neg-add", "(+ (neg ?a) (neg ?b))", "(neg (+ ?a ?b))");
    add("sub-neg", "(- ?a (neg ?b))", "(+ ?a ?b)");
    add("exp-add", "(* (exp ?a) (exp ?b))", "(exp (+ ?a ?b))");
    add("log-exp", "(log (exp ?x))", "?x");
    add("exp-log", "(exp (log ?x))", "?x");
    add("relu-relu", "(relu (relu ?x))", "(relu ?x)");
    add("tr-add", "(tr (+ ?a ?b))", "(+ (tr ?a) (tr ?b))");
    add("tr-neg", "(tr (neg ?a))", "(neg (tr ?a))");
    add("neg-zero", "(neg 0)", "0");
    return rs;
  }

 private:
  MathLang& m_;
  std::vector<OpId> unary_;
  std::vector<OpId> binary_;
};

TEST(Bench, SaturateTenThousandNodeDag) {
  MathLang m;
  RandomDag dag(m);
  EGraph eg;
  auto t0 = Clock::now();
  std::vector<Id> roots = dag.build(eg, 10000, 42);
  double build = since(t0);
  size_t start_nodes = eg.num_nodes();
  std::vector<Rewrite> rules = dag.rules();
  Runner runner(eg);
  // egg's default match limit (1000) suits small e-graphs; identity rules on a 10k-node graph
  // legitimately match thousands of times, so the limit scales with the graph.
  runner.scheduler(std::make_unique<BackoffScheduler>(20000, 5))
      .limits({.iterations = 100, .nodes = 200000, .seconds = 20});
  std::clock_t c0 = std::clock();
  RunReport r = runner.run(rules);
  double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  std::printf("[ bench    ] built %zu e-nodes in %.4f s (%.2f M nodes/s)\n", start_nodes, build,
              start_nodes / build / 1e6);
  std::printf("[ bench    ] %zu rules: %s", rules.size(), r.summary().c_str());
  double search = 0, apply = 0, rebuild = 0;
  for (const IterationStats& it : r.per_iteration) {
    if (std::getenv("MN_EGRAPH_BENCH_VERBOSE"))
      std::printf("  iteration: %zu nodes %zu classes %zu matches %zu applied %zu merges\n",
                  it.nodes, it.classes, it.matches, it.applied, it.rebuild_merges);
    search += it.search_seconds;
    apply += it.apply_seconds;
    rebuild += it.rebuild_seconds;
  }
  std::printf("[ bench    ] search %.4f s, apply %.4f s, rebuild %.4f s (wall); %.4f s CPU\n",
              search, apply, rebuild, cpu);

  auto t1 = Clock::now();
  NodeCost cost = [](const EGraph&, const ENode& n) { return 1.0 + n.arity(); };
  Extraction greedy = extract_greedy(eg, roots, tree_cost(cost));
  double t_greedy = since(t1);
  auto t2 = Clock::now();
  Extraction dagx = extract_dag(eg, roots, cost);
  double t_dag = since(t2);
  std::printf(
      "[ bench    ] extraction: greedy %.4f s (DAG cost %.0f), dag-aware %.4f s (DAG cost %.0f), "
      "%zu classes chosen\n",
      t_greedy, dag_cost(eg, greedy, cost), t_dag, dagx.cost, dagx.order.size());

  EXPECT_TRUE(r.stop_reason == StopReason::saturated ||
              r.stop_reason == StopReason::iteration_limit)
      << r.summary();
  EXPECT_LE(dagx.cost, dag_cost(eg, greedy, cost));
  eg.check_invariants();
}

}  // namespace
}  // namespace mn::egraph::test
