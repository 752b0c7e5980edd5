// egg's arithmetic test suite (tests/math.rs) on this engine: the same rules, conditions and
// constant-folding analysis, and the same start/goal pairs. A goal counts as proven when the
// e-graph holds it in the start term's class (looked up, never added).
#include <gtest/gtest.h>

#include "egraph/extract.h"
#include "egraph/matcher.h"
#include "egraph/runner.h"
#include "egraph/term.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

// The class holding the ground term `text`, or no_id if the e-graph does not contain it.
Id lookup_term(MathLang& m, const EGraph& eg, std::string_view text) {
  CompiledPattern prog(m.pat(text));
  SearchMatches ms;
  ms.reset(0, 0);
  prog.search(eg, ms, 1);
  return ms.empty() ? no_id : ms.eclass(0);
}

std::string extract_text(MathLang& m, const EGraph& eg, Id root, const TreeCost& cost) {
  Id roots[] = {root};
  Extraction ex = extract_greedy(eg, roots, cost);
  Term t = Term::from(eg, ex);
  return t.to_string(t.roots[0], [&](OpId op, Attr a) { return m.head(op, a); });
}

// A condition is built from the searcher pattern, which numbers the variables it names.
using ConditionFor = std::function<Condition(const Pattern& lhs)>;

class MathRules {
 public:
  MathRules(MathLang& m, ConstFold& fold) : m_(m), fold_(fold) {}

  std::vector<Rewrite> rules() {
    std::vector<Rewrite> rs;
    auto add = [&](const char* name, const char* lhs, const char* rhs, const ConditionFor& c = {}) {
      Pattern l = m_.pat(lhs);
      Condition cond = c ? c(l) : Condition{};
      rs.emplace_back(name, std::move(l), m_.pat(rhs), std::move(cond));
    };
    add("comm-add", "(+ ?a ?b)", "(+ ?b ?a)");
    add("comm-mul", "(* ?a ?b)", "(* ?b ?a)");
    add("assoc-add", "(+ ?a (+ ?b ?c))", "(+ (+ ?a ?b) ?c)");
    add("assoc-mul", "(* ?a (* ?b ?c))", "(* (* ?a ?b) ?c)");
    add("sub-canon", "(- ?a ?b)", "(+ ?a (* -1 ?b))");
    add("div-canon", "(/ ?a ?b)", "(* ?a (pow ?b -1))", not_zero("b"));
    add("zero-add", "(+ ?a 0)", "?a");
    add("zero-mul", "(* ?a 0)", "0");
    add("one-mul", "(* ?a 1)", "?a");
    add("add-zero", "?a", "(+ ?a 0)");
    add("mul-one", "?a", "(* ?a 1)");
    add("cancel-sub", "(- ?a ?a)", "0");
    add("cancel-div", "(/ ?a ?a)", "1", not_zero("a"));
    add("distribute", "(* ?a (+ ?b ?c))", "(+ (* ?a ?b) (* ?a ?c))");
    add("factor", "(+ (* ?a ?b) (* ?a ?c))", "(* ?a (+ ?b ?c))");
    add("pow-mul", "(* (pow ?a ?b) (pow ?a ?c))", "(pow ?a (+ ?b ?c))");
    add("pow0", "(pow ?x 0)", "1", not_zero("x"));
    add("pow1", "(pow ?x 1)", "?x");
    add("pow2", "(pow ?x 2)", "(* ?x ?x)");
    add("pow-recip", "(pow ?x -1)", "(/ 1 ?x)", not_zero("x"));
    add("recip-mul-div", "(* ?x (/ 1 ?x))", "1", not_zero("x"));
    add("d-variable", "(d ?x ?x)", "1", is_sym("x"));
    add("d-constant", "(d ?x ?c)", "0", const_or_distinct_var("c", "x"));
    add("d-add", "(d ?x (+ ?a ?b))", "(+ (d ?x ?a) (d ?x ?b))");
    add("d-mul", "(d ?x (* ?a ?b))", "(+ (* ?a (d ?x ?b)) (* ?b (d ?x ?a)))");
    add("d-sin", "(d ?x (sin ?x))", "(cos ?x)");
    add("d-cos", "(d ?x (cos ?x))", "(* -1 (sin ?x))");
    add("d-ln", "(d ?x (ln ?x))", "(/ 1 ?x)", not_zero("x"));
    add("d-power", "(d ?x (pow ?f ?g))",
        "(* (pow ?f ?g) (+ (* (d ?x ?f) (/ ?g ?f)) (* (d ?x ?g) (ln ?f))))",
        both(not_zero("f"), not_zero("g")));
    return rs;
  }

