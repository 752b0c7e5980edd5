#include "optimize/tensor_egraph.h"

#include <gtest/gtest.h>

#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>

#include "egraph/extract.h"
#include "ir/ops/matmul.h"
#include "optimize_test_util.h"

namespace mn::optimize {
namespace {

// graph -> e-graph -> extraction (one unit per node) -> graph.
Graph round_trip(const Graph& g, size_t* classes = nullptr) {
  TensorEGraph eg;
  GraphRoots roots = eg.add_graph(g);
  eg.egraph().rebuild();
  std::vector<Id> r = roots.all();
  auto ex = egraph::extract_dag(eg.egraph(), r,
                                [](const egraph::EGraph&, const egraph::ENode&) { return 1.0; });
  if (classes) *classes = eg.egraph().num_classes();
  return eg.to_graph(g, roots, ex);
}

TEST(TensorEGraph, OpsAndAttrs) {
  TensorEGraph eg;
  EXPECT_EQ(eg.op_def(eg.op("matmul")).name, "matmul");
  EXPECT_FALSE(eg.find_op("no_such_op"));
  EXPECT_THROW(eg.op("no_such_op"), Error);
  EXPECT_EQ(eg.intern(Attrs{}), 0u);
  Attrs a = MatmulAttrs{true, false};
  const auto w = eg.intern(a);
  EXPECT_EQ(eg.intern(MatmulAttrs{true, false}), w);
  EXPECT_NE(eg.intern(MatmulAttrs{false, true}), w);
  EXPECT_TRUE(eg.attrs_as<MatmulAttrs>(w).transpose_a);
}

TEST(TensorEGraph, TypesAndTryAdd) {
  Graph g;
  Tensor x = g.input("x", {3, 4});
  Tensor w = g.parameter("w", {4, 5});
  g.output("y", matmul(x, w));
  TensorEGraph eg;
  GraphRoots roots = eg.add_graph(g);
  const Id cx = roots.node_class[static_cast<size_t>(x.id())];
  const Id cw = roots.node_class[static_cast<size_t>(w.id())];
  EXPECT_EQ(eg.type(roots.outputs[0].second), (TensorType{{3, 5}, DType::f32}));
  Id mm[] = {cx, cw};
  EXPECT_EQ(eg.add("matmul", MatmulAttrs{}, {cx, cw}), roots.outputs[0].second);
  // x·x does not type-check: a clean "no", and add() throws a ShapeError.
  EXPECT_FALSE(eg.try_add("matmul", MatmulAttrs{}, {cx, cx}));
  EXPECT_THROW(eg.add("matmul", MatmulAttrs{}, {cx, cx}), ShapeError);
  // xᵀ-flagged product of [3,4]ᵀ·[3,4] is [4,4]: fine, but not of the output's type.
  Id xx[] = {cx, cx};
  EXPECT_TRUE(eg.try_add(op_def("matmul"), MatmulAttrs{true, false}, xx));
  EXPECT_FALSE(eg.try_add_typed(op_def("matmul"), MatmulAttrs{true, false}, xx,
                                eg.type(roots.outputs[0].second)));
  EXPECT_TRUE(
      eg.try_add_typed(op_def("matmul"), MatmulAttrs{}, mm, eg.type(roots.outputs[0].second)));
  EXPECT_EQ(eg.constant(cx), nullptr);
}

TEST(TensorEGraph, ConstantFolding) {
  Graph g;
  Tensor x = g.input("x", {4});
  Tensor c = g.scalar(2.0) * g.scalar(3.0) + g.scalar(1.0);
  g.output("y", x * c);
  TensorEGraph eg;
  GraphRoots roots = eg.add_graph(g);
  eg.egraph().rebuild();
  const Id cc = roots.node_class[static_cast<size_t>(c.id())];
  ASSERT_NE(eg.constant(cc), nullptr);
  EXPECT_EQ(eg.uniform_value(cc), 7.0);
  // The folded literal joined the class: the same class as a literal 7.
  EXPECT_EQ(eg.egraph().find(eg.scalar(7.0, DType::f32)), eg.egraph().find(cc));
  // Nothing that reads an input is folded.
  EXPECT_EQ(eg.constant(roots.outputs[0].second), nullptr);
  // Extracting by node count picks the literal: y = x * 7.
  std::vector<Id> r = roots.all();
  auto ex = egraph::extract_dag(eg.egraph(), r,
                                [](const egraph::EGraph&, const egraph::ENode&) { return 1.0; });
  Graph out = eg.to_graph(g, roots, ex);
  EXPECT_EQ(out.size(), 3u);  // x, 7, mul
  auto rng = testing::rng_for("fold");
  auto feeds = testing::random_feeds(g, rng);
  EXPECT_LT(testing::step_difference(g, out, feeds), 1e-12);
}

TEST(TensorEGraph, RoundTripKeepsNamesAndValues) {
  Graph g;
  Tensor x = g.input("x", {2, 3});
  Tensor w = g.parameter("w", {3, 3}, Init::uniform(-1, 1, 7));
  Tensor s = g.state("s", {2, 3}, Init::ones());
  Tensor unused = g.parameter("unused", {5}, Init::ones());
  (void)unused;
  Tensor y = relu(matmul(x, w)) + s;
  g.output("y", y);
  g.output("y_again", y);
  g.assign(s, y * g.scalar(0.5));
  Graph out = round_trip(g);
  ASSERT_EQ(out.inputs().size(), 1u);
  ASSERT_EQ(out.parameters().size(), 2u);
  ASSERT_EQ(out.states().size(), 1u);
  EXPECT_EQ(out.node(out.parameters()[0]).name, "w");
  EXPECT_EQ(out.node(out.parameters()[1]).name, "unused");
  EXPECT_EQ(out.node(out.parameters()[0]).attrs, g.node(w.id()).attrs);
  ASSERT_EQ(out.outputs().size(), 2u);
  EXPECT_EQ(out.outputs()[0].first, "y");
  EXPECT_EQ(out.outputs()[0].second, out.outputs()[1].second);  // shared, not duplicated
  ASSERT_EQ(out.assignments().size(), 1u);
  EXPECT_EQ(out.node(out.assignments()[0].first).name, "s");
  auto rng = testing::rng_for("round_trip");
  EXPECT_EQ(testing::step_difference(g, out, testing::random_feeds(g, rng)), 0.0);
}

TEST(TensorEGraph, RoundTripTrainingSteps) {
  for (ModelKind kind : {ModelKind::mlp, ModelKind::cnn}) {
    ClassifierSpec spec;
    spec.kind = kind;
    spec.batch = 4;
    spec.hidden = {16};
    Classifier c = build_classifier(spec);
    add_training_step(c.loss, Optimizer::adamw());
    const Graph& g = *c.graph;
    size_t classes = 0;
    Graph out = round_trip(g, &classes);
    EXPECT_LE(out.size(), g.size()) << model_name(kind);
    EXPECT_GT(classes, g.size() / 2);
    auto rng = testing::rng_for(model_name(kind));
    auto feeds = testing::random_feeds(g, rng, spec.classes);
    for (const auto& [n, v] : step_scalars(Optimizer::adamw(), 1e-3, 1))
      feeds[n] = Array::scalar(v);
    EXPECT_LT(testing::step_difference(g, out, feeds), 1e-12) << model_name(kind);
  }
}

}  // namespace
}  // namespace mn::optimize
