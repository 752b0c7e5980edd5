// Recognition of the must-have composites, from the op table's decompositions and from the
// same forms written by hand with ops.h, with near misses that must stay primitive.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <meganeura/graph.h>

#include "composite_test_util.h"
#include "ir/ops/attention.h"
#include "ir/ops/elementwise.h"
#include "ir/ops/nn.h"

namespace mn::testing {
namespace {

// The op's decomposition, built in the operands' graph.
Tensor decomposed(const std::string& op, const Attrs& attrs, const std::vector<Tensor>& in) {
  const OpDef& def = op_def(op);
  std::vector<TensorType> types;
  std::vector<NodeId> ids;
  for (const Tensor& t : in) {
    types.push_back(t.type());
    ids.push_back(t.id());
  }
  Node node{&def, attrs, ids, def.infer(attrs, types), {}};
  return def.decompose(node, in);
}

// Runs the rules on `g` (output "y"), expects `op` with `attrs` in y's class, and the graph
// extracted with composites to evaluate like the original.
void expect_recognized(const Graph& g, const std::string& op, const Attrs& attrs) {
  auto run = run_composite_rules(g);
  auto found = run->find(g, "y", op);
  ASSERT_TRUE(found) << op << " not recognized in\n" << g.str();
  EXPECT_EQ(*found, attrs) << found->str() << " vs " << attrs.str();
  Graph out = run->extract(g, /*prefer_composites=*/true);
  EXPECT_EQ(count_op(out, op), 1u) << out.str();
  EXPECT_LT(eval_difference(g, out), 1e-6);
}

void expect_not_recognized(const Graph& g, const std::string& op) {
  auto run = run_composite_rules(g, {.decompose = false, .recognize = true});
  EXPECT_FALSE(run->find(g, "y", op)) << op << " wrongly recognized in\n" << g.str();
}

TEST(CompositeRecognize, SiluFromDecompositionAndByHand) {
  for (const Shape& s : {Shape{7}, Shape{3, 4}, Shape{2, 3, 5}}) {
    Graph g;
    Tensor x = g.input("x", s);
    g.output("y", decomposed("silu", NoAttrs{}, {x}));
    expect_recognized(g, "silu", NoAttrs{});
  }
  Graph h;
  Tensor x = h.input("x", {4, 6});
  h.output("y", x * sigmoid(x));
  expect_recognized(h, "silu", NoAttrs{});
}

// The root's operands in the other order (as exporters and people also write them): products and
// sums commute exactly, so these are the same computations.
TEST(CompositeRecognize, CommutedRoot) {
  {
    Graph g;
    Tensor x = g.input("x", {4, 6});
    g.output("y", sigmoid(x) * x);
    expect_recognized(g, "silu", NoAttrs{});
  }
  {
    Graph g;
    Tensor x = g.input("x", {2, 8});
    Tensor w = g.input("w", {8});
    g.output("y", w * (x * rsqrt(mean(x * x, {1}, true) + 1e-6)));
    expect_recognized(g, "rms_norm", RmsNormAttrs{1, 1e-6, true});
  }
  {
    Graph g;
    Tensor x = g.input("x", {2, 8});
    Tensor b = g.input("b", {8});
    Tensor xc = x - mean(x, {1}, true);
    g.output("y", b + xc * rsqrt(mean(xc * xc, {1}, true) + 1e-5));
    expect_recognized(g, "layer_norm", LayerNormAttrs{1, 1e-5, false, true});
  }
}

TEST(CompositeRecognize, SiluNearMisses) {
  Graph g;
  Tensor x = g.input("x", {4, 6});
  Tensor y = g.input("z", {4, 6});
  g.output("y", x * sigmoid(y));
  expect_not_recognized(g, "silu");
  Graph h;
  Tensor a = h.input("x", {4, 6});
  h.output("y", a * tanh(a));
  expect_not_recognized(h, "silu");
}

TEST(CompositeRecognize, SigmoidByHand) {
  Graph g;
  Tensor x = g.input("x", {3, 5});
  g.output("y", 1.0 / (1.0 + exp(neg(x))));
  expect_recognized(g, "sigmoid", NoAttrs{});
}

TEST(CompositeRecognize, Softmaxes) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int64_t axis : {0, 1, 2}) {
      Graph g;
      Tensor x = g.input("x", {2, 3, 4});
      g.output("y", decomposed(op, SoftmaxAttrs{axis}, {x}));
      expect_recognized(g, op, SoftmaxAttrs{axis});
    }
  }
  Graph h;
  Tensor x = h.input("x", {3, 8});
  Tensor e = exp(x - max(x, {-1}, true));
  h.output("y", e / sum(e, {-1}, true));
  expect_recognized(h, "softmax", SoftmaxAttrs{1});
  Graph l;
  Tensor z = l.input("x", {3, 8});
  Tensor shifted = z - max(z, {1}, true);
  l.output("y", shifted - log(sum(exp(shifted), {1}, true)));
  expect_recognized(l, "log_softmax", SoftmaxAttrs{1});
}

