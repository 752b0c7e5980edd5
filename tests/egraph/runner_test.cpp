// The runner's budgets and stop reasons, per-rule statistics, and egg's backoff scheduling.
#include <gtest/gtest.h>

#include "egraph/runner.h"
#include "egraph/scheduler.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

// (f ?x) => (f (g ?x)) never saturates: every application makes a new g-chain one longer.
std::vector<Rewrite> growing_rules(MathLang& m) {
  std::vector<Rewrite> rs;
  rs.push_back(m.rw("grow", "(f ?x)", "(f (g ?x))"));
  return rs;
}

TEST(Runner, SaturatesAndReportsPerRuleCounts) {
  MathLang m;
  EGraph eg;
  std::vector<Rewrite> rs;
  rs.push_back(m.rw("one-mul", "(* ?a 1)", "?a"));
  rs.push_back(m.rw("zero-add", "(+ ?a 0)", "?a"));
  rs.push_back(m.rw("never", "(pow ?a ?b)", "?a"));
  Id e = m.term(eg, "(+ (* x 1) 0)");
  RunReport r = Runner(eg).run(rs);
  EXPECT_EQ(r.stop_reason, StopReason::saturated);
  EXPECT_EQ(eg.find(e), eg.find(m.term(eg, "x")));
  ASSERT_EQ(r.rules.size(), 3u);
  EXPECT_EQ(r.rules[0].name, "one-mul");
  EXPECT_GE(r.rules[0].matches, 1u);
  EXPECT_EQ(r.rules[0].applied, 1u);
  EXPECT_EQ(r.rules[1].applied, 1u);
  EXPECT_EQ(r.rules[2].matches, 0u);
  EXPECT_EQ(r.iterations, r.per_iteration.size());
  EXPECT_EQ(r.per_iteration.back().applied, 0u) << "the last iteration changed nothing";
  EXPECT_EQ(r.nodes, eg.num_nodes());
  EXPECT_EQ(r.classes, eg.num_classes());
  EXPECT_NE(r.summary().find("saturated"), std::string::npos);
  eg.check_invariants();
}

TEST(Runner, StopsAtTheIterationLimit) {
  MathLang m;
  EGraph eg;
  m.term(eg, "(f x)");
  Runner runner(eg);
  runner.scheduler(std::make_unique<SimpleScheduler>()).limits({.iterations = 5});
  RunReport r = runner.run(growing_rules(m));
  EXPECT_EQ(r.stop_reason, StopReason::iteration_limit);
  EXPECT_EQ(r.iterations, 5u);
  EXPECT_EQ(r.rules[0].applied, 5u);
  eg.check_invariants();
}

TEST(Runner, StopsAtTheNodeLimitWithoutOvershooting) {
  MathLang m;
  EGraph eg;
  // Many independent chains grow at once, so a single iteration crosses the limit.
  for (int i = 0; i < 100; ++i) m.term(eg, "(f x" + std::to_string(i) + ")");
  Runner runner(eg);
  runner.scheduler(std::make_unique<SimpleScheduler>()).limits({.iterations = 1000, .nodes = 500});
  RunReport r = runner.run(growing_rules(m));
  EXPECT_EQ(r.stop_reason, StopReason::node_limit);
  EXPECT_GT(eg.num_nodes(), 500u);
  // Checked after every match: one application adds at most two nodes.
  EXPECT_LE(eg.num_nodes(), 502u);
  eg.check_invariants();
}

TEST(Runner, StopsAtTheTimeLimit) {
  MathLang m;
  EGraph eg;
  for (int i = 0; i < 50; ++i) m.term(eg, "(f x" + std::to_string(i) + ")");
  Runner runner(eg);
  runner.scheduler(std::make_unique<SimpleScheduler>())
      .limits({.iterations = 100000000, .nodes = 100000000, .seconds = 0.05});
  RunReport r = runner.run(growing_rules(m));
  // The other limits are out of reach, so only the clock can have stopped the run, and only
  // once its own measure passed the budget (no bound on how far past: that is the machine's
  // load, not the runner).
  EXPECT_EQ(r.stop_reason, StopReason::time_limit);
  EXPECT_GE(r.seconds, 0.05);
  eg.check_invariants();
}

TEST(Runner, StopsWhenTheGoalHolds) {
  MathLang m;
  EGraph eg;
  Id start = m.term(eg, "(f x)");
  Id goal = m.term(eg, "(f (g (g (g x))))");
  Runner runner(eg);
  runner.stop_when([&](const EGraph& g) { return g.find(start) == g.find(goal); });
  RunReport r = runner.run(growing_rules(m));
  EXPECT_EQ(r.stop_reason, StopReason::goal);
  EXPECT_EQ(r.iterations, 3u);
}

