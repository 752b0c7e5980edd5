// Attention's training ops in the graph language: which vjp form a graph gets, and the errors
// of badly shaped operands (the reference values and gradients are checked by the op table's
// harnesses, tests/ir/op_table_test.cpp and tests/conformance/).
#include <gtest/gtest.h>

#include <functional>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "ir/ops/attention.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

size_t count_ops(const Graph& g, std::string_view op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += node.op_name() == op;
  return n;
}

TEST(AttentionTrainingOps, VjpFormFollowsTheOperands) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  {
    Graph g;
    Tensor q = g.input("q", {2, 4, 5, 8}), k = g.input("k", {2, 2, 5, 8});
    Tensor v = g.input("v", {2, 2, 5, 8});
    gradients(sum(scaled_dot_product_attention(q, k, v, {}, true)), {q, k, v});
    EXPECT_EQ(count_ops(g, "attention_lse"), 1u);
    EXPECT_EQ(count_ops(g, "attention_grad_q"), 1u);
    EXPECT_EQ(count_ops(g, "softmax"), 0u);
  }
  {
    // k and v broadcast over the batch: their gradients sum over its copies, in graph ops.
    Graph g;
    Tensor q = g.input("q", {2, 4, 5, 8}), k = g.input("k", {1, 2, 5, 8});
    Tensor v = g.input("v", {1, 2, 5, 8});
    gradients(sum(scaled_dot_product_attention(q, k, v)), {q, k, v});
    EXPECT_EQ(count_ops(g, "attention_grad_q"), 0u);
    EXPECT_EQ(count_ops(g, "softmax"), 1u);
  }
  {
    testing::ScopedEnv env("MN_ATTENTION_BACKWARD", "graph");
    Graph g;
    Tensor q = g.input("q", {4, 5, 8}), k = g.input("k", {4, 5, 8}), v = g.input("v", {4, 5, 8});
    gradients(sum(scaled_dot_product_attention(q, k, v)), {q, k, v});
    EXPECT_EQ(count_ops(g, "attention_grad_q"), 0u);
  }
}

void expect_refused(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// Unforced, the form follows the size of a layer's scores (32 MiB and up: the training ops) and
// the head width (at most 64: the training ops' register tiles).
TEST(AttentionTrainingOps, TheFormFollowsTheScoresSizeAndBadChoicesAreRefused) {
  struct Case {
    Shape q, kv;
    bool kernels;
  };
  // 2 × 8 × 1024² f32 scores are 64 MiB; 8 × 256² are 2 MiB.
  for (const Case& c : {Case{{2, 8, 1024, 64}, {2, 2, 1024, 64}, true},
                        Case{{8, 256, 64}, {8, 256, 64}, false},
                        Case{{2, 8, 1024, 128}, {2, 2, 1024, 128}, false}}) {
    Graph g;
    Tensor q = g.input("q", c.q), k = g.input("k", c.kv), v = g.input("v", c.kv);
    gradients(sum(scaled_dot_product_attention(q, k, v, {}, true)), {q, k, v});
    EXPECT_EQ(count_ops(g, "attention_grad_q"), c.kernels ? 1u : 0u) << shape_str(c.q);
    EXPECT_EQ(count_ops(g, "softmax"), c.kernels ? 0u : 1u) << shape_str(c.q);
  }
  testing::ScopedEnv bad("MN_ATTENTION_BACKWARD", "flash");
  Graph h;
  Tensor hq = h.input("q", {4, 5, 8});
  EXPECT_THROW(gradients(sum(scaled_dot_product_attention(hq, hq, hq)), {hq}), Error);
}

TEST(AttentionTrainingOps, BadOperandsAreRefused) {
  Graph g;
  Tensor q = g.input("q", {2, 4, 5, 8}), k = g.input("k", {2, 2, 6, 8});
  Tensor v = g.input("v", {2, 2, 6, 3}), dout = g.input("dout", {2, 4, 5, 3});
  Tensor rows = g.input("rows", {2, 4, 5}), short_rows = g.input("short", {2, 4, 4});
  Tensor k1 = g.input("k1", {1, 2, 6, 8}), v1 = g.input("v1", {1, 2, 6, 3});
  const AttentionAttrs causal{true, 0.0, false};
  EXPECT_EQ(g.apply("attention_lse", causal, {q, k}).shape(), (Shape{2, 4, 5}));
  EXPECT_EQ(g.apply("attention_grad_v", causal, {q, k, dout, rows}).shape(), (Shape{2, 2, 6, 3}));
  EXPECT_EQ(g.apply("attention_grad_k", causal, {q, k, v, dout, rows, rows}).shape(),
            (Shape{2, 2, 6, 8}));
  expect_refused([&] { g.apply("attention_grad_q", causal, {q, k, v, dout, rows}); },
                 "operands q, k, v, dout, lse, delta");
  expect_refused([&] { g.apply("attention_grad_k", causal, {q, k, v, dout, short_rows, rows}); },
                 "lse and delta of shape [2, 4, 5]");
  expect_refused([&] { g.apply("attention_grad_k", causal, {q, k, v, q, rows, rows}); },
                 "dout of the output's shape");
  expect_refused([&] { g.apply("attention_grad_q", causal, {q, k1, v1, dout, rows, rows}); },
                 "q, k, v with the same leading (batch) axes");
  expect_refused([&] { g.apply("attention_lse", causal, {q, k1}); },
                 "q, k, v with the same leading (batch) axes");
  expect_refused([&] { g.apply("attention_lse", AttentionAttrs{false, 0.0, true}, {q, k}); },
                 "operands q, k, mask");
  expect_refused([&] { g.apply("attention_grad_v", causal, {q, k, dout, short_rows}); },
                 "lse of shape [2, 4, 5]");
  // 16-bit operands: lse and delta of their dtype or f32 (what the vjp makes), nothing else;
  // the operands themselves of one dtype.
  Tensor qh = g.input("qh", {2, 4, 5, 8}, DType::bf16),
         kh = g.input("kh", {2, 2, 6, 8}, DType::bf16);
  Tensor vh = g.input("vh", {2, 2, 6, 3}, DType::bf16);
  Tensor douth = g.input("douth", {2, 4, 5, 3}, DType::bf16);
  Tensor rows16 = g.input("rows16", {2, 4, 5}, DType::f16);
  EXPECT_EQ(g.apply("attention_lse", causal, {qh, kh}).dtype(), DType::f32);
  EXPECT_EQ(g.apply("attention_grad_q", causal, {qh, kh, vh, douth, rows, rows}).dtype(),
            DType::bf16);
  expect_refused(
      [&] {
        g.apply("attention_grad_q", causal, {qh, kh, vh, douth, rows16, rows});
      },
      "lse and delta of q's dtype or f32");
  expect_refused(
      [&] {
        g.apply("attention_grad_q", causal, {qh, kh, vh, dout, rows, rows});
      },
      "operands of the same dtype");
}

}  // namespace
}  // namespace mn
