// Hash-consing, union-find, deferred rebuild and its invariants, checked against a naive
// congruence closure on random e-graphs.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include <meganeura/error.h>

#include "egraph/attr_table.h"
#include "egraph/egraph.h"
#include "egraph/symbol_table.h"

namespace mn::egraph {
namespace {

constexpr OpId leaf_op = 0, f_op = 1, g_op = 2, wide_op = 3;

TEST(EGraphCore, HashConsSharesEqualNodes) {
  EGraph eg;
  Id a = eg.add(leaf_op, 1, {});
  Id b = eg.add(leaf_op, 2, {});
  Id fab = eg.add(f_op, 0, {a, b});
  EXPECT_EQ(eg.add(f_op, 0, {a, b}), fab);
  EXPECT_NE(eg.add(f_op, 0, {b, a}), fab);
  EXPECT_NE(eg.add(f_op, 7, {a, b}), fab) << "the attribute word is part of the node";
  EXPECT_EQ(eg.add(leaf_op, 1, {}), a);
  EXPECT_EQ(eg.lookup(f_op, 0, std::vector<Id>{a, b}), fab);
  EXPECT_EQ(eg.lookup(g_op, 0, std::vector<Id>{a}), no_id);
  EXPECT_EQ(eg.num_nodes(), 5u);
  EXPECT_EQ(eg.num_classes(), 5u);
  eg.check_invariants();
}

TEST(EGraphCore, CongruenceRestoredByRebuild) {
  EGraph eg;
  Id a = eg.add(leaf_op, 1, {});
  Id b = eg.add(leaf_op, 2, {});
  Id fa = eg.add(f_op, 0, {a});
  Id fb = eg.add(f_op, 0, {b});
  Id gfa = eg.add(g_op, 0, {fa, a});
  Id gfb = eg.add(g_op, 0, {fb, b});
  EXPECT_TRUE(eg.merge(a, b));
  EXPECT_FALSE(eg.merge(b, a));
  EXPECT_FALSE(eg.is_clean());
  // Deferred: congruence is not visible before rebuild.
  EXPECT_NE(eg.find(fa), eg.find(fb));
  EXPECT_EQ(eg.rebuild(), 2u);
  EXPECT_TRUE(eg.is_clean());
  EXPECT_EQ(eg.find(fa), eg.find(fb));
  EXPECT_EQ(eg.find(gfa), eg.find(gfb));
  EXPECT_EQ(eg.num_nodes(), 4u) << "f(a)/f(b) and g(..)/g(..) each collapse to one node";
  EXPECT_EQ(eg.num_classes(), 3u);
  // The hash-cons is canonical: adding the old spelling finds the merged class.
  EXPECT_EQ(eg.add(f_op, 0, {b}), eg.find(fa));
  EXPECT_EQ(eg.lookup(g_op, 0, std::vector<Id>{fb, a}), eg.find(gfa));
  eg.check_invariants();
}

TEST(EGraphCore, LongCongruenceChainsCollapse) {
  EGraph eg;
  Id a = eg.add(leaf_op, 1, {});
  Id b = eg.add(leaf_op, 2, {});
  std::vector<Id> fa{a}, fb{b};
  for (int i = 0; i < 200; ++i) {
    fa.push_back(eg.add(f_op, 0, {fa.back()}));
    fb.push_back(eg.add(f_op, 0, {fb.back()}));
  }
  eg.merge(a, b);
  EXPECT_EQ(eg.rebuild(), 200u);
  for (size_t i = 0; i < fa.size(); ++i) EXPECT_EQ(eg.find(fa[i]), eg.find(fb[i]));
  EXPECT_EQ(eg.num_classes(), 201u);
  eg.check_invariants();
}

TEST(EGraphCore, CyclicClasses) {
  EGraph eg;
  Id a = eg.add(leaf_op, 1, {});
  Id fa = eg.add(f_op, 0, {a});
  Id ffa = eg.add(f_op, 0, {fa});
  eg.merge(a, fa);
  eg.rebuild();
  // f(a) = a makes every f^k(a) the same class, and f(f(a)) collapses onto f(a).
  EXPECT_EQ(eg.find(ffa), eg.find(a));
  EXPECT_EQ(eg.num_classes(), 1u);
  EXPECT_EQ(eg.num_nodes(), 2u);
  EXPECT_EQ(eg.add(f_op, 0, {ffa}), eg.find(a));
  eg.check_invariants();
}

TEST(EGraphCore, WideNodesKeepChildrenOnTheHeap) {
  EGraph eg;
  std::vector<Id> leaves;
  leaves.reserve(9);
  for (int i = 0; i < 9; ++i) leaves.push_back(eg.add(leaf_op, static_cast<Attr>(i), {}));
  std::vector<Id> kids1(leaves.begin(), leaves.begin() + 7);
  std::vector<Id> kids2 = kids1;
  kids2[6] = leaves[8];
  Id w1 = eg.add(wide_op, 0, kids1);
  Id w2 = eg.add(wide_op, 0, kids2);
  EXPECT_NE(w1, w2);
  ENode copy = eg.node(w1);
  ENode moved = std::move(copy);
  EXPECT_EQ(moved, eg.node(w1));
  copy = moved;  // assign into a moved-from node
  EXPECT_EQ(copy.children().size(), 7u);
  eg.merge(leaves[6], leaves[8]);
  eg.rebuild();
  EXPECT_EQ(eg.find(w1), eg.find(w2));
  eg.check_invariants();
}

// Naive congruence closure: repeat "merge nodes with equal heads and equivalent children" over
// all nodes until nothing changes. Quadratic, but obviously right.
struct NaiveNode {
  OpId op;
  Attr attr;
  std::vector<size_t> kids;
};
std::vector<size_t> naive_closure(const std::vector<NaiveNode>& nodes,
                                  const std::vector<std::pair<size_t, size_t>>& merges) {
  std::vector<size_t> rep(nodes.size());
  for (size_t i = 0; i < rep.size(); ++i) rep[i] = i;
  auto find = [&](size_t x) {
    while (rep[x] != x) x = rep[x];
    return x;
  };
  for (auto [x, y] : merges) rep[find(x)] = find(y);
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::tuple<OpId, Attr, std::vector<size_t>>, size_t> seen;
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::vector<size_t> kids;
      for (size_t k : nodes[i].kids) kids.push_back(find(k));
      auto [it, fresh] = seen.try_emplace({nodes[i].op, nodes[i].attr, kids}, i);
      if (!fresh && find(it->second) != find(i)) {
        rep[find(i)] = find(it->second);
        changed = true;
      }
    }
  }
  for (size_t i = 0; i < rep.size(); ++i) rep[i] = find(i);
  return rep;
}