TEST(Runner, DynamicAppliersAndConditions) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  // (double ?x) => the literal 2x, built by a callback, only where ?x is a constant.
  OpId dbl = m.ops.intern("double");
  Pattern lhs = m.pat("(double ?x)");
  Var x = lhs.var_of("x");
  std::vector<Rewrite> rs;
  rs.push_back(Rewrite::dynamic(
      "fold-double", std::move(lhs),
      [&, x](EGraph& g, Id, const Subst& s) {
        Rat v = *fold.data(s[x]);
        return m.constant(g, Rat{2 * v.num, v.den});
      },
      [&, x](const EGraph&, Id, const Subst& s) { return fold.data(s[x]).has_value(); }));
  Id a = eg.add(dbl, 0, {m.constant(eg, Rat{21, 1})});
  Id b = eg.add(dbl, 0, {m.term(eg, "y")});
  RunReport r = Runner(eg).run(rs);
  EXPECT_EQ(r.stop_reason, StopReason::saturated);
  EXPECT_EQ(eg.find(a), eg.find(m.constant(eg, Rat{42, 1})));
  EXPECT_FALSE(fold.data(b).has_value()) << "the condition kept (double y) unfolded";
  EXPECT_EQ(r.rules[0].matches, r.iterations * 2);
  EXPECT_EQ(r.rules[0].applied, 1u);
}

TEST(Backoff, BansARuleOverItsMatchLimitAndDoublesIt) {
  MathLang m;
  EGraph eg;
  for (int i = 0; i < 10; ++i) m.term(eg, "(+ x" + std::to_string(i) + " 1)");
  eg.rebuild();
  Rewrite rw = m.rw("comm", "(+ ?a ?b)", "(+ ?b ?a)");
  BackoffScheduler s(/*match_limit=*/4, /*ban_length=*/3);
  s.start(1);
  SearchMatches ms;
  EXPECT_EQ(s.search(0, 0, rw, eg, ms), SearchOutcome::banned_now);
  EXPECT_TRUE(ms.empty());
  EXPECT_EQ(s.times_banned(0), 1u);
  EXPECT_EQ(s.banned_until(0), 3u);
  EXPECT_EQ(s.search(1, 0, rw, eg, ms), SearchOutcome::skipped);
  EXPECT_EQ(s.search(2, 0, rw, eg, ms), SearchOutcome::skipped);
  // Limit now 8: 10 matches still too many, and the ban doubles to 6 iterations.
  EXPECT_EQ(s.search(3, 0, rw, eg, ms), SearchOutcome::banned_now);
  EXPECT_EQ(s.banned_until(0), 9u);
  // Limit 16 admits all 10.
  EXPECT_EQ(s.search(9, 0, rw, eg, ms), SearchOutcome::searched);
  EXPECT_EQ(ms.size(), 10u);
  // A per-rule override.
  BackoffScheduler custom(4, 3);
  custom.rule_limits(0, 100, 1);
  custom.start(1);
  EXPECT_EQ(custom.search(0, 0, rw, eg, ms), SearchOutcome::searched);
}

TEST(Backoff, CanStopFastForwardsBansInsteadOfStopping) {
  MathLang m;
  EGraph eg;
  for (int i = 0; i < 10; ++i) m.term(eg, "(+ x" + std::to_string(i) + " 1)");
  eg.rebuild();
  Rewrite rw = m.rw("comm", "(+ ?a ?b)", "(+ ?b ?a)");
  BackoffScheduler s(4, 5);
  s.start(1);
  SearchMatches ms;
  s.search(0, 0, rw, eg, ms);
  EXPECT_FALSE(s.can_stop(1)) << "a banned rule might still change the e-graph";
  EXPECT_EQ(s.banned_until(0), 1u);
  EXPECT_TRUE(s.can_stop(1));
}

TEST(Backoff, TamesAssociativityAndCommutativity) {
  // Comm + assoc over a 12-term sum explode (2^12 subset classes, many more nodes). Without
  // backoff the first iterations apply everything; with it the exploding rules sit out.
  MathLang m;
  std::string sum = "x0";
  for (int i = 1; i < 12; ++i) sum = "(+ x" + std::to_string(i) + " " + std::move(sum) + ")";
  std::vector<Rewrite> rs;
  rs.push_back(m.rw("comm-add", "(+ ?a ?b)", "(+ ?b ?a)"));
  rs.push_back(m.rw("assoc-add", "(+ ?a (+ ?b ?c))", "(+ (+ ?a ?b) ?c)"));
  rs.push_back(m.rw("zero-add", "(+ ?a 0)", "?a"));

  EGraph eg;
  m.term(eg, sum);
  Runner runner(eg);
  runner.scheduler(std::make_unique<BackoffScheduler>(50, 2))
      .limits({.iterations = 12, .nodes = 100000, .seconds = 1e9});  // no clock in the outcome
  RunReport r = runner.run(rs);
  EXPECT_GE(r.rules[0].times_banned + r.rules[1].times_banned, 1u) << r.summary();
  EXPECT_GT(r.rules[0].iterations_skipped + r.rules[1].iterations_skipped, 0u);
  EXPECT_EQ(r.rules[2].times_banned, 0u);
  eg.check_invariants();

  EGraph plain;
  m.term(plain, sum);
  Runner simple(plain);
  simple.scheduler(std::make_unique<SimpleScheduler>())
      .limits({.iterations = 12, .nodes = 100000, .seconds = 1e9});  // no clock in the outcome
  RunReport rp = simple.run(rs);
  EXPECT_EQ(rp.stop_reason, StopReason::node_limit) << rp.summary();
  EXPECT_LT(r.nodes, rp.nodes) << "backoff kept the e-graph smaller\n" << r.summary();
}

}  // namespace
}  // namespace mn::egraph::test