TEST(CompositeRecognize, SoftmaxNearMisses) {
  {  // max and sum along different axes
    Graph g;
    Tensor x = g.input("x", {3, 4, 5});
    Tensor e = exp(x - max(x, {1}, true));
    g.output("y", e / sum(e, {2}, true));
    expect_not_recognized(g, "softmax");
  }
  {  // the sum of another exp
    Graph g;
    Tensor x = g.input("x", {3, 4});
    Tensor e = exp(x - max(x, {1}, true));
    g.output("y", e / sum(exp(x), {1}, true));
    expect_not_recognized(g, "softmax");
  }
  {  // max over two axes
    Graph g;
    Tensor x = g.input("x", {3, 4, 5});
    Tensor e = exp(x - max(x, {1, 2}, true));
    g.output("y", e / sum(e, {1, 2}, true));
    expect_not_recognized(g, "softmax");
  }
}

TEST(CompositeRecognize, RmsNorm) {
  for (bool gamma : {false, true}) {
    for (int64_t dims : {1, 2}) {
      for (double eps : {1e-6, 1e-5}) {
        Graph g;
        Tensor x = g.input("x", {2, 3, 4});
        std::vector<Tensor> in{x};
        if (gamma) in.push_back(g.input("g", dims == 1 ? Shape{4} : Shape{3, 4}));
        RmsNormAttrs a{dims, eps, gamma};
        g.output("y", decomposed("rms_norm", a, in));
        expect_recognized(g, "rms_norm", a);
      }
    }
  }
  // As the transformer writes it: x * rsqrt(mean(x * x, -1, keepdims) + eps) * gamma.
  Graph h;
  Tensor x = h.input("x", {2, 5, 8});
  Tensor w = h.parameter("w", {8}, Init::uniform(0.5, 1.5, 3));
  h.output("y", x * rsqrt(mean(x * x, {-1}, true) + 1e-5) * w);
  expect_recognized(h, "rms_norm", RmsNormAttrs{1, 1e-5, true});
}

// 16-bit graphs: eps is stored rounded to the dtype (1e-6 becomes a subnormal f16); the
// attribute comes back as written.
TEST(CompositeRecognize, SixteenBitTypes) {
  for (DType t : {DType::f16, DType::bf16}) {
    Graph g;
    Tensor x = g.input("x", {3, 8}, t);
    Tensor w = g.input("w", {8}, t);
    g.output("y", x * rsqrt(mean(x * x, {1}, true) + 1e-6) * w);
    expect_recognized(g, "rms_norm", RmsNormAttrs{1, 1e-6, true});
    Graph h;
    Tensor z = h.input("x", {3, 8}, t);
    Tensor e = exp(z - max(z, {0}, true));
    h.output("y", e / sum(e, {0}, true));
    expect_recognized(h, "softmax", SoftmaxAttrs{0});
  }
}

