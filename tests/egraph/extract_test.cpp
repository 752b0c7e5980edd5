// Extraction: greedy tree cost picks the cheapest tree; DAG-aware extraction pays a shared
// sub-term once and so can prefer a node that tree cost rejects; results are well-formed DAGs.
#include <gtest/gtest.h>

#include <random>

#include "egraph/extract.h"
#include "egraph/term.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

std::string text(MathLang& m, const EGraph& eg, const Extraction& ex, size_t root = 0) {
  Term t = Term::from(eg, ex);
  return t.to_string(t.roots[root], [&](OpId op, Attr a) { return m.head(op, a); });
}

// Every reachable class has a chosen node of its own, and its children come earlier in order.
void expect_well_formed(const EGraph& eg, const Extraction& ex) {
  std::vector<bool> seen(eg.num_ids(), false);
  for (Id cls : ex.order) {
    Id n = ex.choice[cls];
    ASSERT_NE(n, no_id);
    ASSERT_EQ(eg.find(n), cls);
    ASSERT_TRUE(eg.is_live(n));
    for (Id ch : eg.node(n).children()) ASSERT_TRUE(seen[ch]) << "child after parent";
    seen[cls] = true;
  }
  for (Id r : ex.roots) EXPECT_TRUE(seen[r]);
  size_t chosen = 0;
  for (Id c : ex.choice) chosen += c != no_id;
  EXPECT_EQ(chosen, ex.order.size()) << "choices only for reachable classes";
}

TEST(Extract, GreedyPicksTheCheapestTree) {
  MathLang m;
  EGraph eg;
  Id root = m.term(eg, "(+ (* x 2) (* x 2))");
  eg.merge(m.term(eg, "(* x 2)"), m.term(eg, "(<< x 1)"));
  eg.merge(root, m.term(eg, "(* (* x 2) 2)"));
  eg.rebuild();
  auto costs = [&](double mul, double add) {
    return tree_cost([&m, mul, add](const EGraph&, const ENode& n) {
      return n.op() == m.mul ? mul : n.op() == m.add ? add : 1.0;
    });
  };
  Id roots[] = {root};
  // (<< x 1) = 3 beats (* x 2) = 7; then (+ A A) = 2 + 3 + 3 = 8 beats (* A 2) = 5 + 3 + 1 = 9.
  Extraction ex = extract_greedy(eg, roots, costs(5, 2));
  expect_well_formed(eg, ex);
  EXPECT_EQ(text(m, eg, ex), "(+ (<< x 1) (<< x 1))");
  EXPECT_DOUBLE_EQ(ex.cost, 8.0);
  // A dearer add flips the root: (+ A A) = 10 > (* A 2) = 9.
  Extraction ex2 = extract_greedy(eg, roots, costs(5, 4));
  EXPECT_EQ(text(m, eg, ex2), "(* (<< x 1) 2)");
  EXPECT_DOUBLE_EQ(ex2.cost, 9.0);
}

// Root h(X, Y). X is either the leaf `big` (cost 5) or f(T); Y is k(T); T costs 10.
// Tree cost: f(T) = 11 > 5, so greedy takes `big`: DAG cost h + big + k + T = 1 + 5 + 1 + 10 = 17.
// DAG cost: f(T) reuses the T that Y pays for anyway: h + f + k + T = 13.
TEST(Extract, DagExtractionCountsASharedSubtermOnce) {
  MathLang m;
  EGraph eg;
  Id root = m.term(eg, "(h (f t) (k t))");
  Id x = m.term(eg, "(f t)");
  eg.merge(x, m.term(eg, "big"));
  eg.rebuild();
  NodeCost cost = [&](const EGraph&, const ENode& n) {
    std::string_view name = m.ops.name(n.op());
    return name == "t" ? 10.0 : name == "big" ? 5.0 : 1.0;
  };
  Id roots[] = {root};
  Extraction greedy = extract_greedy(eg, roots, tree_cost(cost));
  EXPECT_EQ(text(m, eg, greedy), "(h big (k t))");
  EXPECT_DOUBLE_EQ(greedy.cost, 17.0);
  EXPECT_DOUBLE_EQ(dag_cost(eg, greedy, cost), 17.0);

  Extraction dag = extract_dag(eg, roots, cost);
  expect_well_formed(eg, dag);
  EXPECT_EQ(text(m, eg, dag), "(h (f t) (k t))");
  EXPECT_DOUBLE_EQ(dag.cost, 13.0);
  Term t = Term::from(eg, dag);
  EXPECT_EQ(t.nodes.size(), 4u) << "t appears once in the DAG";
}

