// Each algebra rule on random instances: the optimized graph evaluates like the original on the
// reference, the rule is reported as fired, and the graph changed the way the rule says.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include <meganeura/graph.h>

#include "ir/op_def.h"
#include "ir/ops/elementwise.h"
#include "ir/ops/matmul.h"
#include "ir/ops/reduce.h"
#include "ir/ops/shape.h"
#include "optimize/optimize.h"
#include "optimize_test_util.h"

namespace mn::optimize {
namespace {

Shape random_shape(std::mt19937_64& rng, int min_rank, int max_rank, int64_t lo = 1,
                   int64_t hi = 4) {
  std::uniform_int_distribution<int> rank(min_rank, max_rank);
  std::uniform_int_distribution<int64_t> dim(lo, hi);
  Shape s(static_cast<size_t>(rank(rng)));
  for (auto& d : s) d = dim(rng);
  return s;
}

size_t count_op(const Graph& g, std::string_view op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += node.op_name() == op;
  return n;
}

bool fired(const OptimizeReport& r, std::string_view rule) {
  for (const RuleFired& f : r.rules) {
    if (f.name == rule && f.count > 0) return true;
  }
  return false;
}

std::string fired_list(const OptimizeReport& r) {
  std::string s;
  for (const RuleFired& f : r.rules) s += f.name + "×" + std::to_string(f.count) + " ";
  return s;
}

Tensor op(std::string_view name, Attrs attrs, std::vector<Tensor> in) {
  return in[0].graph().apply(name, std::move(attrs), in);
}

struct RuleCase {
  const char* rule;
  // Builds the graph; returns the output (the harness wraps it in exp so it is a compute node).
  std::function<Tensor(Graph&, std::mt19937_64&)> build;
  size_t nodes_after;        // compute nodes expected after optimization
  const char* present = "";  // an op that must be in the optimized graph
  const char* absent = "";   // an op that must not
};

void check(const RuleCase& c) {
  for (int instance = 0; instance < 4; ++instance) {
    auto rng = testing::rng_for(std::string(c.rule) + std::to_string(instance));
    Graph g;
    Tensor y = c.build(g, rng);
    g.output("y", exp(y));
    OptimizeResult r = optimize(g);
    SCOPED_TRACE(std::string(c.rule) + " instance " + std::to_string(instance) + "\n" + g.str() +
                 "-> \n" + r.graph.str() + "fired: " + fired_list(r.report));
    EXPECT_EQ(r.report.stop_reason, "saturated");
    EXPECT_TRUE(fired(r.report, c.rule));
    EXPECT_EQ(r.report.nodes_after, c.nodes_after);
    if (*c.present) EXPECT_GT(count_op(r.graph, c.present), 0u);
    if (*c.absent) EXPECT_EQ(count_op(r.graph, c.absent), 0u);
    auto feeds = testing::random_feeds(g, rng);
    EXPECT_LE(testing::step_difference(g, r.graph, feeds), 1e-9);
  }
}

Tensor input(Graph& g, std::mt19937_64& rng, const char* name = "x", int min_rank = 1,
             int max_rank = 3) {
  return g.input(name, random_shape(rng, min_rank, max_rank));
}

// x ∘ c with the scalar on either side, built with apply so no helper simplifies it.
Tensor with_scalar(const char* opname, Tensor x, double c, bool right) {
  Tensor s = x.graph().scalar(c);
  return right ? op(opname, {}, {x, s}) : op(opname, {}, {s, x});
}

TEST(AlgebraRules, NeutralElements) {
  check({"mul-one", [](Graph& g, auto& rng) { return with_scalar("mul", input(g, rng), 1, true); },
         1});
  check({"one-mul", [](Graph& g, auto& rng) { return with_scalar("mul", input(g, rng), 1, false); },
         1});
  check({"add-zero", [](Graph& g, auto& rng) { return with_scalar("add", input(g, rng), 0, true); },
         1});
  check({"zero-add",
         [](Graph& g, auto& rng) { return with_scalar("add", input(g, rng), 0, false); }, 1});
  check({"sub-zero", [](Graph& g, auto& rng) { return with_scalar("sub", input(g, rng), 0, true); },
         1});
  check({"div-one", [](Graph& g, auto& rng) { return with_scalar("div", input(g, rng), 1, true); },
         1});
  // A full-size ones tensor (as autodiff seeds cotangents) is neutral too.
  check({"mul-one",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           Tensor ones = op("broadcast_to", BroadcastToAttrs{x.shape()}, {g.scalar(1.0)});
           return op("mul", {}, {x, ones});
         },
         1});
}

TEST(AlgebraRules, NeutralElementThatWidensIsKept) {
  // x [n] * ones [2, n] is a broadcast, not x: the rule must not fire.
  Graph g;
  Tensor x = g.input("x", {3});
  Tensor ones = g.constant(Array::full({2, 3}, 1.0));
  g.output("y", op("mul", {}, {x, ones}));
  OptimizeResult r = optimize(g);
  EXPECT_FALSE(fired(r.report, "mul-one"));
  EXPECT_EQ(r.graph.node(r.graph.outputs()[0].second).type, (TensorType{{2, 3}, DType::f32}));
  auto rng = testing::rng_for("widen");
  EXPECT_LE(testing::step_difference(g, r.graph, testing::random_feeds(g, rng)), 1e-12);
}

// A tied embedding's gradient: the head's product plus the lookup's scatter into zeros becomes a
// scatter into the product; not when the product is a widened 16-bit one.
Tensor scatter_sum(Graph& g, Tensor x, bool scatter_first) {
  Tensor idx = g.constant(Array({4}, DType::i32, {0, 2, 2, 5}));
  Tensor zeros = op("broadcast_to", BroadcastToAttrs{x.shape()}, {g.scalar(0.0)});
  Tensor u = g.input("u", {4, x.shape()[1]});
  Tensor s = op("scatter_add", ScatterAddAttrs{0}, {zeros, idx, u});
  return scatter_first ? op("add", {}, {s, x}) : op("add", {}, {x, s});
}

TEST(AlgebraRules, GradientsScatterIntoTheOtherContribution) {
  for (const bool first : {false, true}) {
    check({first ? "scatter-add-into" : "add-scatter-into",
           [first](Graph& g, auto&) {
             return scatter_sum(g, g.input("x", {6, 3}), first);
           },
           2, "scatter_add", "add"});
  }
  Graph g;
  Tensor a = g.input("a", {6, 8}, DType::bf16), b = g.input("b", {8, 3}, DType::bf16);
  g.output("y", exp(scatter_sum(g, cast(op("matmul", MatmulAttrs{}, {a, b}), DType::f32), false)));
  OptimizeResult r = optimize(g);
  EXPECT_FALSE(fired(r.report, "add-scatter-into")) << fired_list(r.report);
  EXPECT_EQ(count_op(r.graph, "add"), 1u);
}

TEST(AlgebraRules, Signs) {
  check({"zero-sub",
         [](Graph& g, auto& rng) { return with_scalar("sub", input(g, rng), 0, false); }, 2, "neg",
         "sub"});
  check({"mul-minus-one",
         [](Graph& g, auto& rng) { return with_scalar("mul", input(g, rng), -1, true); }, 2, "neg",
         "mul"});
  check({"minus-one-mul",
         [](Graph& g, auto& rng) { return with_scalar("mul", input(g, rng), -1, false); }, 2, "neg",
         "mul"});
  check({"neg-neg",
         [](Graph& g, auto& rng) { return op("neg", {}, {op("neg", {}, {input(g, rng)})}); }, 1});
  auto pair = [](Graph& g, std::mt19937_64& rng) {
    Shape s = random_shape(rng, 1, 3);
    return std::pair{g.input("x", s), g.input("z", s)};
  };
  check({"add-neg",
         [pair](Graph& g, auto& rng) {
           auto [x, y] = pair(g, rng);
           return op("add", {}, {x, op("neg", {}, {y})});
         },
         2, "sub", "neg"});
  check({"neg-add",
         [pair](Graph& g, auto& rng) {
           auto [x, y] = pair(g, rng);
           return op("add", {}, {op("neg", {}, {x}), y});
         },
         2, "sub", "neg"});
  check({"sub-neg",
         [pair](Graph& g, auto& rng) {
           auto [x, y] = pair(g, rng);
           return op("sub", {}, {x, op("neg", {}, {y})});
         },
         2, "add", "neg"});
  check({"neg-sub",
         [pair](Graph& g, auto& rng) {
           auto [x, y] = pair(g, rng);
           return op("neg", {}, {op("sub", {}, {x, y})});
         },
         2, "sub", "neg"});
}

TEST(AlgebraRules, IdentityOps) {
  check({"identity-broadcast_to",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           return op("broadcast_to", BroadcastToAttrs{x.shape()}, {x});
         },
         1, "", "broadcast_to"});
  check({"identity-sum_to",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           return op("sum_to", SumToAttrs{x.shape()}, {x});
         },
         1, "", "sum_to"});
  check({"identity-cast",
         [](Graph& g, auto& rng) { return op("cast", CastAttrs{DType::f32}, {input(g, rng)}); }, 1,
         "", "cast"});
  check({"identity-stop_gradient",
         [](Graph& g, auto& rng) { return op("stop_gradient", {}, {input(g, rng)}); }, 1, "",
         "stop_gradient"});
  check({"identity-slice",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           return op("slice", SliceAttrs{0, 0, x.shape()[0], 1}, {x});
         },
         1, "", "slice"});
  check({"identity-reshape",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           return op("reshape", ReshapeAttrs{x.shape()}, {x});
         },
         1, "", "reshape"});
  check({"identity-permute",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           std::vector<int64_t> id;
           for (int i = 0; i < x.rank(); ++i) id.push_back(i);
           return op("permute", PermuteAttrs{id}, {x});
         },
         1, "", "permute"});
}