 private:
  // egg's is_not_zero: anything but the constant 0.
  ConditionFor not_zero(const std::string& name) {
    return [this, name](const Pattern& lhs) -> Condition {
      Var v = lhs.var_of(name);
      return [this, v](const EGraph&, Id, const Subst& s) {
        auto c = fold_.data(s[v]);
        return !c || c->num != 0;
      };
    };
  }
  bool has_symbol(const EGraph& eg, Id cls) const {
    for (Id n : eg.class_nodes(eg.find(cls)))
      if (m_.is_symbol(eg.node(n))) return true;
    return false;
  }
  ConditionFor is_sym(const std::string& name) {
    return [this, name](const Pattern& lhs) -> Condition {
      Var v = lhs.var_of(name);
      return [this, v](const EGraph& eg, Id, const Subst& s) { return has_symbol(eg, s[v]); };
    };
  }
  ConditionFor const_or_distinct_var(const std::string& c, const std::string& x) {
    return [this, c, x](const Pattern& lhs) -> Condition {
      Var vc = lhs.var_of(c), vx = lhs.var_of(x);
      return [this, vc, vx](const EGraph& eg, Id, const Subst& s) {
        if (!has_symbol(eg, s[vx])) return false;
        if (eg.find(s[vc]) == eg.find(s[vx])) return false;
        return fold_.data(s[vc]).has_value() || has_symbol(eg, s[vc]);
      };
    };
  }
  static ConditionFor both(const ConditionFor& a, const ConditionFor& b) {
    return [a, b](const Pattern& lhs) -> Condition {
      Condition ca = a(lhs), cb = b(lhs);
      return [ca, cb](const EGraph& eg, Id id, const Subst& s) {
        return ca(eg, id, s) && cb(eg, id, s);
      };
    };
  }

  MathLang& m_;
  ConstFold& fold_;
};

struct Proof {
  bool proven;
  RunReport report;
};

// Runs the math rules from `start` until every goal is in its class (or a budget ends it).
Proof prove(std::string_view start, std::vector<std::string> goals, size_t node_limit = 10000) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  MathRules rules(m, fold);
  std::vector<Rewrite> rs = rules.rules();
  Id root = m.term(eg, start);
  auto all_proven = [&](const EGraph& g) {
    for (const std::string& goal : goals)
      if (lookup_term(m, g, goal) != g.find(root)) return false;
    return true;
  };
  Runner runner(eg);
  // No time limit: whether a proof is found must not depend on the machine's load.
  runner.limits({.iterations = 30, .nodes = node_limit, .seconds = 1e9}).stop_when(all_proven);
  RunReport report = runner.run(rs);
  eg.check_invariants();
  return {all_proven(eg), report};
}

#define EXPECT_PROVES_WITHIN(nodes, start, ...)                              \
  do {                                                                       \
    Proof p = prove(start, {__VA_ARGS__}, nodes);                            \
    EXPECT_TRUE(p.proven) << start << "\n" << p.report.summary();            \
    EXPECT_EQ(p.report.stop_reason, StopReason::goal) << p.report.summary(); \
  } while (0)
#define EXPECT_PROVES(start, ...) EXPECT_PROVES_WITHIN(10000, start, __VA_ARGS__)

