// GPU behaviour of the reduction lowerings beyond the op table's samples: each launch layout
// (a thread per output, lanes along rows, lanes across columns, the two-pass split of long
// reductions) at extents past 64 and 256 elements and past one chunk; axes that are not
// adjacent; NaN, infinities and ties as the reference treats them; integers past 2^24; the
// grid folded past a small group-count limit.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "gpu_compare.h"
#include "lowering_runner.h"

namespace mn {
namespace {

using testing::expect_close;
using testing::expect_exact;

const double nan_v = std::numeric_limits<double>::quiet_NaN();
const double inf_v = std::numeric_limits<double>::infinity();

// The reductions of x over `axes` (argmax over axes[0]) as outputs of one graph: sum, mean
// and variance share the accumulation code, max and min the comparison (min is covered by the
// NaN and integer tests).
void add_reductions(Graph& g, Tensor x, const std::vector<int64_t>& axes, const std::string& tag,
                    bool all = true) {
  g.output(tag + "_sum", sum(x, axes));
  if (all) g.output(tag + "_mean", mean(x, axes, true));
  g.output(tag + "_max", max(x, axes));
  g.output(tag + "_variance", variance(x, axes, false, 1));
  if (axes.size() == 1) g.output(tag + "_argmax", argmax(x, axes[0]));
}

struct Case {
  const char* tag;
  Shape shape;
  std::vector<int64_t> axes;
  size_t launches;  // 2 for the split reductions
};

// Shapes chosen for their layouts (lowering shapes listed per case).
const std::vector<Case>& cases() {
  static const std::vector<Case> c{
      {"rows100", {5, 100}, {1}, 1},          // lanes along rows, 32 per row
      {"rows257", {3, 257}, {1}, 1},          // 128 lanes, a third round for one element
      {"rows2000", {300, 2000}, {1}, 1},      // 256 lanes, 8 rounds
      {"rows_long", {2, 40000}, {1}, 2},      // split into chunks, then combined
      {"columns300", {300, 7}, {0}, 1},       // 8 outputs × 32 lanes
      {"columns_long", {30000, 3}, {0}, 2},   // split columns
      {"middle", {40, 300, 50}, {1}, 1},      // kept axes on both sides: 32 × 8
      {"middle_long", {4, 3000, 5}, {1}, 2},  // the same, split
      {"all", {70, 1500}, {0, 1}, 2},         // one output: split
      {"apart", {6, 50, 7, 30}, {0, 2}, 1},   // reduced axes that do not merge
      {"many_short", {5000, 9}, {1}, 1},      // many short rows
      {"serial_columns", {9, 9000}, {0}, 1},  // a thread per output
  };
  return c;
}

TEST(ReduceGpu, LayoutsAgreeWithTheReference) {
  auto rng = testing::rng_for("reduce-gpu/layouts");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.tag);
    Graph g;
    Tensor x = g.input("x", c.shape);
    add_reductions(g, x, c.axes, c.tag);
    // The lowering splits where intended.
    EXPECT_EQ(testing::lower_node(g, g.find_output(std::string(c.tag) + "_sum").value(),
                                  testing::device_traits())
                  .launches.size(),
              c.launches);
    reference::Feeds feeds{{"x", testing::random_array(rng, {c.shape, DType::f32}, -2, 2)}};
    expect_close(g, feeds, 2e-5);
  }
}

TEST(ReduceGpu, SixteenBitStorageAtLength) {
  auto rng = testing::rng_for("reduce-gpu/half");
  for (DType t : {DType::f16, DType::bf16}) {
    for (const Case& c : {cases()[3], cases()[5], cases()[7]}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.tag);
      Graph g;
      Tensor x = g.input("x", c.shape, t);
      add_reductions(g, x, c.axes, c.tag, false);
      reference::Feeds feeds{{"x", testing::random_array(rng, {c.shape, t}, -2, 2)}};
      // Accumulated in f32: only the output's rounding differs from the reference.
      expect_close(g, feeds, t == DType::f16 ? 1e-3 : 8e-3);
    }
  }
}

TEST(ReduceGpu, VarianceOfALargeMeanDoesNotCancel) {
  auto rng = testing::rng_for("reduce-gpu/variance");
  Graph g;
  Tensor x = g.input("x", {3, 50000});
  g.output("rows", variance(x, {1}, false, 0));
  g.output("all", variance(x, {}, false, 1));
  Array v = testing::random_array(rng, {{3, 50000}, DType::f32}, -1, 1);
  for (double& e : v.data) e = static_cast<float>(e + 1e4);
  expect_close(g, {{"x", v}}, 1e-4);
}