TEST(AlgebraRules, ViewAndPermutationChains) {
  check({"reshape-reshape",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 2, 3, 2, 4));
           Tensor flat = op("reshape", ReshapeAttrs{{x.numel()}}, {x});
           return op("reshape", ReshapeAttrs{{1, x.numel()}}, {flat});
         },
         2, "reshape"});
  check({"reshape-unsqueeze",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 2, 3, 2, 4));
           Tensor u = op("unsqueeze", UnsqueezeAttrs{0}, {x});
           return op("reshape", ReshapeAttrs{{x.numel()}}, {u});
         },
         2, "reshape", "unsqueeze"});
  check({"squeeze-unsqueeze",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 1, 3, 2, 4));
           Tensor u = op("unsqueeze", UnsqueezeAttrs{1}, {x});
           return op("squeeze", SqueezeAttrs{{1}}, {u});
         },
         1, "", "squeeze"});
  check({"transpose-transpose",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng, "x", 2, 4);
           Tensor t = op("transpose", TransposeAttrs{0, -1}, {x});
           return op("transpose", TransposeAttrs{x.rank() - 1, 0}, {t});
         },
         1, "", "transpose"});
  check({"permute-permute",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 3, 3, 2, 5));
           Tensor p = op("permute", PermuteAttrs{{1, 2, 0}}, {x});
           return op("permute", PermuteAttrs{{1, 2, 0}}, {p});  // = {2, 0, 1}
         },
         2, "permute"});
  check({"permute-transpose",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 3, 3, 2, 5));
           Tensor t = op("transpose", TransposeAttrs{0, 2}, {x});
           return op("permute", PermuteAttrs{{2, 1, 0}}, {t});  // undoes it
         },
         1, "", "permute"});
  check({"permute-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 3, 3, 2, 5);
           s.insert(s.begin() + 1, 1);  // [a, 1, b, c] -> [a, b, 1, c]
           Tensor x = g.input("x", s);
           return op("permute", PermuteAttrs{{0, 2, 1, 3}}, {x});
         },
         2, "reshape", "permute"});
  check({"transpose-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 2, 2, 2, 5);
           s.push_back(1);
           Tensor x = g.input("x", s);
           return op("transpose", TransposeAttrs{1, 2}, {x});
         },
         2, "reshape", "transpose"});
}

