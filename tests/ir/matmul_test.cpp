// matmul: values against a naive loop written here (independent index arithmetic), numpy's
// vector and batch rules, transpose flags, gradients with broadcast batches, shape errors.
#include <gtest/gtest.h>

#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "support/random_fill.h"

namespace mn {
namespace {

std::vector<double> values(Graph& g, const reference::Feeds& feeds, Tensor t) {
  return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0].data;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

template <class F>
std::string shape_error(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "";
}

// c[b, m, n] = sum_k a[b % ab, m, k] * bm[b % bb, k, n] for 3-D operands whose batch is either
// the full batch or 1: the textbook definition, no blocking, no packing.
std::vector<double> naive_bmm(const Array& a, const Array& b) {
  const int64_t ab = a.shape[0], m = a.shape[1], k = a.shape[2];
  const int64_t bb = b.shape[0], n = b.shape[2];
  const int64_t batch = std::max(ab, bb);
  std::vector<double> c(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t t = 0; t < batch; ++t) {
    const int64_t ta = ab == 1 ? 0 : t, tb = bb == 1 ? 0 : t;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += a.data[(ta * m + i) * k + p] * b.data[(tb * k + p) * n + j];
        }
        c[(t * m + i) * n + j] = s;
      }
    }
  }
  return c;
}

TEST(Matmul, SmallProductByHand) {
  Graph g;
  auto a = g.input("a", {2, 3});
  auto b = g.input("b", {3, 2});
  reference::Feeds f{{"a", Array({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6})},
                     {"b", Array({3, 2}, DType::f32, {7, 8, 9, 10, 11, 12})}};
  auto c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  expect_near(values(g, f, c), {58, 64, 139, 154}, 0);
  // With both flags: bᵀ·aᵀ = (a·b)ᵀ.
  expect_near(values(g, f, matmul(b, a, true, true)), {58, 139, 64, 154}, 0);
}

TEST(Matmul, BatchBroadcastMatchesNaiveLoop) {
  auto rng = testing::rng_for("matmul/batch");
  Array a = testing::random_array(rng, {{1, 3, 5}, DType::f32});
  Array b = testing::random_array(rng, {{4, 5, 2}, DType::f32});
  Graph g;
  auto ta = g.input("a", a.shape);
  auto tb = g.input("b", b.shape);
  reference::Feeds f{{"a", a}, {"b", b}};
  auto c = matmul(ta, tb);
  EXPECT_EQ(c.shape(), (Shape{4, 3, 2}));
  expect_near(values(g, f, c), naive_bmm(a, b), 1e-14);
  // The same with the operands stored transposed and the flags set.
  auto at = g.input("at", {1, 5, 3});
  auto bt = g.input("bt", {4, 2, 5});
  f["at"] = reference::evaluate_nodes(g, f, std::vector<NodeId>{transpose(ta).id()})[0];
  f["bt"] = reference::evaluate_nodes(g, f, std::vector<NodeId>{transpose(tb).id()})[0];
  expect_near(values(g, f, matmul(at, bt, true, true)), naive_bmm(a, b), 1e-14);
  expect_near(values(g, f, matmul(at, tb, true, false)), naive_bmm(a, b), 1e-14);
  expect_near(values(g, f, matmul(ta, bt, false, true)), naive_bmm(a, b), 1e-14);
  // Batch dims broadcast across ranks: [2, 1, 3, 5] x [4, 5, 2] -> [2, 4, 3, 2].
  auto a4 = g.input("a4", {2, 1, 3, 5});
  EXPECT_EQ(matmul(a4, tb).shape(), (Shape{2, 4, 3, 2}));
}

TEST(Matmul, VectorRules) {
  Graph g;
  auto v = g.input("v", {3});
  auto m = g.input("m", {3, 2});
  auto mb = g.input("mb", {2, 2, 3});
  reference::Feeds f{{"v", Array({3}, DType::f32, {1, 2, 3})},
                     {"m", Array({3, 2}, DType::f32, {1, 0, 0, 1, 1, 1})},
                     {"mb", Array({2, 2, 3}, DType::f32, {1, 1, 1, 0, 0, 1, 2, 0, 0, 0, 1, 0})}};
  auto vm = matmul(v, m);  // row vector: the prepended axis is dropped
  EXPECT_EQ(vm.shape(), (Shape{2}));
  expect_near(values(g, f, vm), {4, 5}, 0);
  auto mv = matmul(mb, v);  // column vector on a batch of matrices
  EXPECT_EQ(mv.shape(), (Shape{2, 2}));
  expect_near(values(g, f, mv), {6, 3, 2, 2}, 0);
  auto dot = matmul(v, v);
  EXPECT_EQ(dot.shape(), Shape{});
  expect_near(values(g, f, dot), {14}, 0);
  auto vb = matmul(v, transpose(mb));  // [3] x [2, 3, 2] -> [2, 2]
  EXPECT_EQ(vb.shape(), (Shape{2, 2}));
  expect_near(values(g, f, vb), {6, 3, 2, 2}, 0);
  expect_near(values(g, f, matmul(v, mb, false, true)), {6, 3, 2, 2}, 0);
}

