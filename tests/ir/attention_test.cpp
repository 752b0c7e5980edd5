// Forward values of scaled_dot_product_attention and rope: hand-computed cases, identities
// (grouped-query heads equal repeated heads, a large negative mask equals causal, rope turns by
// relative positions), and shape errors. Gradients: op_table_test (finite differences) and
// nn_torch_test (PyTorch).
#include <gtest/gtest.h>

#include <cmath>

#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/ops/attention.h"
#include "support/random_fill.h"

namespace mn {
namespace {

struct Fed {
  Graph g;
  reference::Feeds feeds;
  Tensor input(const std::string& name, Shape shape, std::vector<double> values) {
    Tensor t = g.input(name, shape);
    feeds[name] = Array(std::move(shape), DType::f32, std::move(values));
    return t;
  }
  Tensor random(const std::string& name, Shape shape, double lo = -1.0, double hi = 1.0) {
    auto rng = testing::rng_for("attention_test/" + name);
    Array a = testing::random_array(rng, {shape, DType::f32}, lo, hi);
    return input(name, std::move(shape), std::move(a.data));
  }
  Tensor zeros(const std::string& name, Shape shape) {
    const int64_t n = numel(shape);
    return input(name, std::move(shape), std::vector<double>(static_cast<size_t>(n), 0.0));
  }
  Array eval(Tensor t) {
    return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0];
  }
};

void expect_values(const Array& got, const std::vector<double>& want, double tol = 1e-13) {
  ASSERT_EQ(got.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data[i], want[i], tol) << "element " << i;
}

void expect_close(const Array& got, const Array& want, double tol = 1e-13) {
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LE(testing::relative_error(got, want), tol);
}

template <class E, class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const char* s : fragments)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

// ---- scaled_dot_product_attention ----

TEST(Attention, HandComputedSingleQuery) {
  Fed f;
  Tensor q = f.input("q", {1, 1, 2}, {1, 0});
  Tensor k = f.input("k", {1, 2, 2}, {1, 0, 0, 1});
  Tensor v = f.input("v", {1, 2, 2}, {1, 2, 3, 4});
  auto expected = [](double s0) {  // scores {s0, 0}
    const double p0 = std::exp(s0) / (std::exp(s0) + 1.0), p1 = 1.0 - p0;
    return std::vector<double>{p0 * 1 + p1 * 3, p0 * 2 + p1 * 4};
  };
  expect_values(f.eval(scaled_dot_product_attention(q, k, v, {}, false, 1.0)), expected(1.0));
  expect_values(f.eval(scaled_dot_product_attention(q, k, v)), expected(1.0 / std::sqrt(2.0)));
  // An additive mask shifts the scores.
  Tensor mask = f.input("mask", {2}, {0.0, 1.0});
  expect_values(f.eval(scaled_dot_product_attention(q, k, v, mask, false, 1.0)), expected(0.0));
}

// Zero queries give equal scores: each row averages the values it may see.
TEST(Attention, CausalRowsAverageTheVisiblePrefix) {
  Fed f;
  Tensor v = f.input("v", {1, 3, 1}, {3, 6, 12});
  Tensor k = f.random("k", {1, 3, 2});
  // Lq > Lk: row i sees keys 0..min(i, Lk-1) (top-left alignment).
  Tensor q5 = f.zeros("q5", {1, 5, 2});
  expect_values(f.eval(scaled_dot_product_attention(q5, k, v, {}, true)), {3, 4.5, 7, 7, 7});
  expect_values(f.eval(scaled_dot_product_attention(q5, k, v)), {7, 7, 7, 7, 7});
  // Lq < Lk: the last keys are never seen.
  Tensor q2 = f.zeros("q2", {1, 2, 2});
  expect_values(f.eval(scaled_dot_product_attention(q2, k, v, {}, true)), {3, 4.5});
}

TEST(Attention, LargeNegativeMaskEqualsCausal) {
  Fed f;
  Tensor q = f.random("q", {2, 2, 4, 3});
  Tensor k = f.random("k", {2, 2, 4, 3});
  Tensor v = f.random("v", {2, 2, 4, 5});
  std::vector<double> m(16, 0.0);
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) m[i * 4 + j] = -1e300;  // exp underflows to exactly 0
  }
  Tensor mask = f.input("mask", {4, 4}, m);
  expect_close(f.eval(scaled_dot_product_attention(q, k, v, mask)),
               f.eval(scaled_dot_product_attention(q, k, v, {}, true)));
}

TEST(Attention, GroupedQueryHeadsEqualRepeatedKeyValueHeads) {
  Fed f;
  Tensor q = f.random("q", {2, 4, 3, 2});
  Tensor k = f.random("k", {2, 2, 5, 2});
  Tensor v = f.random("v", {2, 2, 5, 3});
  Tensor mask = f.random("mask", {4, 3, 5});
  // Query heads 0, 1 read key/value head 0; heads 2, 3 read head 1.
  auto repeat = [](Tensor t) {
    Tensor h0 = slice(t, 1, 0, 1), h1 = slice(t, 1, 1, 2);
    return concat({h0, h0, h1, h1}, 1);
  };
  for (bool causal : {false, true}) {
    expect_close(f.eval(scaled_dot_product_attention(q, k, v, mask, causal)),
                 f.eval(scaled_dot_product_attention(q, repeat(k), repeat(v), mask, causal)));
  }
}

TEST(Attention, BatchAxesBroadcast) {
  Fed f;
  Tensor q = f.random("q", {2, 1, 2, 3, 4});
  Tensor k = f.random("k", {1, 3, 2, 4, 4});
  Tensor v = f.random("v", {1, 3, 2, 4, 4});
  Tensor y = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2, 3, 4}));
  const Shape full{2, 3, 2, 3, 4}, kv{2, 3, 2, 4, 4};
  expect_close(f.eval(y), f.eval(scaled_dot_product_attention(
                              broadcast_to(q, full), broadcast_to(k, kv), broadcast_to(v, kv))));
}

