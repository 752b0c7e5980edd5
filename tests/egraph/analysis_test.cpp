// E-class analysis: make/merge/modify hooks, repair of parents' data after merges, and
// constant folding (egg's ConstantFold) as the worked example.
#include <gtest/gtest.h>

#include "egraph/egraph.h"
#include "egraph_test_lang.h"

namespace mn::egraph::test {
namespace {

TEST(Analysis, ConstantFoldingAddsLiterals) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  Id e = m.term(eg, "(+ 1 (* 2 3))");
  eg.rebuild();
  ASSERT_TRUE(fold.data(e).has_value());
  EXPECT_EQ(*fold.data(e), (Rat{7, 1}));
  // modify() put the literal 7 into the class.
  EXPECT_EQ(eg.find(m.constant(eg, Rat{7, 1})), eg.find(e));
  EXPECT_EQ(eg.find(m.term(eg, "(/ 14 2)")), eg.find(e));
  EXPECT_EQ(*fold.data(m.term(eg, "(/ 1 3)")), (Rat{1, 3}));
  eg.rebuild();
  eg.check_invariants();
}

TEST(Analysis, MergeRepairsParentsAfterRebuild) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  Id x = m.term(eg, "x");
  Id e = m.term(eg, "(* (+ x 1) 2)");
  eg.rebuild();
  EXPECT_FALSE(fold.data(e).has_value());
  size_t merges_before = fold.merges;
  eg.merge(x, m.constant(eg, Rat{4, 1}));
  EXPECT_GT(fold.merges, merges_before) << "merge() must call the analysis merge";
  eg.rebuild();
  // x = 4 flows up through the parents: (+ x 1) = 5, and (* 5 2) = 10.
  ASSERT_TRUE(fold.data(e).has_value());
  EXPECT_EQ(*fold.data(e), (Rat{10, 1}));
  EXPECT_EQ(eg.find(e), eg.find(m.constant(eg, Rat{10, 1})));
  EXPECT_EQ(eg.find(m.term(eg, "(+ x 1)")), eg.find(m.constant(eg, Rat{5, 1})));
  eg.rebuild();
  eg.check_invariants();
}

TEST(Analysis, ModifyMergesCanChainIntoCongruence) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  // f(2+2) and f(4) become congruent only because folding merges (+ 2 2) with 4.
  Id a = m.term(eg, "(f (+ 2 2))");
  Id b = m.term(eg, "(f 4)");
  eg.rebuild();
  EXPECT_EQ(eg.find(a), eg.find(b));
  eg.check_invariants();
}

TEST(Analysis, DidMergeReportsWhichSideChanged) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  Id y = m.term(eg, "y");
  Id p = m.term(eg, "(- y 1)");
  eg.rebuild();
  // Merging the constant side into y changes y's data (a) but not the literal's (b); the
  // parent (- y 1) must then fold.
  eg.merge(m.constant(eg, Rat{3, 1}), y);
  eg.rebuild();
  EXPECT_EQ(*fold.data(p), (Rat{2, 1}));
  eg.check_invariants();
}

TEST(Analysis, ContradictionsSurfaceAsErrors) {
  MathLang m;
  ConstFold fold(m);
  EGraph eg(&fold);
  Id two = m.constant(eg, Rat{2, 1});
  Id three = m.constant(eg, Rat{3, 1});
  EXPECT_THROW(eg.merge(two, three), Error);
}

}  // namespace
}  // namespace mn::egraph::test
