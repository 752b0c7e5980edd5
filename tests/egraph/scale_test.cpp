// The e-graph at the scale of a training step's graph, against oracles: hash-consing of 300k
// insertions (a map of the nodes inserted says which must come back as the same class), and
// saturation of a 10k-node random DAG shaped like a training-step graph (local reuse, a few far
// edges, redundancy planted for two dozen rules to remove): the extracted DAG costs less than
// the one built, DAG-aware extraction no more than greedy, and the run ends by saturation or
// its iteration budget. Timings belong to bench/optimize.cpp, not here.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "egraph/extract.h"
#include "egraph/runner.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

TEST(Scale, HashConsingOfThreeHundredThousandNodes) {
  std::mt19937 rng(1);
  const int n = 300000;
  EGraph eg;
  std::vector<Id> ids;
  // (op, attribute, children) -> the id its first insertion returned.
  std::map<std::tuple<OpId, Attr, std::vector<Id>>, Id> seen;
  std::set<Id> classes;
  ids.reserve(n + 64);
  auto insert = [&](OpId op, Attr attr, std::vector<Id> children) {
    const Id id = eg.add(op, attr, children);
    const auto [it, fresh] = seen.emplace(std::tuple{op, attr, std::move(children)}, id);
    if (fresh) {
      EXPECT_TRUE(classes.insert(id).second) << "a new node got an existing class";
    } else {
      EXPECT_EQ(id, it->second) << "a repeated node got a new class";
    }
    ids.push_back(id);
  };
  for (int i = 0; i < 64; ++i) insert(0, static_cast<Attr>(i), {});
  int repeats = 0;
  for (int i = 0; i < n; ++i) {
    const size_t s = ids.size();
    const Id a = ids[s - 1 - rng() % std::min<size_t>(s, 64)];
    const Id b = ids[rng() % s];
    const OpId op = 1 + rng() % 6;
    const size_t before = seen.size();
    if (op < 4) {
      insert(op, 0, {a, b});
    } else {
      insert(op, static_cast<Attr>(rng() % 3), {a});
    }
    repeats += seen.size() == before;
  }
  EXPECT_GT(repeats, 1000);  // the stream repeats nodes, so hash-consing is exercised
  EXPECT_EQ(eg.num_nodes(), seen.size());
  eg.rebuild();
  EXPECT_EQ(eg.num_classes(), eg.num_nodes());  // nothing was merged
  eg.check_invariants();
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

TEST(Scale, SaturatingATenThousandNodeDagRemovesItsRedundancy) {
  MathLang m;
  RandomDag dag(m);
  EGraph eg;
  const std::vector<Id> roots = dag.build(eg, 10000, 42);
  eg.rebuild();
  const NodeCost cost = [](const EGraph&, const ENode& n) { return 1.0 + n.arity(); };
  const double built = extract_dag(eg, roots, cost).cost;
  const std::vector<Rewrite> rules = dag.rules();
  Runner runner(eg);
  // egg's default match limit (1000) suits small e-graphs; identity rules on a 10k-node graph
  // legitimately match thousands of times, so the limit scales with the graph. No time limit:
  // the outcome must not depend on the machine's load.
  runner.scheduler(std::make_unique<BackoffScheduler>(20000, 5))
      .limits({.iterations = 100, .nodes = 200000, .seconds = 1e9});
  const RunReport r = runner.run(rules);
  EXPECT_TRUE(r.stop_reason == StopReason::saturated ||
              r.stop_reason == StopReason::iteration_limit)
      << r.summary();
  const Extraction greedy = extract_greedy(eg, roots, tree_cost(cost));
  const Extraction dagx = extract_dag(eg, roots, cost);
  EXPECT_LT(dagx.cost, built) << "the planted redundancy was not removed";
  EXPECT_LE(dagx.cost, dag_cost(eg, greedy, cost));
  eg.check_invariants();
}

}  // namespace
}  // namespace mn::egraph::test