TEST(CompositeRecognize, RmsNormNearMisses) {
  {  // normalized over a leading axis: no normalized_dims says that
    Graph g;
    Tensor x = g.input("x", {4, 6});
    g.output("y", x * rsqrt(mean(x * x, {0}, true) + 1e-6));
    expect_not_recognized(g, "rms_norm");
  }
  {  // eps as a vector, not one scalar
    Graph g;
    Tensor x = g.input("x", {4, 6});
    Tensor eps = g.constant(Array({6}, DType::f32, std::vector<double>(6, 1e-6)));
    g.output("y", x * rsqrt(mean(x * x, {1}, true) + eps));
    expect_not_recognized(g, "rms_norm");
  }
  {  // the mean square of another tensor
    Graph g;
    Tensor x = g.input("x", {4, 6});
    Tensor z = g.input("z", {4, 6});
    g.output("y", x * rsqrt(mean(z * z, {1}, true) + 1e-6));
    expect_not_recognized(g, "rms_norm");
  }
}

TEST(CompositeRecognize, LayerNorm) {
  for (bool gamma : {false, true}) {
    for (bool beta : {false, true}) {
      for (int64_t dims : {1, 2}) {
        Graph g;
        Tensor x = g.input("x", {2, 3, 4});
        std::vector<Tensor> in{x};
        const Shape trailing = dims == 1 ? Shape{4} : Shape{3, 4};
        if (gamma) in.push_back(g.input("g", trailing));
        if (beta) in.push_back(g.input("b", trailing));
        LayerNormAttrs a{dims, 1e-5, gamma, beta};
        g.output("y", decomposed("layer_norm", a, in));
        expect_recognized(g, "layer_norm", a);
      }
    }
  }
  Graph h;
  Tensor x = h.input("x", {3, 16});
  Tensor w = h.input("w", {16});
  Tensor b = h.input("b", {16});
  Tensor xc = x - mean(x, {1}, true);
  h.output("y", xc * rsqrt(mean(xc * xc, {1}, true) + 1e-3) * w + b);
  expect_recognized(h, "layer_norm", LayerNormAttrs{1, 1e-3, true, true});
}

TEST(CompositeRecognize, LayerNormNearMiss) {
  Graph g;  // centred, but the variance of the uncentred input
  Tensor x = g.input("x", {3, 16});
  Tensor xc = x - mean(x, {1}, true);
  g.output("y", xc * rsqrt(mean(x * x, {1}, true) + 1e-5));
  expect_not_recognized(g, "layer_norm");
}

TEST(CompositeRecognize, GeluBothApproximations) {
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    Graph g;
    Tensor x = g.input("x", {3, 7});
    g.output("y", decomposed("gelu", GeluAttrs{approx}, {x}));
    expect_recognized(g, "gelu", GeluAttrs{approx});
  }
  Graph h;
  Tensor x = h.input("x", {5});
  h.output("y", (0.5 * x) * (1.0 + erf(x / sqrt(x.graph().scalar(2.0)))));
  expect_recognized(h, "gelu", GeluAttrs{GeluApprox::none});
}

// Constants on the right of products and sums (as people write them, and where the algebra
// rules move them): x * 0.5, erf(...) + 1.
TEST(CompositeRecognize, ConstantsOnTheRight) {
  Graph g;
  Tensor x = g.input("x", {4, 5});
  g.output("y", (x * 0.5) * (erf(x / sqrt(g.scalar(2.0))) + 1.0));
  expect_recognized(g, "gelu", GeluAttrs{GeluApprox::none});
  Graph h;
  Tensor z = h.input("x", {6});
  h.output("y", 1.0 / (exp(neg(z)) + 1.0));
  expect_recognized(h, "sigmoid", NoAttrs{});
}

