// Forward values, shape inference errors and a few hand-derived gradients of the shape family.
// Inputs hold 0, 1, 2, ... (iota) so every expected value is the flat index of the element the
// op should have picked, derived by hand from the op's definition.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "ir/op_def.h"

namespace mn {
namespace {

Array iota(Shape s, DType t = DType::f32, double from = 0.0) {
  Array a(std::move(s), t);
  std::iota(a.data.begin(), a.data.end(), from);
  return a;
}

Array eval(Graph& g, Tensor t, const reference::Feeds& feeds) {
  return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0];
}

// One input "x" holding iota; returns the value of f(x).
Array run(Shape shape, const std::function<Tensor(Tensor)>& f) {
  Graph g;
  Tensor x = g.input("x", shape);
  Tensor y = f(x);
  return eval(g, y, {{"x", iota(shape)}});
}

// Expects f() to throw E whose message contains every fragment.
template <class E = ShapeError>
void expect_error(const std::function<void()>& f, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << fragments[0];
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& frag : fragments) {
      EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
    }
  }
}

TEST(Reshape, KeepsRowMajorOrderAndInfersOneAxis) {
  Array y = run({2, 3, 4}, [](Tensor x) { return reshape(x, {-1, 4}); });
  EXPECT_EQ(y.shape, (Shape{6, 4}));
  EXPECT_EQ(y.data, iota({24}).data);
  EXPECT_EQ(run({6}, [](Tensor x) { return reshape(x, {3, -1, 1}); }).shape, (Shape{3, 2, 1}));
  EXPECT_EQ(run({1, 1}, [](Tensor x) { return reshape(x, {}); }).shape, Shape{});
}

TEST(Reshape, StoresTheResolvedShapeAndSkipsNoOps) {
  Graph g;
  Tensor x = g.input("x", {2, 6});
  Tensor a = reshape(x, {3, -1});
  Tensor b = reshape(x, {3, 4});
  EXPECT_EQ(g.node(a.id()).attrs, g.node(b.id()).attrs);
  EXPECT_EQ(reshape(x, {2, -1}), x);
}

TEST(Reshape, RejectsBadTargets) {
  Graph g;
  Tensor x = g.input("x", {2, 3});
  expect_error([&] { reshape(x, {4, 2}); }, {"reshape", "f32[2, 3]", "[4, 2]"});
  expect_error([&] { reshape(x, {4, -1}); }, {"reshape", "f32[2, 3]", "[4, -1]"});
  expect_error([&] { reshape(x, {-1, -1}); }, {"reshape", "one -1"});
  expect_error([&] { reshape(x, {0, 6}); }, {"reshape", "positive"});
}

TEST(Permute, MovesAxes) {
  // out[i, j, k] = x[j, k, i] for perm {2, 0, 1} of x: [2, 3, 4]; x's flat index is j*12+k*4+i.
  Array y = run({2, 3, 4}, [](Tensor x) { return permute(x, {2, 0, 1}); });
  ASSERT_EQ(y.shape, (Shape{4, 2, 3}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(y.data[i * 6 + j * 3 + k], j * 12 + k * 4 + i);
  Array n = run({2, 3, 4}, [](Tensor x) { return permute(x, {-1, 0, -2}); });
  EXPECT_EQ(n.data, y.data);
}

TEST(Permute, RejectsNonPermutations) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 4});
  expect_error([&] { permute(x, {0, 1}); }, {"permute", "f32[2, 3, 4]", "3 axes"});
  expect_error([&] { permute(x, {0, 1, 1}); }, {"permute", "permutation"});
  expect_error([&] { permute(x, {0, 1, 3}); }, {"permute", "permutation"});
}