TEST(MathRules, SimplifyAdd) { EXPECT_PROVES("(+ x (+ x (+ x x)))", "(* 4 x)"); }
TEST(MathRules, Powers) { EXPECT_PROVES("(* (pow 2 x) (pow 2 y))", "(pow 2 (+ x y))"); }
TEST(MathRules, SimplifyConst) { EXPECT_PROVES("(+ 1 (- a (* (- 2 1) a)))", "1"); }
// egg runs this one with a 75k node limit too.
TEST(MathRules, SimplifyRoot) {
  EXPECT_PROVES_WITHIN(75000, "(/ 1 (- (/ (+ 1 (sqrt five)) 2) (/ (- 1 (sqrt five)) 2)))",
                       "(/ 1 (sqrt five))");
}
TEST(MathRules, SimplifyFactor) {
  EXPECT_PROVES("(* (+ x 3) (+ x 1))", "(+ (+ (* x x) (* 4 x)) 3)");
}
TEST(MathRules, DiffSame) { EXPECT_PROVES("(d x x)", "1"); }
TEST(MathRules, DiffDifferent) { EXPECT_PROVES("(d x y)", "0"); }
TEST(MathRules, DiffSimple1) { EXPECT_PROVES("(d x (+ 1 (* 2 x)))", "2"); }
TEST(MathRules, DiffSimple2) { EXPECT_PROVES("(d x (+ 1 (* y x)))", "y"); }
TEST(MathRules, DiffLn) { EXPECT_PROVES("(d x (ln x))", "(/ 1 x)"); }

TEST(MathRules, UnsoundGoalIsNotProven) {
  // The rules are sound, so a false goal must survive the whole budget.
  Proof p = prove("(+ x 1)", {"(+ x 2)"});
  EXPECT_FALSE(p.proven);
  EXPECT_NE(p.report.stop_reason, StopReason::goal);
}

// egg's introductory example: (a * 2) / 2 = a with strength reduction and reassociation, no
// analysis, and extraction picking the smallest term.
TEST(MathRules, TimesTwoOverTwoIsA) {
  MathLang m;
  EGraph eg;
  std::vector<Rewrite> rs;
  rs.push_back(m.rw("mul-two", "(* ?x 2)", "(<< ?x 1)"));
  rs.push_back(m.rw("mul-one", "(* ?x 1)", "?x"));
  rs.push_back(m.rw("reassoc-div", "(/ (* ?x ?y) ?z)", "(* ?x (/ ?y ?z))"));
  rs.push_back(m.rw("self-div", "(/ ?x ?x)", "1"));
  Id root = m.term(eg, "(/ (* a 2) 2)");
  Id mul = m.term(eg, "(* a 2)");
  Runner runner(eg);
  RunReport report = runner.run(rs);
  EXPECT_EQ(report.stop_reason, StopReason::saturated) << report.summary();
  eg.check_invariants();
  EXPECT_EQ(eg.find(root), eg.find(m.term(eg, "a")));
  EXPECT_EQ(extract_text(m, eg, root, ast_size()), "a");
  // Cost by operator: a shift is cheaper than a multiply.
  TreeCost by_op = tree_cost([&](const EGraph&, const ENode& n) {
    return n.op() == m.mul ? 8.0 : n.op() == m.shl ? 2.0 : 1.0;
  });
  EXPECT_EQ(extract_text(m, eg, mul, by_op), "(<< a 1)");
  for (const RuleStats& r : report.rules) EXPECT_GT(r.applied, 0u) << r.name;
}

// egg's math_associate_adds: commutativity and associativity alone close 1+..+7 under every
// reordering: one class per non-empty subset of the seven constants, 2^7 - 1 = 127.
TEST(MathRules, AssociateAddsReachesAllSubsetSums) {
  MathLang m;
  EGraph eg;
  std::vector<Rewrite> rs;
  rs.push_back(m.rw("comm-add", "(+ ?a ?b)", "(+ ?b ?a)"));
  rs.push_back(m.rw("assoc-add", "(+ ?a (+ ?b ?c))", "(+ (+ ?a ?b) ?c)"));
  Id start = m.term(eg, "(+ 1 (+ 2 (+ 3 (+ 4 (+ 5 (+ 6 7))))))");
  Runner runner(eg);
  runner.scheduler(std::make_unique<SimpleScheduler>())
      .limits({.iterations = 30, .nodes = 200000, .seconds = 1e9});  // no clock in the outcome
  RunReport report = runner.run(rs);
  EXPECT_EQ(report.stop_reason, StopReason::saturated) << report.summary();
  EXPECT_EQ(eg.num_classes(), 127u);
  EXPECT_EQ(lookup_term(m, eg, "(+ 7 (+ 6 (+ 5 (+ 4 (+ 3 (+ 2 1))))))"), eg.find(start));
  eg.check_invariants();
}

}  // namespace
}  // namespace mn::egraph::test