// A permutation that reorders axes larger than 1 moves elements: it stays.
TEST(AlgebraRules, PermutationOfLargerAxesStays) {
  Graph g;
  Tensor x = g.input("x", {2, 1, 3, 4});
  g.output("y", exp(op("permute", PermuteAttrs{{0, 2, 1, 3}}, {op("permute", PermuteAttrs{{2, 1, 0, 3}}, {x})})));
  OptimizeResult r = optimize(g);
  EXPECT_EQ(count_op(r.graph, "permute") + count_op(r.graph, "transpose"), 1u) << r.graph.str();
}

TEST(AlgebraRules, TransposesFoldIntoMatmul) {
  auto operands = [](Graph& g, std::mt19937_64& rng) {
    std::uniform_int_distribution<int64_t> d(1, 5);
    const int64_t m = d(rng), k = d(rng), n = d(rng);
    Shape batch = random_shape(rng, 0, 1, 1, 3);
    Shape a = batch, b = batch;
    a.insert(a.end(), {k, m});  // stored transposed
    b.insert(b.end(), {n, k});
    return std::pair{g.input("a", a), g.parameter("b", b, Init::uniform(-1, 1, 3))};
  };
  check({"matmul-transpose-a",
         [operands](Graph& g, auto& rng) {
           auto [a, b] = operands(g, rng);
           Tensor bt = op("transpose", TransposeAttrs{-2, -1}, {b});
           return op("matmul", MatmulAttrs{}, {op("transpose", TransposeAttrs{-2, -1}, {a}), bt});
         },
         2, "matmul", "transpose"});
  check(
      {"matmul-permute-b",
       [operands](Graph& g, auto& rng) {
         auto [a, b] = operands(g, rng);
         std::vector<int64_t> perm;
         for (int i = 0; i < b.rank() - 2; ++i) perm.push_back(i);
         perm.push_back(b.rank() - 1);
         perm.push_back(b.rank() - 2);
         return op("matmul", MatmulAttrs{true, false}, {a, op("permute", PermuteAttrs{perm}, {b})});
       },
       2, "matmul", "permute"});
}