TEST(Transpose, SwapsTwoAxes) {
  Array y = run({2, 3}, [](Tensor x) { return transpose(x); });
  EXPECT_EQ(y.shape, (Shape{3, 2}));
  EXPECT_EQ(y.data, (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Array z = run({2, 3, 4}, [](Tensor x) { return transpose(x, 0, -1); });
  EXPECT_EQ(z.shape, (Shape{4, 3, 2}));
  EXPECT_EQ(z.data, run({2, 3, 4}, [](Tensor x) { return permute(x, {2, 1, 0}); }).data);
  Graph g;
  Tensor x = g.input("x", {2, 3});
  expect_error([&] { transpose(x, 0, 2); }, {"transpose", "axis 2"});
}

TEST(BroadcastTo, RepeatsSizeOneAndLeadingAxes) {
  Array y = run({3, 1}, [](Tensor x) { return broadcast_to(x, {2, 3, 4}); });
  ASSERT_EQ(y.shape, (Shape{2, 3, 4}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(y.data[a * 12 + b * 4 + c], b);
  Graph g;
  Tensor s = broadcast_to(g.scalar(2.5), {2, 2});
  EXPECT_EQ(eval(g, s, {}).data, (std::vector<double>(4, 2.5)));
}

TEST(BroadcastTo, RejectsIncompatibleShapes) {
  Graph g;
  Tensor x = g.input("x", {2, 3});
  expect_error([&] { broadcast_to(x, {2, 4}); }, {"broadcast_to", "f32[2, 3]", "[2, 4]"});
  expect_error([&] { broadcast_to(x, {3}); }, {"broadcast_to", "rank"});
  EXPECT_EQ(broadcast_to(x, {2, 3}), x);
}

TEST(Squeeze, RemovesSizeOneAxes) {
  EXPECT_EQ(run({1, 3, 1, 2}, [](Tensor x) { return squeeze(x); }).shape, (Shape{3, 2}));
  Array y = run({1, 3, 1, 2}, [](Tensor x) { return squeeze(x, {-2}); });
  EXPECT_EQ(y.shape, (Shape{1, 3, 2}));
  EXPECT_EQ(y.data, iota({6}).data);
  EXPECT_EQ(run({1, 1}, [](Tensor x) { return squeeze(x); }).shape, Shape{});
  Graph g;
  Tensor x = g.input("x", {2, 1, 3});
  EXPECT_EQ(squeeze(g.input("z", {2, 3})).shape(), (Shape{2, 3}));
  expect_error([&] { squeeze(x, {0}); }, {"squeeze", "f32[2, 1, 3]", "size 1", "has 2"});
  expect_error([&] { squeeze(x, {3}); }, {"squeeze", "axis 3"});
}

TEST(Unsqueeze, NegativeAxesCountInTheOutputRank) {
  auto shape_after = [](int64_t axis) {
    return run({2, 3}, [axis](Tensor x) { return unsqueeze(x, axis); }).shape;
  };
  EXPECT_EQ(shape_after(0), (Shape{1, 2, 3}));
  EXPECT_EQ(shape_after(2), (Shape{2, 3, 1}));
  EXPECT_EQ(shape_after(-1), (Shape{2, 3, 1}));  // numpy.expand_dims(x, -1)
  EXPECT_EQ(shape_after(-2), (Shape{2, 1, 3}));
  EXPECT_EQ(shape_after(-3), (Shape{1, 2, 3}));
  Graph g;
  Tensor x = g.input("x", {2, 3});
  expect_error([&] { unsqueeze(x, 3); }, {"unsqueeze", "axis 3"});
  expect_error([&] { unsqueeze(x, -4); }, {"unsqueeze", "axis -4"});
}

TEST(Slice, FollowsPythonBounds) {
  auto take_1d = [](int64_t start, int64_t stop, int64_t step) {
    return run({10}, [=](Tensor x) { return slice(x, 0, start, stop, step); }).data;
  };
  // The expected lists are list(range(10))[start:stop:step] in Python.
  EXPECT_EQ(take_1d(2, 8, 3), (std::vector<double>{2, 5}));
  EXPECT_EQ(take_1d(-3, 100, 1), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(take_1d(-100, 3, 2), (std::vector<double>{0, 2}));
  EXPECT_EQ(take_1d(5, -1, 2), (std::vector<double>{5, 7}));
  EXPECT_EQ(take_1d(9, 10, 5), (std::vector<double>{9}));
  Array rows = run({4, 3}, [](Tensor x) { return slice(x, -2, 1, 4, 2); });
  EXPECT_EQ(rows.shape, (Shape{2, 3}));
  EXPECT_EQ(rows.data, (std::vector<double>{3, 4, 5, 9, 10, 11}));
  Array cols = run({2, 4}, [](Tensor x) { return slice(x, 1, -3, -1); });
  EXPECT_EQ(cols.data, (std::vector<double>{1, 2, 5, 6}));
}

TEST(Slice, CanonicalAttributesAndErrors) {
  Graph g;
  Tensor x = g.input("x", {10});
  // Both select 0, 3, 6, 9.
  Tensor a = slice(x, 0, 0, 10, 3);
  Tensor b = slice(x, -1, -10, 99, 3);
  EXPECT_EQ(g.node(a.id()).attrs, g.node(b.id()).attrs);
  EXPECT_EQ(slice(x, 0, -20, 20), x);
  expect_error([&] { slice(x, 0, 5, 2); }, {"slice", "f32[10]", "non-empty"});
  expect_error([&] { slice(x, 0, 0, 5, 0); }, {"slice", "positive step"});
  expect_error([&] { slice(x, 1, 0, 5); }, {"slice", "axis 1"});
}

TEST(Concat, JoinsAlongAnAxis) {
  Graph g;
  Tensor a = g.input("a", {2, 1});
  Tensor b = g.input("b", {2, 2});
  Tensor y = concat({a, b}, -1);
  Array v = eval(g, y, {{"a", iota({2, 1})}, {"b", iota({2, 2}, DType::f32, 10)}});
  EXPECT_EQ(v.shape, (Shape{2, 3}));
  EXPECT_EQ(v.data, (std::vector<double>{0, 10, 11, 1, 12, 13}));
  Tensor z = concat({b, a, b}, 1);
  EXPECT_EQ(z.shape(), (Shape{2, 5}));
  expect_error([&] { concat({a, b}, 0); }, {"concat", "f32[2, 1]", "f32[2, 2]", "axis 0"});
  expect_error([&] { concat({a, g.input("c", {2, 1}, DType::i32)}, 1); }, {"concat", "dtype"});
  expect_error<Error>([&] { concat({}, 0); }, {"concat", "at least one"});
}

TEST(Split, PiecesConcatenateBack) {
  Graph g;
  Tensor x = g.input("x", {5, 2});
  auto parts = split(x, {2, 3}, 0);
  ASSERT_EQ(parts.size(), 2u);
  reference::Feeds feeds{{"x", iota({5, 2})}};
  Array p0 = eval(g, parts[0], feeds);
  Array p1 = eval(g, parts[1], feeds);
  EXPECT_EQ(p0.shape, (Shape{2, 2}));
  EXPECT_EQ(p0.data, (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(p1.data, (std::vector<double>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(eval(g, concat(parts, 0), feeds).data, iota({10}).data);
  auto cols = split(x, {1, 1}, -1);
  EXPECT_EQ(eval(g, cols[1], feeds).data, (std::vector<double>{1, 3, 5, 7, 9}));
  EXPECT_EQ(g.node(cols[1].id()).op_name(), "split");
  expect_error([&] { split(x, {2, 2}, 0); }, {"split", "f32[5, 2]", "summing"});
  expect_error([&] { split(x, {5, 0}, 0); }, {"split", "positive sizes"});
}

TEST(Pad, SurroundsWithAConstant) {
  Array y = run({2, 2}, [](Tensor x) { return pad(x, {{1, 0}, {0, 2}}, 7.0); });
  EXPECT_EQ(y.shape, (Shape{3, 4}));
  EXPECT_EQ(y.data, (std::vector<double>{7, 7, 7, 7, 0, 1, 7, 7, 2, 3, 7, 7}));
  // One pair pads only the leading axis.
  Array lead = run({1, 2}, [](Tensor x) { return pad(x, {{0, 1}}); });
  EXPECT_EQ(lead.shape, (Shape{2, 2}));
  EXPECT_EQ(lead.data, (std::vector<double>{0, 1, 0, 0}));
  Graph g;
  Tensor x = g.input("x", {2, 2});
  EXPECT_EQ(pad(x, {{0, 0}}), x);
  // The fill value is what the dtype can hold (i32 truncates).
  Tensor ix = g.input("ix", {1}, DType::i32);
  Array iv = eval(g, pad(ix, {{1, 1}}, 2.7), {{"ix", Array({1}, DType::i32, {5})}});
  EXPECT_EQ(iv.data, (std::vector<double>{2, 5, 2}));
  expect_error([&] { pad(x, {{0, -1}}); }, {"pad", "f32[2, 2]", "non-negative"});
  expect_error([&] { pad(x, {{0, 1}, {0, 1}, {1, 1}}); }, {"pad", "at most 2"});
}

TEST(Take, GathersAlongAnAxis) {
  Graph g;
  Tensor table = g.input("table", {4, 3});
  Tensor idx = g.input("idx", {2, 2}, DType::i32);
  Array ids({2, 2}, DType::i32, {3, 0, 1, 3});
  reference::Feeds feeds{{"table", iota({4, 3})}, {"idx", ids}};
  Array rows = eval(g, take(table, idx), feeds);
  EXPECT_EQ(rows.shape, (Shape{2, 2, 3}));
  EXPECT_EQ(rows.data, (std::vector<double>{9, 10, 11, 0, 1, 2, 3, 4, 5, 9, 10, 11}));
  Tensor cidx = g.input("cidx", {3}, DType::i32);
  feeds["cidx"] = Array({3}, DType::i32, {2, 2, 0});
  Array cols = eval(g, gather(table, cidx, -1), feeds);
  EXPECT_EQ(cols.shape, (Shape{4, 3}));
  EXPECT_EQ(cols.data, (std::vector<double>{2, 2, 0, 5, 5, 3, 8, 8, 6, 11, 11, 9}));
  // Integer payloads keep their dtype.
  Tensor labels = g.input("labels", {4}, DType::i32);
  feeds["labels"] = Array({4}, DType::i32, {7, 8, 9, 10});
  Array l = eval(g, take(labels, cidx), feeds);
  EXPECT_EQ(l.dtype, DType::i32);
  EXPECT_EQ(l.data, (std::vector<double>{9, 9, 7}));
}

TEST(Take, RejectsBadIndices) {
  Graph g;
  Tensor table = g.input("table", {4, 3});
  Tensor idx = g.input("idx", {3}, DType::i32);
  Tensor y = take(table, idx);
  reference::Feeds feeds{{"table", iota({4, 3})}, {"idx", Array({3}, DType::i32, {0, 4, 1})}};
  expect_error<Error>([&] { eval(g, y, feeds); }, {"take", "index 4", "[0, 4)"});
  feeds["idx"] = Array({3}, DType::i32, {0, -1, 1});
  expect_error<Error>([&] { eval(g, y, feeds); }, {"take", "index -1"});
  expect_error([&] { take(table, g.input("f", {2})); }, {"take", "i32 indices"});
  expect_error([&] { take(table, idx, 2); }, {"take", "axis 2"});
}

TEST(ScatterAdd, AccumulatesDuplicates) {
  Graph g;
  Tensor x = g.input("x", {3, 2});
  Tensor idx = g.input("idx", {3}, DType::i32);
  Tensor upd = g.input("upd", {3, 2});
  reference::Feeds feeds{{"x", iota({3, 2}, DType::f32, 100)},
                         {"idx", Array({3}, DType::i32, {0, 2, 0})},
                         {"upd", iota({3, 2}, DType::f32, 1)}};
  Array y = eval(g, scatter_add(x, idx, upd), feeds);
  // Row 0 gets updates 0 and 2 ({1, 2} + {5, 6}), row 2 gets update 1 ({3, 4}).
  EXPECT_EQ(y.data, (std::vector<double>{106, 109, 102, 103, 107, 109}));
  Tensor cupd = g.input("cupd", {3, 3});
  feeds["cupd"] = iota({3, 3});
  Tensor cidx = g.input("cidx", {3}, DType::i32);
  feeds["cidx"] = Array({3}, DType::i32, {1, 1, 0});
  Array c = eval(g, scatter_add(x, cidx, cupd, 1), feeds);
  // Column 1 gets updates 0 and 1 of each row, column 0 gets update 2.
  EXPECT_EQ(c.data, (std::vector<double>{100 + 2, 101 + 0 + 1, 102 + 5, 103 + 3 + 4, 104 + 8,
                                         105 + 6 + 7}));
  feeds["idx"] = Array({3}, DType::i32, {0, 3, 0});
  expect_error<Error>([&] { eval(g, scatter_add(x, idx, upd), feeds); },
                      {"scatter_add", "index 3"});
  expect_error(
      [&] {
        scatter_add(x, idx, g.input("bad", {2, 2}));
      },
      {"scatter_add", "f32[2, 2]", "updates of shape [3, 2]"});
}

TEST(OneHot, EncodesClassIndices) {
  Graph g;
  Tensor idx = g.input("idx", {3}, DType::i32);
  Tensor y = one_hot(idx, 4, DType::f16);
  EXPECT_EQ(y.type(), (TensorType{{3, 4}, DType::f16}));
  reference::Feeds feeds{{"idx", Array({3}, DType::i32, {2, 0, 3})}};
  EXPECT_EQ(eval(g, y, feeds).data, (std::vector<double>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}));
  feeds["idx"] = Array({3}, DType::i32, {2, 4, 3});
  expect_error<Error>([&] { eval(g, y, feeds); }, {"one_hot", "index 4", "[0, 4)"});
  expect_error([&] { one_hot(g.input("f", {2}), 3); }, {"one_hot", "i32"});
  expect_error([&] { one_hot(idx, 0); }, {"one_hot", "positive depth"});
  EXPECT_FALSE(op_def("one_hot").differentiable);
}

// Gradients whose values follow from the definitions: broadcasting sums, slicing masks,
// gathering counts how often each row was picked.
TEST(ShapeGradients, HandDerivedValues) {
  Graph g;
  Tensor x = g.parameter("x", {4, 1});
  Tensor idx = g.input("idx", {3}, DType::i32);
  reference::Feeds feeds{{"x", iota({4, 1})}, {"idx", Array({3}, DType::i32, {0, 0, 2})}};
  auto grad_of = [&](Tensor loss) { return eval(g, gradients(sum(loss), {x})[0], feeds).data; };
  EXPECT_EQ(grad_of(broadcast_to(x, {2, 4, 3})), (std::vector<double>(4, 6.0)));
  EXPECT_EQ(grad_of(slice(x, 0, 0, 4, 2)), (std::vector<double>{1, 0, 1, 0}));
  EXPECT_EQ(grad_of(slice(x, 0, 1, 3)), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(grad_of(take(x, idx)), (std::vector<double>{2, 0, 1, 0}));
  EXPECT_EQ(grad_of(pad(x, {{2, 1}}, 3.0)), (std::vector<double>(4, 1.0)));
  EXPECT_EQ(grad_of(concat({x, slice(x, 0, 3, 4), x}, 0)), (std::vector<double>{2, 2, 2, 3}));
  // d/dx sum(x * x^T) over the [4, 4] outer product = 2 * sum(x) for every entry.
  EXPECT_EQ(grad_of(mul(x, transpose(x))), (std::vector<double>(4, 12.0)));
}

}  // namespace
}  // namespace mn