TEST(CompositeRecognize, GeluNearMiss) {
  Graph g;
  Tensor x = g.input("x", {5});
  g.output("y", (0.4 * x) * (1.0 + erf(x / sqrt(x.graph().scalar(2.0)))));
  expect_not_recognized(g, "gelu");
}

TEST(CompositeRecognize, Attention) {
  struct Case {
    std::vector<Shape> shapes;  // q, k, v [, mask]
    bool causal;
    double scale;
  };
  const Case cases[] = {
      {{{2, 4, 8}, {2, 4, 8}, {2, 4, 8}}, false, 0.0},
      {{{1, 2, 5, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}}, true, 0.0},
      {{{1, 4, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}}, true, 0.5},  // grouped-query heads
      {{{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, {2, 1, 3, 5}}, false, 0.25},  // mask
      {{{3, 4}, {5, 4}, {5, 2}}, false, 0.0},                                   // single head, 2-D
  };
  for (const Case& c : cases) {
    Graph g;
    std::vector<Tensor> in;
    for (size_t i = 0; i < c.shapes.size(); ++i)
      in.push_back(g.input("in" + std::to_string(i), c.shapes[i]));
    AttentionAttrs a{c.causal, c.scale, c.shapes.size() == 4};
    g.output("y", decomposed("scaled_dot_product_attention", a, in));
    expect_recognized(g, "scaled_dot_product_attention", a);
  }
}

TEST(CompositeRecognize, AttentionNearMiss) {
  // Causal mask built for the wrong diagonal (keys up to i + 1).
  Graph g;
  Tensor q = g.input("q", {1, 2, 3, 4});
  Tensor k = g.input("k", {1, 2, 3, 4});
  Tensor v = g.input("v", {1, 2, 3, 4});
  Tensor qg = reshape(q, {1, 2, 1, 3, 4});
  Tensor kg = reshape(k, {1, 2, 1, 3, 4});
  Tensor vg = reshape(v, {1, 2, 1, 3, 4});
  Tensor s = matmul(qg, kg, false, true) / sqrt(g.scalar(4.0));
  Array keep({3, 3}, DType::f32);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j <= std::min<int64_t>(i + 1, 2); ++j) keep.data[i * 3 + j] = 1.0;
  s = where(g.constant(keep), s, g.scalar(-std::numeric_limits<double>::infinity()));
  Tensor e = exp(s - max(s, {-1}, true));
  g.output("y", reshape(matmul(e / sum(e, {-1}, true), vg), {1, 2, 3, 4}));
  expect_not_recognized(g, "scaled_dot_product_attention");
}

// composite -> primitives: a graph of composites extracts, where primitives are preferred, with
// no composite left, and evaluates the same.
TEST(CompositeDecompose, PrimitiveExtractionKeepsValues) {
  Graph g;
  Tensor x = g.input("x", {2, 4, 8});
  Tensor w = g.input("w", {8});
  Tensor h = rms_norm(x, w, 1e-5);
  Tensor q = reshape(h, {2, 1, 4, 8});
  Tensor a = scaled_dot_product_attention(q, q, q, {}, true);
  Tensor y = gelu(reshape(a, {2, 4, 8}), GeluApprox::tanh) + silu(h);
  y = layer_norm(softmax(y, 1), w, w, 1, 1e-4);
  g.output("y", log_softmax(y, -1));
  auto run = run_composite_rules(g, {.decompose = true, .recognize = false});
  Graph out = run->extract(g, /*prefer_composites=*/false);
  for (const char* op : {"rms_norm", "scaled_dot_product_attention", "gelu", "silu", "sigmoid",
                         "layer_norm", "softmax", "log_softmax"}) {
    EXPECT_EQ(count_op(out, op), 0u) << op;
  }
  EXPECT_GT(count_op(out, "exp"), 0u);
  EXPECT_LT(eval_difference(g, out), 1e-5);
}

}  // namespace
}  // namespace mn::testing