// Two roots sharing a sub-term: the second root's cheapest tree ignores what the first pays for.
TEST(Extract, DagExtractionSharesAcrossRoots) {
  MathLang m;
  EGraph eg;
  Id r1 = m.term(eg, "(exp w)");
  Id r2 = m.term(eg, "(g (exp w))");
  eg.merge(r2, m.term(eg, "cheap"));
  eg.rebuild();
  NodeCost cost = [&](const EGraph&, const ENode& n) {
    std::string_view name = m.ops.name(n.op());
    return name == "exp" ? 20.0 : name == "cheap" ? 3.0 : 1.0;
  };
  Id roots[] = {r1, r2};
  Extraction greedy = extract_greedy(eg, roots, tree_cost(cost));
  EXPECT_EQ(text(m, eg, greedy, 1), "cheap");
  Extraction dag = extract_dag(eg, roots, cost);
  EXPECT_EQ(text(m, eg, dag, 1), "(g (exp w))");
  EXPECT_DOUBLE_EQ(dag.cost, 22.0);
  EXPECT_DOUBLE_EQ(dag_cost(eg, greedy, cost), 24.0);
}

TEST(Extract, UnextractableRootsAndBadInputAreErrors) {
  MathLang m;
  EGraph eg;
  Id bad = m.term(eg, "(bad x)");
  Id ok = m.term(eg, "(ok x)");
  eg.rebuild();
  auto cost = tree_cost([&](const EGraph&, const ENode& n) {
    return m.ops.name(n.op()) == "bad" ? std::numeric_limits<double>::infinity() : 1.0;
  });
  Id bad_roots[] = {bad};
  EXPECT_THROW(extract_greedy(eg, bad_roots, cost), Error);
  Id ok_roots[] = {ok};
  EXPECT_NO_THROW(extract_greedy(eg, ok_roots, cost));
  Id out_of_range[] = {12345};
  EXPECT_THROW(extract_greedy(eg, out_of_range, cost), Error);
  eg.merge(bad, ok);
  EXPECT_THROW(extract_greedy(eg, ok_roots, cost), Error) << "needs a rebuilt e-graph";
}

TEST(Extract, CyclicClassesStillExtractTheirAcyclicTerm) {
  MathLang m;
  EGraph eg;
  Id x = m.term(eg, "x");
  Id fx = m.term(eg, "(f x)");
  eg.merge(x, fx);  // x = f(x): the class holds a cycle
  Id root = m.term(eg, "(g (f (f x)))");
  eg.rebuild();
  Id roots[] = {root};
  Extraction ex = extract_greedy(eg, roots, ast_size());
  EXPECT_EQ(text(m, eg, ex), "(g x)");
  Extraction dag = extract_dag(eg, roots, [](const EGraph&, const ENode&) { return 1.0; });
  EXPECT_EQ(text(m, eg, dag), "(g x)");
}

// On random e-graphs the DAG extraction is well-formed and never costs more than the greedy
// choice it starts from, measured the same way.
TEST(Extract, DagNeverWorseThanGreedyOnRandomGraphs) {
  MathLang m;
  std::mt19937 rng(99);
  NodeCost cost = [](const EGraph&, const ENode& n) {
    return 1.0 + static_cast<double>((n.op() * 7 + n.arity() * 3 + n.attr()) % 5);
  };
  int improved = 0;
  for (int trial = 0; trial < 40; ++trial) {
    EGraph eg;
    std::vector<Id> ids;
    ids.reserve(124);
    for (int i = 0; i < 4; ++i) ids.push_back(m.constant(eg, Rat{i, 1}));
    OpId ops[] = {m.add, m.mul, m.sub, m.ln};
    for (int i = 0; i < 120; ++i) {
      OpId op = ops[rng() % 4];
      Id a = ids[rng() % ids.size()], b = ids[rng() % ids.size()];
      ids.push_back(op == m.ln ? eg.add(op, 0, {a}) : eg.add(op, 0, {a, b}));
      if (rng() % 5 == 0) eg.merge(ids[rng() % ids.size()], ids[rng() % ids.size()]);
    }
    eg.rebuild();
    std::vector<Id> roots(ids.end() - 3, ids.end());
    Extraction greedy = extract_greedy(eg, roots, tree_cost(cost));
    Extraction dag = extract_dag(eg, roots, cost);
    expect_well_formed(eg, dag);
    double g = dag_cost(eg, greedy, cost);
    EXPECT_LE(dag.cost, g + 1e-9) << "trial " << trial;
    EXPECT_DOUBLE_EQ(dag.cost, dag_cost(eg, dag, cost));
    improved += dag.cost < g - 1e-9;
  }
  EXPECT_GT(improved, 0) << "sharing should pay off somewhere in 40 random e-graphs";
}

}  // namespace
}  // namespace mn::egraph::test