TEST(AlgebraRules, BroadcastOperands) {
  check({"add-broadcast-b",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 1, 3, 2, 4));  // wider than s
           Tensor s = g.input("s", {1});
           return op("add", {}, {x, op("broadcast_to", BroadcastToAttrs{x.shape()}, {s})});
         },
         2, "", "broadcast_to"});
  check({"mul-broadcast-a",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng, "x", 2, 3);
           Shape row(x.shape().end() - 1, x.shape().end());
           Tensor r = g.input("r", row);
           return op("mul", {}, {op("broadcast_to", BroadcastToAttrs{x.shape()}, {r}), x});
         },
         2, "", "broadcast_to"});
}

TEST(AlgebraRules, ConstantChains) {
  check({"mul-mul-constants",
         [](Graph& g, auto& rng) {
           return with_scalar("mul", with_scalar("mul", input(g, rng), 2, true), 4, true);
         },
         2, "mul"});
  check({"mul-constant-right",
         [](Graph& g, auto& rng) {
           return with_scalar("mul", with_scalar("mul", input(g, rng), 0.5, false), 4, false);
         },
         2, "mul"});
  check({"add-add-constants",
         [](Graph& g, auto& rng) {
           return with_scalar("add", with_scalar("add", input(g, rng), 2, true), 0.25, true);
         },
         2, "add"});
  check({"sub-add-constants",
         [](Graph& g, auto& rng) {
           return with_scalar("add", with_scalar("sub", input(g, rng), 2, true), 0.5, true);
         },
         2, "add", "sub"});
  check({"neg-mul-constant",
         [](Graph& g, auto& rng) {
           return op("neg", {}, {with_scalar("mul", input(g, rng), 3, true)});
         },
         2, "mul", "neg"});
  check({"div-constant",
         [](Graph& g, auto& rng) { return with_scalar("div", input(g, rng), 4, true); }, 2, "mul",
         "div"});
}

