// The mixed-precision rewrite (optimize/mixed_precision.h): each f32 matmul becomes a product of
// 16-bit operands stored in 16 bits and widened for its consumers; an operand that widens a
// tensor already in that dtype is used as it is; other ops and non-f32 products are left alone;
// the rewritten graph's reference values are the product of the rounded operands.
#include <gtest/gtest.h>

#include <map>

#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>

#include "optimize/mixed_precision.h"
#include "plan/step_plan.h"

namespace mn::optimize {
namespace {

std::map<std::string, int> op_counts(const Graph& g) {
  std::map<std::string, int> c;
  for (NodeId i = 0; i < static_cast<NodeId>(g.size()); ++i) ++c[std::string(g.node(i).op_name())];
  return c;
}

TEST(MixedPrecisionRewrite, CastsAroundEachF32Product) {
  Graph g;
  Tensor x = g.input("x", {16, 32});
  Tensor w = g.parameter("w", {32, 16}, Init::ones());
  Tensor wb = g.parameter("wb", {24, 16}, Init::ones(), DType::bf16);
  Tensor h = matmul(x, w);                                  // f32 operands: rewritten
  Tensor y = matmul(h, cast(wb, DType::f32), false, true);  // a widened bf16 weight
  g.output("y", exp(y));
  const auto before = op_counts(g);
  const Graph m = with_mixed_precision(g, DType::bf16);
  const auto after = op_counts(m);
  EXPECT_EQ(after.at("matmul"), 2);
  EXPECT_EQ(after.at("exp"), 1);
  // Casts: the graph's own widening of wb (copied, now unread), x and w narrowed, the first
  // product widened for its other readers, the second product widened. h is not narrowed again:
  // the second product reads the first one's bf16 result directly.
  EXPECT_EQ(before.at("cast"), 1);
  EXPECT_EQ(after.at("cast"), 5);
  for (NodeId i = 0; i < static_cast<NodeId>(m.size()); ++i) {
    const Node& n = m.node(i);
    if (n.op_name() != "matmul") continue;
    EXPECT_EQ(n.type.dtype, DType::bf16);
    for (NodeId in : n.inputs) {
      const Node& operand = m.node(in);
      EXPECT_EQ(operand.type.dtype, DType::bf16);
      // The bf16 weight is read as stored, never rounded through f32 again.
      if (operand.op_name() == "cast") EXPECT_NE(m.node(operand.inputs[0]).name, "wb");
    }
  }
  EXPECT_EQ(m.node(*m.find_output("y")).type.dtype, DType::f32);
}

TEST(MixedPrecisionRewrite, LeavesOtherProductsAndF32Alone) {
  Graph g;
  Tensor a = g.input("a", {4, 8}, DType::f16);
  Tensor b = g.input("b", {8, 4}, DType::f16);
  g.output("c", matmul(a, b));
  EXPECT_EQ(op_counts(with_mixed_precision(g, DType::bf16)), op_counts(g));
  Graph f;
  f.output("c", matmul(f.input("a", {16, 32}), f.input("b", {32, 16})));
  EXPECT_EQ(op_counts(with_mixed_precision(f, DType::f32)), op_counts(f));
  EXPECT_NE(op_counts(with_mixed_precision(f, DType::bf16)), op_counts(f));
  EXPECT_THROW(with_mixed_precision(f, DType::i32), Error);
  // Matrix-vector products (a decoded token) and products under 16 columns stay f32.
  Graph v;
  v.output("row", matmul(v.input("x", {1, 64}), v.input("w", {64, 64})));
  v.output("narrow", matmul(v.input("y", {64, 64}), v.input("u", {64, 8})));
  EXPECT_EQ(op_counts(with_mixed_precision(v, DType::bf16)), op_counts(v));
}

TEST(MixedPrecisionRewrite, ReferenceRoundsOperandsAndProduct) {
  Graph g;
  g.output("c", matmul(g.input("a", {16, 2}), g.input("b", {2, 16})));
  const Graph m = with_mixed_precision(g, DType::bf16);
  // Element (0, 0) = a[0]·b[:, 0]. 1 + 2^-9 rounds to 1 in bf16 (8 significant bits); 1 + 2^-7
  // and 3 are exact. The reference computes the product of the rounded operands exactly (a
  // 16-bit result's own rounding is the device's storage, which the session tests bound).
  std::vector<double> a(32, 0.0), b(32, 0.0);
  a[0] = 1 + 0x1p-9;
  a[1] = 3;
  b[0] = 1;
  b[16] = 1 + 0x1p-7;
  reference::Feeds f{{"a", Array({16, 2}, DType::f32, a)}, {"b", Array({2, 16}, DType::f32, b)}};
  EXPECT_EQ(reference::evaluate(g, f).at("c").data[0], 1 + 0x1p-9 + 3 * (1 + 0x1p-7));
  EXPECT_EQ(reference::evaluate(m, f).at("c").data[0], 1 + 3 * (1 + 0x1p-7));
}

// The op of `t`'s node and of its operand: "cast<-reshape" reads as cast(reshape(...)).
std::string chain(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return std::string(n.op_name()) + "<-" + std::string(g.node(n.inputs[0]).op_name());
}

TEST(CastsThroughMovement, WideningsMoveToConsumersNarrowingsToProducers) {
  Graph g;
  Tensor x = g.input("x", {4, 6});
  Tensor w = g.input("w", {6, 8}, DType::bf16);
  // A 16-bit product widened, then reshaped and permuted before its pointwise reader.
  Tensor p = matmul(cast(x, DType::bf16), w);
  Tensor moved = permute(reshape(cast(p, DType::f32), {4, 2, 4}), {1, 0, 2});
  g.output("y", exp(moved));
  // A computed value reshaped, then narrowed.
  Tensor h = x * 3.0;
  g.output("n", cast(reshape(h, {24}), DType::bf16));
  // A stored 16-bit tensor widened and reshaped: left for the kernels that read it widened.
  g.output("ws", reshape(cast(w, DType::f32), {48}) * 2.0);
  const Graph m = casts_through_movement(g);
  const NodeId y = m.node(*m.find_output("y")).inputs[0];
  EXPECT_EQ(chain(m, y), "cast<-permute");
  EXPECT_EQ(chain(m, m.node(y).inputs[0]), "permute<-reshape");
  EXPECT_EQ(m.node(m.node(y).inputs[0]).type.dtype, DType::bf16);
  const NodeId n = *m.find_output("n");
  EXPECT_EQ(chain(m, n), "reshape<-cast");
  EXPECT_EQ(chain(m, m.node(n).inputs[0]), "cast<-mul");
  const NodeId ws = m.node(*m.find_output("ws")).inputs[0];
  EXPECT_EQ(chain(m, ws), "reshape<-cast");
  // Exact: the same values, bit for bit.
  reference::Feeds f{{"x", Array({4, 6}, DType::f32, std::vector<double>(24, 0.3))},
                     {"w", Array({6, 8}, DType::bf16, std::vector<double>(48, 0.75))}};
  for (int i = 0; i < 24; ++i) f.at("x").data[static_cast<size_t>(i)] = 0.1 * i - 1.1;
  const auto before = reference::evaluate(g, f), after = reference::evaluate(m, f);
  for (const char* out : {"y", "n", "ws"}) EXPECT_EQ(before.at(out).data, after.at(out).data) << out;
}

// A 16-bit value widened and narrowed back to its own dtype is read as it is; one narrowed to
// another dtype is not.
TEST(CastsThroughMovement, RoundTripsBackToTheSameDtypeVanish) {
  Graph g;
  Tensor p = matmul(g.input("a", {16, 16}, DType::bf16), g.input("b", {16, 16}, DType::bf16));
  Tensor wide = cast(p, DType::f32);
  g.output("same", matmul(cast(wide, DType::bf16), g.input("c", {16, 16}, DType::bf16)));
  g.output("other", cast(wide, DType::f16));
  const Graph m = casts_through_movement(g);
  const Node& same = m.node(*m.find_output("same"));
  EXPECT_EQ(m.node(same.inputs[0]).op_name(), "matmul");
  EXPECT_EQ(chain(m, *m.find_output("other")), "cast<-cast");
}

// In a bf16 training plan every product takes 16-bit operands, the attention products (scores,
// probabilities times values, and their gradients) included.
TEST(MixedPrecisionPlan, EveryProductOfATransformerStepIsBf16) {
  TransformerSpec spec = smollm2_135m();
  spec.layers = 1;
  spec.vocab = 512;
  spec.sequence = 64;
  LanguageModel m = build_transformer(spec);
  add_training_step(m.loss, Optimizer::adamw());
  plan::PlanOptions po;
  po.precision = DType::bf16;
  po.device.storage_16bit = true;
  const plan::StepPlan p = plan::make_step_plan(*m.graph, po);
  int products = 0, batched = 0;
  for (NodeId n = 0; n < static_cast<NodeId>(p.graph.size()); ++n) {
    const Node& x = p.graph.node(n);
    if (x.op_name() != "matmul") continue;
    ++products;
    batched += x.type.shape.size() > 3;
    EXPECT_EQ(x.type.dtype, DType::bf16) << shape_str(x.type.shape);
    for (NodeId i : x.inputs) EXPECT_EQ(p.graph.node(i).type.dtype, DType::bf16);
  }
  EXPECT_GE(products, 20);
  EXPECT_GE(batched, 6);  // the attention products, per head
}

}  // namespace
}  // namespace mn::optimize