TEST(EGraphCore, RandomGraphsMatchNaiveCongruenceClosure) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 30; ++trial) {
    EGraph eg;
    std::vector<NaiveNode> nodes;
    std::vector<Id> ids;
    std::vector<std::pair<size_t, size_t>> merges;
    int n = 60 + trial * 5;
    for (int i = 0; i < n; ++i) {
      NaiveNode nn;
      if (i < 6 || rng() % 5 == 0) {
        nn = {leaf_op, static_cast<Attr>(rng() % 4), {}};
      } else {
        nn.op = 1 + rng() % 3;
        nn.attr = rng() % 2;
        size_t arity = nn.op == wide_op ? 5 + rng() % 2 : 1 + rng() % 2;
        for (size_t k = 0; k < arity; ++k) nn.kids.push_back(rng() % nodes.size());
      }
      std::vector<Id> kids;
      for (size_t k : nn.kids) kids.push_back(ids[k]);
      ids.push_back(eg.add(nn.op, nn.attr, kids));
      nodes.push_back(nn);
      // Merges interleaved with adds, rebuilds only now and then: adds see a dirty e-graph.
      if (rng() % 7 == 0) {
        size_t x = rng() % nodes.size(), y = rng() % nodes.size();
        merges.emplace_back(x, y);
        eg.merge(ids[x], ids[y]);
      }
      if (rng() % 13 == 0) {
        eg.rebuild();
        eg.check_invariants();
      }
    }
    eg.rebuild();
    eg.check_invariants();
    std::vector<size_t> rep = naive_closure(nodes, merges);
    for (size_t i = 0; i < nodes.size(); ++i)
      for (size_t j = i + 1; j < nodes.size(); ++j)
        ASSERT_EQ(rep[i] == rep[j], eg.find(ids[i]) == eg.find(ids[j]))
            << "trial " << trial << " nodes " << i << " and " << j;
  }
}

TEST(EGraphCore, OperatorIndexTracksLiveNodes) {
  EGraph eg;
  Id a = eg.add(leaf_op, 1, {});
  Id b = eg.add(leaf_op, 2, {});
  eg.add(f_op, 0, {a});
  eg.add(f_op, 0, {b});
  EXPECT_EQ(eg.nodes_with_op(f_op).size(), 2u);
  EXPECT_TRUE(eg.nodes_with_op(99).empty());
  eg.merge(a, b);
  eg.rebuild();
  EXPECT_EQ(eg.nodes_with_op(f_op).size(), 1u);
  EXPECT_EQ(eg.nodes_with_op(leaf_op).size(), 2u);
}

TEST(EGraphCore, InvariantCheckRequiresRebuild) {
  EGraph eg;
  Id a = eg.add(leaf_op, 1, {});
  Id b = eg.add(leaf_op, 2, {});
  eg.merge(a, b);
  EXPECT_THROW(eg.check_invariants(), Error);
}

TEST(Tables, SymbolsAndAttributesIntern) {
  SymbolTable syms;
  EXPECT_EQ(syms.intern("add"), 0u);
  EXPECT_EQ(syms.intern("mul"), 1u);
  EXPECT_EQ(syms.intern("add"), 0u);
  EXPECT_EQ(syms.name(1), "mul");
  EXPECT_FALSE(syms.find("neg").has_value());
  EXPECT_THROW(syms.name(5), Error);

  struct WordsHash {
    size_t operator()(const std::vector<int64_t>& v) const {
      uint64_t h = v.size();
      for (int64_t x : v) h = mix64(h ^ static_cast<uint64_t>(x));
      return h;
    }
  };
  AttrTable<std::vector<int64_t>, WordsHash> perms;
  Attr p = perms.intern({1, 0, 2});
  EXPECT_EQ(perms.intern({1, 0, 2}), p);
  Attr q = perms.intern({0, 1});
  EXPECT_NE(p, q);
  EXPECT_EQ(perms.get(p), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_THROW(perms.get(17), Error);
}

}  // namespace
}  // namespace mn::egraph