TEST(Matmul, GradientsSumOverBroadcastBatches) {
  auto rng = testing::rng_for("matmul/grad");
  Array av = testing::random_array(rng, {{2, 3, 4}, DType::f32});
  Array bv = testing::random_array(rng, {{4, 5}, DType::f32});
  Array rv = testing::random_array(rng, {{2, 3, 5}, DType::f32});
  Graph g;
  auto a = g.parameter("a", {2, 3, 4});
  auto b = g.parameter("b", {4, 5});
  auto r = g.constant(rv);
  reference::Feeds f{{"a", av}, {"b", bv}};
  auto grads = gradients(sum(matmul(a, b) * r), {a, b});
  ASSERT_EQ(grads[1].shape(), (Shape{4, 5}));
  // dL/db = sum over the batch of aᵢᵀ rᵢ; dL/da = r bᵀ.
  std::vector<double> want_b(20, 0.0), want_a(24, 0.0);
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 4; ++k) {
        for (int j = 0; j < 5; ++j) {
          want_b[k * 5 + j] += av.data[(t * 3 + i) * 4 + k] * rv.data[(t * 3 + i) * 5 + j];
          want_a[(t * 3 + i) * 4 + k] += rv.data[(t * 3 + i) * 5 + j] * bv.data[k * 5 + j];
        }
      }
    }
  }
  expect_near(values(g, f, grads[0]), want_a, 1e-14);
  expect_near(values(g, f, grads[1]), want_b, 1e-14);
  // Vectors get vector gradients: d(v·w)/dv = w.
  auto v = g.parameter("v", {4});
  auto w = g.parameter("w", {4});
  f["v"] = Array({4}, DType::f32, {1, 2, 3, 4});
  f["w"] = Array({4}, DType::f32, {5, 6, 7, 8});
  auto vg = gradients(matmul(v, w), {v, w});
  expect_near(values(g, f, vg[0]), {5, 6, 7, 8}, 0);
  expect_near(values(g, f, vg[1]), {1, 2, 3, 4}, 0);
}

TEST(Matmul, MnistSizedProduct) {
  // [64, 784] x [784, 128] crosses every block boundary of the reference; spot-check entries.
  auto rng = testing::rng_for("matmul/mnist");
  Array av = testing::random_array(rng, {{64, 784}, DType::f32});
  Array bv = testing::random_array(rng, {{784, 128}, DType::f32});
  Graph g;
  auto c = matmul(g.input("a", {64, 784}), g.input("b", {784, 128}));
  auto out = values(g, {{"a", av}, {"b", bv}}, c);
  ASSERT_EQ(out.size(), 64u * 128u);
  for (auto [i, j] : {std::pair{0, 0}, {63, 127}, {17, 64}, {40, 3}}) {
    double s = 0;
    for (int p = 0; p < 784; ++p) s += av.data[i * 784 + p] * bv.data[p * 128 + j];
    EXPECT_NEAR(out[i * 128 + j], s, 1e-12) << i << ", " << j;
  }
}

TEST(Matmul, BadInputIsAShapeErrorNamingTheOp) {
  Graph g;
  auto a = g.input("a", {2, 3});
  auto b = g.input("b", {4, 5});
  std::string msg = shape_error([&] { matmul(a, b); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 5]"), std::string::npos) << msg;
  EXPECT_NE(shape_error([&] { matmul(a, b, true, true); }).find("matmul"), std::string::npos);
  auto c = g.input("c", {2, 4});
  EXPECT_EQ(matmul(a, c, true, false).shape(), (Shape{3, 4}));
  msg = shape_error([&] { matmul(g.input("x", {2, 3, 4}), g.input("y", {3, 4, 5})); });
  EXPECT_NE(msg.find("batch"), std::string::npos) << msg;
  auto v = g.input("v", {3});
  EXPECT_NE(shape_error([&] { matmul(v, a, true, false); }).find("transpose_a"), std::string::npos);
  EXPECT_NE(shape_error([&] { matmul(a, v, false, true); }).find("transpose_b"), std::string::npos);
  EXPECT_NE(shape_error([&] { matmul(g.scalar(1), v); }).find("matmul"), std::string::npos);
  auto i = g.input("i", {3, 3}, DType::i32);
  EXPECT_NE(shape_error([&] { matmul(i, i); }).find("matmul"), std::string::npos);
  auto h = g.input("h", {3, 3}, DType::f16);
  EXPECT_NE(shape_error([&] { matmul(a, h); }).find("matmul"), std::string::npos);
  EXPECT_THROW(matmul(Tensor{}, a), Error);
}

}  // namespace
}  // namespace mn