TEST(AlgebraRules, Reductions) {
  // Reducing or broadcasting only unit axes is a reshape.
  check({"sum_to-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           Shape with_one = s;
           with_one.insert(with_one.begin(), 1);
           return op("sum_to", SumToAttrs{s}, {g.input("x", with_one)});
         },
         2, "reshape", "sum_to"});
  check({"sum-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           s.push_back(1);
           return op("sum", ReduceAttrs{{static_cast<int64_t>(s.size() - 1)}, false},
                     {g.input("x", s)});
         },
         2, "reshape", "sum"});
  check({"mean-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           s.insert(s.begin(), 1);
           return op("mean", ReduceAttrs{{0}, false}, {g.input("x", s)});
         },
         2, "reshape", "mean"});
  check({"broadcast_to-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           Shape with_one = s;
           with_one.insert(with_one.begin(), 1);
           return op("broadcast_to", BroadcastToAttrs{with_one}, {g.input("x", s)});
         },
         2, "reshape", "broadcast_to"});
  // Negation and scalar factors move past the reduction.
  check({"sum_to-neg",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           Shape big = s;
           big.insert(big.begin(), 3);
           return op("sum_to", SumToAttrs{s}, {op("neg", {}, {g.input("x", big)})});
         },
         3, "neg"});
  check({"sum-mul-scalar",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 2, 3, 2, 4));
           Tensor scaled = op("mul", {}, {x, g.input("c", {})});
           return op("sum", ReduceAttrs{{0}, true}, {scaled});
         },
         3, "mul"});
}

TEST(AlgebraRules, MovingNegationPastAReductionShrinksIt) {
  Graph g;
  Tensor x = g.input("x", {64, 32});
  g.output("y", op("sum_to", SumToAttrs{{32}}, {op("neg", {}, {x})}));
  OptimizeResult r = optimize(g);
  EXPECT_TRUE(fired(r.report, "sum_to-neg"));
  // neg now runs on the 32 sums, not the 2048 inputs.
  const Node& out = r.graph.node(r.graph.outputs()[0].second);
  EXPECT_EQ(out.op_name(), "neg");
  EXPECT_LT(r.report.bytes_after, r.report.bytes_before);
  auto rng = testing::rng_for("neg_sum");
  EXPECT_LE(testing::step_difference(g, r.graph, testing::random_feeds(g, rng)), 1e-12);
}

// (x · 0) · c folds to x · 0 again: the class then contains (itself · c), and re-associating on
// that cycle once minted c², c³... until the time limit.
TEST(AlgebraRules, ConstantChainOnAZeroFactorSaturates) {
  Graph g;
  Tensor x = g.input("x", {1, 4});
  Tensor zero = g.apply("mul", {}, {g.constant(Array::full({1, 4}, 3.0)), g.scalar(0.0)});
  Tensor y =
      g.apply("mul", {}, {g.apply("mul", {}, {x, zero}), g.constant(Array::full({1, 4}, -4.0))});
  g.output("y", y);
  OptimizeResult r = optimize(g);
  EXPECT_EQ(r.report.stop_reason, "saturated");
  EXPECT_LT(r.report.enodes, 40u);
  auto rng = testing::rng_for("zero_chain");
  EXPECT_LE(testing::step_difference(g, r.graph, testing::random_feeds(g, rng)), 1e-12);
}