// Rows of special values, each through the three layouts.
Array special_rows(int64_t length) {
  // Row 0: NaN late; row 1: NaN first; row 2: all -inf; row 3: +inf and NaN; row 4: ties of
  // the maximum; row 5: all equal.
  Array a({6, length}, DType::f32);
  for (int64_t j = 0; j < length; ++j) {
    const double v = std::sin(static_cast<double>(j) * 0.37);
    a.data[0 * length + j] = j == length - 3 ? nan_v : v;
    a.data[1 * length + j] = j == 0 ? nan_v : v;
    a.data[2 * length + j] = -inf_v;
    a.data[3 * length + j] = j == length / 2 ? inf_v : (j == length / 3 ? nan_v : v);
    a.data[4 * length + j] = (j % 17 == 5) ? 2.0 : v;
    a.data[5 * length + j] = 0.5;
  }
  for (double& v : a.data) v = static_cast<float>(v);
  return a;
}

TEST(ReduceGpu, NaNInfinitiesAndTiesAsTheReference) {
  for (int64_t length : {7, 300, 40000}) {  // a thread per row, lanes per row, split
    SCOPED_TRACE(length);
    Graph g;
    Tensor x = g.input("x", {6, length});
    g.output("max", max(x, {1}));
    g.output("min", min(x, {1}));
    g.output("argmax", argmax(x, 1));
    // Columns: the same values transposed.
    Tensor xt = g.input("xt", {length, 6});
    g.output("max_t", max(xt, {0}));
    g.output("min_t", min(xt, {0}));
    g.output("argmax_t", argmax(xt, 0));
    Array rows = special_rows(length);
    Array cols({length, 6}, DType::f32);
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < length; ++j) cols.data[j * 6 + i] = rows.data[i * length + j];
    }
    expect_exact(g, {{"x", rows}, {"xt", cols}});
  }
}

TEST(ReduceGpu, IntegersAccumulateExactly) {
  auto rng = testing::rng_for("reduce-gpu/ints");
  for (int64_t length : {5, 300, 40000}) {
    SCOPED_TRACE(length);
    Graph g;
    Tensor x = g.input("x", {3, length}, DType::i32);
    Tensor u = g.input("u", {length, 2}, DType::u32);
    g.output("sum", sum(x, {1}));
    g.output("max", max(x, {1}));
    g.output("min", min(x, {1}));
    g.output("argmax", argmax(x, 1));
    g.output("sum_to", sum_to(x, {1, length}));
    g.output("umax", max(u, {0}));
    g.output("umin", min(u, {0}));
    g.output("uargmax", argmax(u, 0));
    // Sums stay within int32; elements past 2^24 (a float accumulator would drop their low bits).
    const double bound = std::min(3e7, 2e9 / static_cast<double>(length));
    reference::Feeds feeds;
    feeds["x"] = testing::random_array(rng, {{3, length}, DType::i32}, -bound / 4, bound);
    feeds["x"].data[1] = 16777217;
    // Unsigned past 2^31, where a signed comparison would invert.
    feeds["u"] = testing::random_array(rng, {{length, 2}, DType::u32}, 0, 4294967295.0);
    expect_exact(g, feeds);
  }
}

TEST(ReduceGpu, GridFoldsPastTheGroupLimit) {
  auto rng = testing::rng_for("reduce-gpu/fold");
  codegen::DeviceTraits traits = testing::device_traits();
  traits.max_group_count = 9;
  struct Fold {
    Shape shape;
    std::vector<int64_t> axes;
  };
  // Lanes per row (13 groups), a thread per row (40), split rows (18, then 1), split columns
  // (69, then 1): all past 9 groups, folded into 9 × n with an overhanging last row.
  for (const Fold& f :
       {Fold{{400, 9}, {1}}, Fold{{5000, 3}, {1}}, Fold{{2, 40000}, {1}}, Fold{{3000, 70}, {0}}}) {
    SCOPED_TRACE(shape_str(f.shape));
    Graph g;
    Tensor x = g.input("x", f.shape);
    Tensor s = sum(x, f.axes);
    Tensor a = argmax(x, f.axes[0]);
    const Array in = testing::random_array(rng, {f.shape, DType::f32}, -2, 2);
    auto want = reference::evaluate_nodes(g, {{"x", in}}, std::vector<NodeId>{s.id(), a.id()});
    for (const auto& launch : testing::lower_node(g, s.id(), traits).launches) {
      EXPECT_LE(launch.groups[0], 9u);
      EXPECT_LE(launch.groups[1], 9u);
    }
    EXPECT_TRUE(testing::elementwise_near(testing::run_lowering(g, s.id(), {in}, traits),
                                          testing::stored(want[0]), 2e-5));
    testing::expect_same_values(testing::run_lowering(g, a.id(), {in}, traits), want[1], "argmax");
  }
}

TEST(ReduceGpu, SixteenBitTensorsNeedStorageAccess) {
  Graph g;
  Tensor h = g.input("h", {4, 5}, DType::bf16);
  Tensor s = sum(h, {1});
  codegen::DeviceTraits traits = testing::device_traits();
  traits.storage_16bit = false;
  EXPECT_THROW(testing::lower_node(g, s.id(), traits), Error);
}

}  // namespace
}  // namespace mn
