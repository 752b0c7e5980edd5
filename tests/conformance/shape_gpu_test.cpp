// GPU behaviour of the shape family beyond the op table's samples: exact movement of integer and
// 16-bit data, concat past one launch's operands, scatter_add's two paths (grouped by row and
// deterministic; float atomics for many indices) at embedding-gradient shapes, and the
// documented clamp-and-ignore treatment of out-of-range indices.
#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "gpu_compare.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

using testing::run_gpu;

void expect_exact(const Graph& g, const reference::Feeds& feeds) {
  auto want = reference::evaluate(g, feeds);
  auto got = run_gpu(g, feeds);
  for (const auto& [name, expected] : want) {
    SCOPED_TRACE(name);
    ASSERT_EQ(got.at(name).shape, expected.shape);
    EXPECT_EQ(got.at(name).data, expected.data);
  }
}

// Values past 2^24 are not floats: they must travel as integers.
TEST(ShapeGpu, IntegersMoveExactly) {
  auto rng = testing::rng_for("shape-gpu/ints");
  Graph g;
  Tensor x = g.input("x", {3, 4, 5}, DType::i32);
  Tensor y = g.input("y", {3, 2, 5}, DType::i32);
  Tensor idx = g.input("idx", {6}, DType::i32);
  g.output("permute", permute(x, {2, 0, 1}));
  g.output("pad", pad(x, {{1, 0}, {0, 2}, {3, 1}}, 123456789.0));
  g.output("concat", concat({x, y, x}, 1));
  g.output("slice", slice(x, 2, 1, 5, 2));
  g.output("broadcast", broadcast_to(slice(x, 1, 0, 1), {2, 3, 4, 5}));
  g.output("take", take(x, idx, 1));
  reference::Feeds feeds;
  feeds["x"] = testing::random_array(rng, {{3, 4, 5}, DType::i32}, 1e9, 2e9);
  feeds["y"] = testing::random_array(rng, {{3, 2, 5}, DType::i32}, -2e9, -1e9);
  feeds["idx"] = testing::random_array(rng, {{6}, DType::i32}, 0, 4);
  expect_exact(g, feeds);
}

TEST(ShapeGpu, HalfPrecisionMovesExactly) {
  auto rng = testing::rng_for("shape-gpu/half");
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    Tensor x = g.input("x", {4, 6}, t);
    g.output("transpose", transpose(x, 0, 1));
    g.output("pad", pad(x, {{0, 1}, {2, 0}}, 0.1));
    g.output("split", split(x, {2, 4}, 1)[1]);
    reference::Feeds feeds;
    feeds["x"] = testing::random_array(rng, {{4, 6}, t}, -100.0, 100.0);
    for (double& v : feeds["x"].data) v = round_to_dtype(v, t);
    expect_exact(g, feeds);
  }
}

// More operands than one launch binds, along a middle axis.
TEST(ShapeGpu, ConcatManyOperands) {
  auto rng = testing::rng_for("shape-gpu/concat");
  Graph g;
  std::vector<Tensor> xs;
  reference::Feeds feeds;
  for (int m = 0; m < 17; ++m) {
    const std::string name = "x" + std::to_string(m);
    const Shape shape{3, 1 + m % 4, 5};
    xs.push_back(g.input(name, shape));
    feeds[name] = testing::random_array(rng, {shape, DType::f32});
  }
  g.output("out", concat(xs, 1));
  expect_exact(g, feeds);
}

// An embedding gradient: many indices into a small table, one of them (padding) very common.
reference::Feeds embedding_feeds(std::mt19937_64& rng, int64_t vocab, int64_t hidden,
                                 int64_t tokens) {
  reference::Feeds feeds;
  feeds["table"] = testing::random_array(rng, {{vocab, hidden}, DType::f32});
  Array idx = testing::random_array(rng, {{tokens}, DType::i32}, 0, static_cast<double>(vocab));
  for (size_t k = 0; k < idx.data.size(); k += 3) idx.data[k] = 1;
  feeds["idx"] = idx;
  feeds["upd"] = testing::random_array(rng, {{tokens, hidden}, DType::f32});
  return feeds;
}

