// Patterns and compiled e-matching: variables, non-linear patterns, ground subterms, attribute
// predicates and attribute variables, bare-variable roots, limits, the operator index, and the
// compiled matcher against a naive backtracking matcher on random e-graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "egraph/matcher.h"
#include "egraph/rewrite.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

// (class, substitution in var order) of every match, sorted, for comparisons.
using MatchSet = std::multiset<std::vector<uint64_t>>;
MatchSet collect(const SearchMatches& ms) {
  MatchSet out;
  for (size_t i = 0; i < ms.size(); ++i) {
    std::vector<uint64_t> row{ms.eclass(i)};
    Subst s = ms.subst(i);
    for (uint32_t v = 0; v < ms.num_vars(); ++v) row.push_back(s[Var{v}]);
    for (uint32_t v = 0; v < ms.num_attr_vars(); ++v) row.push_back(s[AttrVar{v}]);
    out.insert(row);
  }
  return out;
}

SearchMatches search(const Pattern& p, const EGraph& eg, size_t limit = SIZE_MAX) {
  CompiledPattern prog(p);
  SearchMatches ms;
  ms.reset(prog.num_vars(), prog.num_attr_vars());
  prog.search(eg, ms, limit);
  return ms;
}

TEST(Pattern, VariablesBindChildren) {
  MathLang m;
  EGraph eg;
  Id a = m.term(eg, "(* x 2)");
  m.term(eg, "(* y 3)");
  m.term(eg, "(+ x 2)");
  eg.rebuild();
  Pattern p = m.pat("(* ?a 2)");
  SearchMatches ms = search(p, eg);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms.eclass(0), eg.find(a));
  EXPECT_EQ(ms.subst(0)[p.var_of("a")], eg.find(m.term(eg, "x")));
  EXPECT_EQ(search(m.pat("(* ?a ?b)"), eg).size(), 2u);
}

TEST(Pattern, RepeatedVariablesMustAgree) {
  MathLang m;
  EGraph eg;
  Id same = m.term(eg, "(- x x)");
  Id differ = m.term(eg, "(- x y)");
  eg.rebuild();
  Pattern p = m.pat("(- ?a ?a)");
  EXPECT_EQ(search(p, eg).size(), 1u);
  eg.merge(m.term(eg, "x"), m.term(eg, "y"));
  eg.rebuild();
  // Now (- x y) is the same node as (- x x).
  EXPECT_EQ(eg.find(same), eg.find(differ));
  EXPECT_EQ(search(p, eg).size(), 1u);
}

TEST(Pattern, GroundSubtermsAreLookedUp) {
  MathLang m;
  EGraph eg;
  m.term(eg, "(* x 1)");
  m.term(eg, "(* x (+ 1 1))");
  eg.rebuild();
  EXPECT_EQ(search(m.pat("(* ?a (+ 1 1))"), eg).size(), 1u);
  EXPECT_EQ(search(m.pat("(* ?a 7)"), eg).size(), 0u) << "7 is not in the e-graph at all";
  CompiledPattern prog(m.pat("(* ?a (+ 1 1))"));
  EXPECT_EQ(prog.num_instructions(), 2u) << "one bind for the root, one lookup for (+ 1 1)";
}

TEST(Pattern, MatchesSeeEveryNodeOfAClass) {
  MathLang m;
  EGraph eg;
  Id e = m.term(eg, "(* (+ a b) c)");
  Id alt = m.term(eg, "(- d e)");
  eg.merge(m.term(eg, "(+ a b)"), alt);
  eg.rebuild();
  Pattern p = m.pat("(* (- ?x ?y) ?z)");
  SearchMatches ms = search(p, eg);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms.eclass(0), eg.find(e));
  EXPECT_EQ(ms.subst(0)[p.var_of("x")], eg.find(m.term(eg, "d")));
}

TEST(Pattern, AttributePredicatesAndVariables) {
  MathLang m;
  EGraph eg;
  for (int v : {1, 2, 5, 9}) m.term(eg, "(neg " + std::to_string(v) + ")");
  m.term(eg, "(pair 3 3)");
  m.term(eg, "(pair 3 4)");
  eg.rebuild();
  OpId neg = m.ops.intern("neg"), pair = m.ops.intern("pair");

  Pattern big;
  big.op(neg, {big.op(m.num, {}, AttrMatch::where([](Attr a) { return unpack(a).num > 2; }))});
  EXPECT_EQ(search(big, eg).size(), 2u);

  // An attribute variable used twice matches equal words only.
  Pattern twins;
  AttrVar k = twins.attr_var("k");
  Pattern::Ref l = twins.op(m.num, {}, AttrMatch::bind(k));
  Pattern::Ref r = twins.op(m.num, {}, AttrMatch::bind(k));
  twins.op(pair, {l, r});
  SearchMatches ms = search(twins, eg);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms.subst(0)[k], pack(Rat{3, 1}));
}