// The other members of the rule families above, one instance family each.
TEST(AlgebraRules, FamilyMembers) {
  check({"identity-squeeze",
         [](Graph& g, auto& rng) {
           return op("squeeze", SqueezeAttrs{}, {g.input("x", random_shape(rng, 1, 3, 2, 4))});
         },
         1, "", "squeeze"});
  check({"identity-transpose",
         [](Graph& g, auto& rng) {
           return op("transpose", TransposeAttrs{0, 0}, {input(g, rng, "x", 1, 3)});
         },
         1, "", "transpose"});
  check({"squeeze-reshape",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 1, 2, 2, 4));
           Shape s = x.shape();
           s.push_back(1);
           return op("squeeze", SqueezeAttrs{{static_cast<int64_t>(s.size() - 1)}},
                     {op("reshape", ReshapeAttrs{s}, {x})});
         },
         1, "", "squeeze"});
  check({"matmul-transpose-b",
         [](Graph& g, auto& rng) {
           Tensor a = input(g, rng, "a", 2, 2);
           Tensor b = g.parameter("b", {3, a.shape()[1]}, Init::uniform(-1, 1, 1));
           return op("matmul", MatmulAttrs{}, {a, op("transpose", TransposeAttrs{0, 1}, {b})});
         },
         2, "matmul", "transpose"});
  check({"sum-neg",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 2, 3, 2, 4));
           return op("sum", ReduceAttrs{{0}, false}, {op("neg", {}, {x})});
         },
         3, "neg"});
  check({"sum_to-mul-scalar",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           Shape big = s;
           big.insert(big.begin(), 3);
           Tensor scaled = op("mul", {}, {g.input("x", big), g.input("c", {})});
           return op("sum_to", SumToAttrs{s}, {scaled});
         },
         3, "mul"});
  check({"max-unit-axes",
         [](Graph& g, auto& rng) {
           Shape s = random_shape(rng, 1, 2, 2, 4);
           s.insert(s.begin() + 1, 1);
           return op("max", ReduceAttrs{{1}, false}, {g.input("x", s)});
         },
         2, "reshape", "max"});
  check({"sub-broadcast-a",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 1, 3, 2, 4));
           return op("sub", {},
                     {op("broadcast_to", BroadcastToAttrs{x.shape()}, {g.scalar(0.5)}), x});
         },
         2, "", "broadcast_to"});
  check({"maximum-broadcast-b",
         [](Graph& g, auto& rng) {
           Tensor x = g.input("x", random_shape(rng, 2, 3, 2, 4));
           Tensor row = g.input("r", {x.shape().back()});
           return op("maximum", {}, {x, op("broadcast_to", BroadcastToAttrs{x.shape()}, {row})});
         },
         2, "", "broadcast_to"});
  check({"add-constant-right",
         [](Graph& g, auto& rng) {
           Tensor x = input(g, rng);
           return op("add", {}, {g.scalar(2.0), op("add", {}, {g.scalar(0.5), x})});
         },
         2, "add"});
}

TEST(AlgebraRules, TransposedProductsAndNegatedFactors) {
  check({"transpose-matmul",
         [](Graph& g, auto& rng) {
           std::uniform_int_distribution<int64_t> d(1, 5);
           Shape batch = random_shape(rng, 0, 1, 1, 3);
           Shape a = batch, b = batch;
           const int64_t m = d(rng), k = d(rng), n = d(rng);
           a.insert(a.end(), {m, k});
           b.insert(b.end(), {n, k});
           const bool tb = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
           if (!tb) std::swap(b[b.size() - 2], b[b.size() - 1]);
           Tensor p = op("matmul", MatmulAttrs{false, tb}, {g.input("a", a), g.input("b", b)});
           return op("transpose", TransposeAttrs{-2, -1}, {p});
         },
         2, "matmul", "transpose"});
  check({"mul-neg-constant",
         [](Graph& g, auto& rng) {
           return op("mul", {}, {op("neg", {}, {input(g, rng)}), g.scalar(0.5)});
         },
         2, "mul", "neg"});
}

TEST(AlgebraRules, DivisionByNonPowerOfTwoStays) {
  Graph g;
  Tensor x = g.input("x", {4});
  g.output("y", op("div", {}, {x, g.scalar(3.0)}));
  OptimizeResult r = optimize(g);
  EXPECT_FALSE(fired(r.report, "div-constant"));
  EXPECT_EQ(count_op(r.graph, "div"), 1u);
}

TEST(AlgebraRules, ConstantFoldingRemovesConstantSubgraphs) {
  Graph g;
  Tensor x = g.input("x", {3, 4});
  Tensor c = exp(g.constant(Array::full({4}, 0.5))) * g.scalar(2.0) - g.scalar(1.0);
  g.output("y", x * c);
  OptimizeResult r = optimize(g);
  EXPECT_EQ(r.report.nodes_before, 4u);
  EXPECT_EQ(r.report.nodes_after, 1u);
  EXPECT_LT(r.report.bytes_after, r.report.bytes_before);
  auto rng = testing::rng_for("fold_graph");
  // The folded constant is stored in f32 like every graph constant: f32 rounding, no more.
  EXPECT_LE(testing::step_difference(g, r.graph, testing::random_feeds(g, rng)), 1e-7);
}

}  // namespace
}  // namespace mn::optimize