TEST(Attention, RankTwoOperandsAreOneHead) {
  Fed f;
  Tensor q = f.random("q", {3, 4});
  Tensor k = f.random("k", {5, 4});
  Tensor v = f.random("v", {5, 2});
  Tensor y = scaled_dot_product_attention(q, k, v, {}, true);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  Tensor y3 =
      scaled_dot_product_attention(unsqueeze(q, 0), unsqueeze(k, 0), unsqueeze(v, 0), {}, true);
  expect_close(f.eval(y), f.eval(squeeze(y3, {0})));
}

TEST(Attention, DefaultScaleHasOneSpelling) {
  Graph g;
  Tensor q = g.input("q", {2, 3, 4});
  Tensor a = scaled_dot_product_attention(q, q, q, {}, false, 0.0);
  Tensor b = scaled_dot_product_attention(q, q, q, {}, false, -1.0);
  EXPECT_EQ(g.node(a.id()).attrs, g.node(b.id()).attrs);
  EXPECT_EQ(g.node(a.id()).attrs.as<AttentionAttrs>().scale, 0.0);
}

TEST(Attention, ShapeErrorsNameTheOp) {
  Graph g;
  Tensor q = g.input("q", {2, 3, 4, 8});
  Tensor k = g.input("k", {2, 2, 5, 8});
  Tensor k4 = g.input("k4", {2, 1, 5, 4});
  Tensor v = g.input("v", {2, 2, 5, 8});
  Tensor v6 = g.input("v6", {2, 2, 6, 8});
  Tensor q2 = g.input("q2", {2, 2, 4, 8});
  Tensor b3 = g.input("b3", {3, 2, 5, 8});
  Tensor bad_mask = g.input("bad_mask", {4, 4});
  Tensor wide_mask = g.input("wide_mask", {1, 2, 2, 4, 5});
  Tensor half = g.input("half", {4, 5}, DType::f16);
  Tensor vec = g.input("vec", {8});
  const char* op = "scaled_dot_product_attention";
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, v); }, {op, "multiple"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q2, k4, k4); }, {op, "same last"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q2, k, v6); }, {op, "k and v"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q2, b3, b3); }, {op, "broadcast"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q2, k, v, bad_mask); },
                           {op, "mask", "[2, 2, 4, 5]"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q2, k, v, wide_mask); },
                           {op, "mask"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q2, k, v, half); }, {op, "dtype"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(vec, k, v); }, {op, "[L, D]"});
  expect_error<Error>([&] { scaled_dot_product_attention(q, Tensor{}, v); }, {op, "k"});
}

// ---- rope ----

TEST(Rope, HandComputed) {
  Fed f;
  // D = 4, theta = 10000: inverse frequencies 1 and 10000^(-1/2) = 0.01.
  Tensor x = f.input("x", {2, 4}, {1, 2, 3, 4, 1, 2, 3, 4});
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  expect_values(f.eval(rope(x)),
                {1, 2, 3, 4,  // position 0: no turn
                 1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2});
  // An offset of 1 moves row 0 to position 1.
  expect_values(f.eval(slice(rope(x, 10000.0, 1), 0, 0, 1)),
                {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2});
}

// The point of rotary embeddings: q(m) . k(n) depends only on m - n.
TEST(Rope, DotProductsDependOnRelativePosition) {
  Fed f;
  Tensor q = f.random("q", {1, 8});
  Tensor k = f.random("k", {1, 8});
  auto dot = [&](int64_t m, int64_t n) {
    return f.eval(sum(rope(q, 100.0, m) * rope(k, 100.0, n))).data[0];
  };
  EXPECT_NEAR(dot(5, 3), dot(2, 0), 1e-12);
  EXPECT_NEAR(dot(17, 4), dot(13, 0), 1e-12);
  EXPECT_GT(std::abs(dot(5, 3) - dot(3, 3)), 1e-6);
}

TEST(Rope, TurnsPairsWithoutChangingTheirLength) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 6});
  Array in = f.feeds["x"];
  Array out = f.eval(rope(x, 10000.0, 11));
  for (int row = 0; row < 6; ++row) {
    for (int i = 0; i < 3; ++i) {
      auto norm = [&](const Array& a) {
        return std::hypot(a.data[row * 6 + i], a.data[row * 6 + i + 3]);
      };
      EXPECT_NEAR(norm(out), norm(in), 1e-13);
    }
  }
}

TEST(Rope, BackwardInvertsForward) {
  Fed f;
  Tensor x = f.random("x", {2, 5, 4});
  Tensor y = rope(x, 500.0, 3);
  Tensor back = f.g.apply("rope_backward", RopeAttrs{500.0, 3}, {y});
  expect_close(f.eval(back), f.feeds["x"]);
}

TEST(Rope, BadInput) {
  Graph g;
  expect_error<ShapeError>([&] { rope(g.input("odd", {2, 3})); }, {"rope", "D even", "f32[2, 3]"});
  expect_error<ShapeError>([&] { rope(g.input("vec", {4})); }, {"rope", "[..., L, D]"});
  expect_error<ShapeError>([&] { rope(g.input("int", {2, 4}, DType::i32)); }, {"rope", "float"});
  expect_error<ShapeError>([&] { rope(g.input("x", {2, 4}), 0.0); }, {"rope", "theta"});
  expect_error<Error>([&] { rope(Tensor{}); }, {"rope", "empty"});
}

}  // namespace
}  // namespace mn