Graph embedding_graph(int64_t vocab, int64_t hidden, int64_t tokens) {
  Graph g;
  Tensor table = g.input("table", {vocab, hidden});
  Tensor idx = g.input("idx", {tokens}, DType::i32);
  Tensor upd = g.input("upd", {tokens, hidden});
  g.output("out", scatter_add(table, idx, upd, 0));
  return g;
}

void expect_close(const Graph& g, const reference::Feeds& feeds, double tol) {
  auto want = reference::evaluate(g, feeds);
  auto got = run_gpu(g, feeds);
  for (const auto& [name, expected] : want) {
    Array rounded = expected;
    for (double& v : rounded.data) v = round_to_dtype(v, expected.dtype);
    EXPECT_TRUE(testing::elementwise_near(got.at(name), rounded, tol)) << name;
  }
}

TEST(ShapeGpu, ScatterAddGroupsIndicesDeterministically) {
  auto rng = testing::rng_for("shape-gpu/scatter-det");
  const Graph g = embedding_graph(300, 40, 3000);
  const auto feeds = embedding_feeds(rng, 300, 40, 3000);
  // A thousand updates land on row 1: summed in f32 against the float64 reference.
  expect_close(g, feeds, 1e-4);
  // Summed in index order, so runs agree bit for bit.
  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  const Array first = session->get("out");
  session->step();
  EXPECT_EQ(session->get("out").data, first.data);
}

TEST(ShapeGpu, ScatterAddManyIndices) {
  auto rng = testing::rng_for("shape-gpu/scatter-many");
  const Graph g = embedding_graph(50, 3, 20000);
  expect_close(g, embedding_feeds(rng, 50, 3, 20000), 1e-4);
}

TEST(ShapeGpu, ScatterAddIntegersAlongMiddleAxis) {
  auto rng = testing::rng_for("shape-gpu/scatter-int");
  Graph g;
  Tensor x = g.input("x", {4, 6, 3}, DType::i32);
  Tensor idx = g.input("idx", {2, 5}, DType::i32);
  Tensor upd = g.input("upd", {4, 2, 5, 3}, DType::i32);
  g.output("out", scatter_add(x, idx, upd, 1));
  reference::Feeds feeds;
  feeds["x"] = testing::random_array(rng, {{4, 6, 3}, DType::i32}, -2e8, 2e8);
  feeds["idx"] = testing::random_array(rng, {{2, 5}, DType::i32}, 0, 6);
  feeds["upd"] = testing::random_array(rng, {{4, 2, 5, 3}, DType::i32}, -1e8, 1e8);
  expect_exact(g, feeds);
}

// The reference rejects these indices; the GPU reads zeros, writes zero rows, skips updates,
// silently with index checks off, and raising IndexError after the step with them on.
TEST(ShapeGpu, OutOfRangeIndicesStayInsideTheTensors) {
  Graph g;
  Tensor x = g.input("x", {3, 2});
  Tensor idx = g.input("idx", {4}, DType::i32);
  Tensor upd = g.input("upd", {4, 2});
  g.output("take", take(x, idx, 0));
  g.output("one_hot", one_hot(idx, 3));
  g.output("scatter", scatter_add(x, idx, upd, 0));
  const reference::Feeds feeds{
      {"x", Array({3, 2}, DType::f32, {1, 2, 3, 4, 5, 6})},
      {"idx", Array({4}, DType::i32, {2, -1, 3, 0})},
      {"upd", Array({4, 2}, DType::f32, {10, 20, 30, 40, 50, 60, 70, 80})}};
  const std::map<std::string, std::vector<double>> want = {
      {"take", {5, 6, 0, 0, 0, 0, 1, 2}},
      {"one_hot", {0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0}},
      {"scatter", {71, 82, 3, 4, 15, 26}}};
  SessionOptions unchecked;
  unchecked.check_indices = false;
  auto got = run_gpu(g, feeds, unchecked);
  for (const auto& [name, values] : want) EXPECT_EQ(got[name].data, values) << name;

  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  EXPECT_THROW(session->step(), IndexError);
  for (const auto& [name, values] : want) EXPECT_EQ(session->get(name).data, values) << name;
}

}  // namespace
}  // namespace mn