TEST(Pattern, AttributeVariablesCarryIntoTheApplier) {
  MathLang m;
  EGraph eg;
  OpId reshape = m.ops.intern("reshape");
  Id x = m.term(eg, "x");
  Id inner = eg.add(reshape, 11, {x});
  Id outer = eg.add(reshape, 22, {inner});
  eg.rebuild();
  // reshape[s2](reshape[s1](?x)) => reshape[s2](?x)
  Pattern lhs;
  AttrVar s2 = lhs.attr_var("s2");
  lhs.op(reshape, {lhs.op(reshape, {lhs.var("x")}, AttrMatch::any())}, AttrMatch::bind(s2));
  Pattern rhs;
  AttrVar t = rhs.attr_var("s2");
  rhs.op(reshape, {rhs.var("x")}, AttrMatch::bind(t));
  Rewrite rw("reshape-chain", std::move(lhs), std::move(rhs));
  SearchMatches ms;
  rw.search(eg, ms);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(rw.apply(eg, ms), 1u);
  eg.rebuild();
  EXPECT_EQ(eg.find(outer), eg.find(eg.add(reshape, 22, {x})));
  EXPECT_NE(eg.find(outer), eg.find(inner));
}

TEST(Pattern, BareVariableRootMatchesEveryClass) {
  MathLang m;
  EGraph eg;
  m.term(eg, "(+ (* a b) c)");
  eg.rebuild();
  EXPECT_EQ(search(m.pat("?z"), eg).size(), eg.num_classes());
  EXPECT_EQ(search(m.pat("?z"), eg, 2).size(), 2u);
}

TEST(Pattern, SearchStopsAtTheLimit) {
  MathLang m;
  EGraph eg;
  for (int i = 0; i < 50; ++i) m.term(eg, "(+ x" + std::to_string(i) + " 1)");
  eg.rebuild();
  EXPECT_EQ(search(m.pat("(+ ?a 1)"), eg).size(), 50u);
  EXPECT_EQ(search(m.pat("(+ ?a 1)"), eg, 7).size(), 7u);
}

TEST(Pattern, BadPatternsAreErrors) {
  MathLang m;
  EXPECT_THROW(m.pat("(+ 1"), Error);
  EXPECT_THROW(m.pat("(+ 1 2))"), Error);
  EXPECT_THROW(m.pat("()"), Error);
  EXPECT_THROW(m.pat("(?f 1)"), Error);
  EGraph eg;
  EXPECT_THROW(m.term(eg, "(+ ?x 1)"), Error);
  Pattern p;
  EXPECT_THROW(p.op(m.add, {0, 1}), Error) << "children must exist before their parent";
  EXPECT_THROW(p.root(), Error);
  // An applier may only use variables its searcher binds.
  EXPECT_THROW(m.rw("bad", "(+ ?a 0)", "(+ ?b 0)"), Error);
  // An applier attribute must be exact.
  Pattern any_attr;
  any_attr.op(m.num, {}, AttrMatch::any());
  EXPECT_THROW(Rewrite("bad", m.pat("(+ ?a 0)"), std::move(any_attr)), Error);
  // Searching needs a rebuilt e-graph.
  Id a = m.term(eg, "a");
  Id b = m.term(eg, "b");
  eg.merge(a, b);
  EXPECT_THROW(search(m.pat("(+ ?a 0)"), eg), Error);
}

// The obvious recursive matcher: enumerate the nodes of each class the pattern visits.
void naive(const EGraph& eg, const Pattern& p, Pattern::Ref r, Id cls, std::vector<Id>& subst,
           const std::function<void()>& k) {
  const PatternNode& n = p.node(r);
  if (n.is_var) {
    Id& slot = subst[n.var];
    if (slot == no_id) {
      slot = cls;
      k();
      slot = no_id;
    } else if (slot == cls) {
      k();
    }
    return;
  }
  for (Id nid : eg.class_nodes(cls)) {
    const ENode& node = eg.node(nid);
    if (node.op() != n.op || node.attr() != n.attr.value || node.arity() != n.children.size())
      continue;
    std::function<void(size_t)> kids = [&](size_t i) {
      if (i == n.children.size()) return k();
      naive(eg, p, n.children[i], node.child(i), subst, [&] { kids(i + 1); });
    };
    kids(0);
  }
}

TEST(Pattern, CompiledMatchingAgreesWithNaiveMatching) {
  MathLang m;
  std::mt19937 rng(7);
  std::vector<std::string> patterns = {"(+ ?a ?b)",
                                       "(+ ?a ?a)",
                                       "(* (+ ?a ?b) ?c)",
                                       "(* (+ ?a ?b) (+ ?b ?a))",
                                       "(+ (* ?a 1) ?b)",
                                       "(* ?a (* ?b (+ ?a ?c)))",
                                       "(- (+ ?x 0) (* ?x ?y))",
                                       "(+ 0 1)"};
  for (int trial = 0; trial < 20; ++trial) {
    EGraph eg;
    std::vector<Id> ids{m.term(eg, "0"), m.term(eg, "1"), m.term(eg, "p"), m.term(eg, "q")};
    OpId ops[] = {m.add, m.mul, m.sub};
    for (int i = 0; i < 150; ++i) {
      Id a = ids[rng() % ids.size()], b = ids[rng() % ids.size()];
      ids.push_back(eg.add(ops[rng() % 3], 0, {a, b}));
      if (rng() % 6 == 0) eg.merge(ids[rng() % ids.size()], ids[rng() % ids.size()]);
    }
    eg.rebuild();
    for (const std::string& text : patterns) {
      Pattern p = m.pat(text);
      MatchSet expected;
      for (Id cls : eg.classes()) {
        std::vector<Id> subst(p.num_vars(), no_id);
        naive(eg, p, p.root(), cls, subst, [&] {
          std::vector<uint64_t> row{cls};
          row.insert(row.end(), subst.begin(), subst.end());
          expected.insert(row);
        });
      }
      EXPECT_EQ(collect(search(p, eg)), expected) << text << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace mn::egraph::test
