// GPU behaviour of the matmul lowering beyond the op table's samples: every transpose
// combination on the 64×64 tile (whole tiles and overhanging edges, K not a multiple of the
// slab, K over several slabs),
// broadcast batches, 1-D operands on either side through the matrix-vector kernel in each of
// its layouts, 16-bit storage, gradients at tile sizes, and the grid folded past a small
// group-count limit.
#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include <meganeura/autodiff.h>
#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "gpu_compare.h"
#include "lowering_runner.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using testing::expect_close;

struct Product {
  std::string tag;
  Shape a, b;
  bool ta = false, tb = false;
  std::string kernel;  // the first launch's name
};

std::vector<Product> products() {
  std::vector<Product> p;
  // M×N×K = 130×70×45: overhanging 64-wide tiles, K ragged; and 128×64×32: whole tiles.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::string t = std::string(ta ? "t" : "n") + (tb ? "t" : "n");
      Shape a = ta ? Shape{45, 130} : Shape{130, 45};
      Shape b = tb ? Shape{70, 45} : Shape{45, 70};
      p.push_back({"ragged_" + t, a, b, ta, tb, "matmul_64x64"});
      Shape a2 = ta ? Shape{32, 128} : Shape{128, 32};
      Shape b2 = tb ? Shape{64, 32} : Shape{32, 64};
      p.push_back({"whole_" + t, a2, b2, ta, tb, "matmul_64x64"});
    }
  }
  p.push_back({"small_tiles", {3, 40, 33}, {3, 33, 20}, false, false, "matmul_16x16"});
  // K over several slabs (32 wide on the 64×64 tile, 16 on the 16×16), the last one ragged:
  // each slab's loads are issued while the previous slab's products run.
  p.push_back({"long_k_nn", {70, 100}, {100, 66}, false, false, "matmul_64x64"});
  p.push_back({"long_k_tt", {100, 70}, {66, 100}, true, true, "matmul_64x64"});
  p.push_back({"long_k_whole", {64, 192}, {64, 192}, false, true, "matmul_64x64"});
  p.push_back({"small_tiles_long_k", {20, 50}, {50, 30}, false, false, "matmul_16x16"});
  p.push_back({"broadcast_batch", {2, 1, 70, 20}, {3, 20, 66}, false, false, "matmul_64x64"});
  p.push_back({"shared_b_transposed", {2, 3, 17, 65}, {64, 17}, true, true, "matmul_64x64"});
  // Matrix-vector products: lanes along K (A rows, Bᵀ rows), outputs along contiguous memory
  // split over K (B columns, Aᵀ columns), and a thread per output for short K; long K with few
  // outputs splits into chunks added by a second launch (_partial).
  p.push_back({"gemv_rows", {50, 1000}, {1000}, false, false, "matmul_gemv"});
  p.push_back({"gemv_left_bt", {1000}, {2, 60, 1000}, false, true, "matmul_gemv"});
  p.push_back({"gemv_columns", {1000}, {1000, 700}, false, false, "matmul_gemv_partial"});
  p.push_back({"gemv_at", {2, 1000, 90}, {1000}, true, false, "matmul_gemv_partial"});
  p.push_back({"gemv_short_k", {9}, {4, 9, 3000}, false, false, "matmul_gemv"});
  p.push_back({"dot", {5000}, {5000}, false, false, "matmul_gemv"});
  p.push_back({"dot_long", {100000}, {100000}, false, false, "matmul_gemv_partial"});
  p.push_back({"row_times_matrix", {3, 1, 40}, {3, 40, 50}, false, false, "matmul_gemv"});
  return p;
}

TEST(MatmulGpu, ShapesAndTransposes) {
  auto rng = testing::rng_for("matmul-gpu/shapes");
  for (const Product& p : products()) {
    SCOPED_TRACE(p.tag);
    Graph g;
    Tensor a = g.input("a", p.a);
    Tensor b = g.input("b", p.b);
    Tensor c = matmul(a, b, p.ta, p.tb);
    g.output("c", c);
    const auto low = testing::lower_node(g, c.id(), testing::device_traits());
    const bool split = p.kernel.ends_with("_partial");
    ASSERT_EQ(low.launches.size(), split ? 2u : 1u);
    EXPECT_EQ(low.launches[0].name, p.kernel);
    reference::Feeds feeds{{"a", testing::random_array(rng, {p.a, DType::f32})},
                           {"b", testing::random_array(rng, {p.b, DType::f32})}};
    expect_close(g, feeds, 2e-5);
  }
}

TEST(MatmulGpu, GradientsAtTileSizes) {
  auto rng = testing::rng_for("matmul-gpu/grad");
  for (const Product& p : products()) {
    // Each transpose of the big tile, broadcast batches, and the matrix-vector layouts.
    static const std::set<std::string> chosen{"ragged_nn",    "ragged_tt", "broadcast_batch",
                                              "gemv_left_bt", "gemv_at",   "row_times_matrix",
                                              "ragged_nt",    "ragged_tn"};
    if (!chosen.count(p.tag)) continue;
    SCOPED_TRACE(p.tag);
    Graph g;
    Tensor a = g.input("a", p.a);
    Tensor b = g.input("b", p.b);
    Tensor c = matmul(a, b, p.ta, p.tb);
    Tensor r = g.constant(testing::random_array(rng, c.type()));
    auto grads = gradients(sum(c * r), {a, b});
    g.output("da", grads[0]);
    g.output("db", grads[1]);
    reference::Feeds feeds{{"a", testing::random_array(rng, {p.a, DType::f32})},
                           {"b", testing::random_array(rng, {p.b, DType::f32})}};
    expect_close(g, feeds, 2e-5);
  }
}

// Lanes past K in a matrix-vector product load the row's last element and add nothing: rows
// ending in an infinite weight give the reference's infinity, not 0 · inf = NaN from the lanes
// with nothing left to add. K = 148 (37 four-element loads, every row's loads at once) and
// K = 4004 (1001, eight at a time and a tail), neither a multiple of a subgroup's width.
TEST(MatmulGpu, GemvLanesPastKAddNothing) {
  auto rng = testing::rng_for("matmul-gpu/gemv-past-k");
  for (const int64_t k : {148, 4004}) {
    SCOPED_TRACE("K = " + std::to_string(k));
    const int64_t rows = 6;
    Graph g;
    Tensor a = g.input("a", {rows, k});
    Tensor b = g.input("b", {k});
    Tensor c = matmul(a, b);
    g.output("c", c);
    ASSERT_EQ(testing::lower_node(g, c.id(), testing::device_traits()).launches[0].name,
              "matmul_gemv");
    reference::Feeds feeds{{"a", testing::random_array(rng, {{rows, k}, DType::f32})},
                           {"b", testing::random_array(rng, {{k}, DType::f32})}};
    feeds["b"].data[static_cast<size_t>(k - 1)] = 1.0;
    for (int64_t r = 0; r < rows; ++r) {
      feeds["a"].data[static_cast<size_t>(r * k + k - 1)] = r % 2 ? -INFINITY : INFINITY;
    }
    expect_close(g, feeds, 2e-5);
  }
}

// A decoding MLP, rms_norm → silu(x·Wgᵀ) · (x·Wuᵀ) → ·Wdᵀ + r with bf16 weights, at
// SmolLM2-135M's widths and at a second product of more outputs than a workgroup has lanes:
// with MN_GEMV_CHAIN=1 on a GPU of 32-lane subgroups both run as one kernel
// (codegen::GemvExtras::chain, 48 partials; two rows of y a lane for the second), elsewhere as
// the two kernels; the values are the reference's either way.
TEST(MatmulGpu, ChainedGemvMatchesTheReference) {
  const testing::ScopedEnv chain("MN_GEMV_CHAIN", "1");
  auto rng = testing::rng_for("matmul-gpu/gemv-chain");
  for (const auto& [hidden, inner, outs] :
       {std::tuple<int64_t, int64_t, int64_t>{576, 1536, 576}, {96, 1536, 1100}}) {
    SCOPED_TRACE(std::to_string(hidden) + " -> " + std::to_string(inner) + " -> " +
                 std::to_string(outs));
    Graph g;
    Tensor h = g.input("h", {1, 1, hidden});
    auto weight = [&](const char* name, Shape shape) {
      return cast(g.input(name, std::move(shape), DType::bf16), DType::f32);
    };
    Tensor x = rms_norm(h, weight("norm", {hidden}), 1e-5);
    Tensor a = silu(matmul(x, weight("gate", {inner, hidden}), false, true)) *
               matmul(x, weight("up", {inner, hidden}), false, true);
    g.output("y",
             matmul(a, weight("down", {outs, inner}), false, true) + g.input("r", {1, 1, outs}));
    reference::Feeds feeds;
    for (NodeId id : g.inputs()) {
      feeds[g.node(id).name] = testing::random_array(rng, g.node(id).type, -0.3, 0.3);
    }
    expect_close(g, feeds, 2e-5);
  }
}

TEST(MatmulGpu, SixteenBitStorage) {
  auto rng = testing::rng_for("matmul-gpu/half");
  for (DType t : {DType::f16, DType::bf16}) {
    for (const Product& p : products()) {
      if (p.tag != "ragged_nt" && p.tag != "ragged_tn" && p.tag != "gemv_columns") continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + p.tag);
      Graph g;
      Tensor a = g.input("a", p.a, t);
      Tensor b = g.input("b", p.b, t);
      g.output("c", matmul(a, b, p.ta, p.tb));
      reference::Feeds feeds{{"a", testing::random_array(rng, {p.a, t})},
                             {"b", testing::random_array(rng, {p.b, t})}};
      // Exact products accumulated in f32: only the output's rounding differs.
      expect_close(g, feeds, t == DType::f16 ? 1e-3 : 8e-3);
    }
  }
}

TEST(MatmulGpu, GridFoldsPastTheGroupLimit) {
  auto rng = testing::rng_for("matmul-gpu/fold");
  codegen::DeviceTraits traits = testing::device_traits();
  traits.max_group_count = 5;
  // 7 batches × 3 row tiles = 21 rows of tiles: a 5 × 5 grid in y and z (4 past the end); 2
  // column tiles. And a batched matrix-vector product of 21 groups.
  for (const Product& p :
       {Product{"tiles", {7, 40, 20}, {20, 30}}, Product{"gemv", {7, 3, 200}, {200}}}) {
    SCOPED_TRACE(p.tag);
    Graph g;
    Tensor a = g.input("a", p.a);
    Tensor b = g.input("b", p.b);
    Tensor c = matmul(a, b);
    const auto low = testing::lower_node(g, c.id(), traits);
    for (uint32_t n : low.launches[0].groups) EXPECT_LE(n, 5u);
    const std::vector<Array> in{testing::random_array(rng, {p.a, DType::f32}),
                                testing::random_array(rng, {p.b, DType::f32})};
    auto want =
        reference::evaluate_nodes(g, {{"a", in[0]}, {"b", in[1]}}, std::vector<NodeId>{c.id()});
    EXPECT_TRUE(testing::elementwise_near(testing::run_lowering(g, c.id(), in, traits),
                                          testing::stored(want[0]), 2e-5));
  }
  // Column tiles do not fold: past the limit (7 tiles of 16) the lowering says so.
  Graph g;
  Tensor c = matmul(g.input("a", {2, 8}), g.input("b", {8, 100}));
  EXPECT_THROW(testing::lower_node(g, c.id(), traits), Error);
}

// K split over several workgroups of a tile (DeviceTraits::matmul_split_k): each adds its K
// range, the last of a tile to finish adds the others' partial sums. Each lowering runs twice: the tile counters must be left
// zero for the next run.
TEST(MatmulGpu, SplitK) {
  auto rng = testing::rng_for("matmul-gpu/split-k");
  struct Case {
    Product p;
    int splits;
  };
  // K = 200 is 7 slabs of 32: 3 splits of 3, 3 and 1; 150 is 5 slabs: 4 asked, 3 of 2, 2 and 1
  // (no split is empty); the 16×16 tile's slabs are 16 wide.
  const std::vector<Case> cases = {
      {{"nn", {130, 200}, {200, 70}, false, false, "matmul_64x64_split3"}, 3},
      {{"tt", {200, 130}, {70, 200}, true, true, "matmul_64x64_split2"}, 2},
      {{"batched", {2, 70, 150}, {150, 66}, false, false, "matmul_64x64_split3"}, 4},
      {{"small_tiles", {20, 100}, {30, 100}, false, true, "matmul_16x16_split3"}, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.p.tag);
    const Product& p = c.p;
    codegen::DeviceTraits traits = testing::device_traits();
    traits.matmul_split_k = c.splits;
    Graph g;
    const Shape& bshape = p.b;
    Tensor a = g.input("a", p.a);
    Tensor b = g.input("b", bshape);
    Tensor out = matmul(a, b, p.ta, p.tb);
    const auto low = testing::lower_node(g, out.id(), traits);
    ASSERT_EQ(low.launches.size(), 1u);
    EXPECT_EQ(low.launches[0].name, p.kernel);
    const std::vector<Array> in{testing::random_array(rng, {p.a, DType::f32}),
                                testing::random_array(rng, {bshape, DType::f32})};
    auto want = reference::evaluate_nodes(g, {{"a", in[0]}, {"b", in[1]}},
                                          std::vector<NodeId>{out.id()});
    for (int run = 0; run < 2; ++run) {
      EXPECT_TRUE(testing::elementwise_near(testing::run_lowering(g, out.id(), in, traits),
                                            testing::stored(want[0]), 2e-5))
          << "run " << run;
    }
  }
}

// Unforced (matmul_split_k 0), a long K over few tiles splits (a weight gradient's K is batch ×
// tokens): here 6 tiles on a 128-workgroup device, 2048 = 64 slabs, at most 8 splits of 8 slabs;
// with K 576 (a prefill's projections) or with splitting turned off (1) it stays whole.
// The tiles and K splits chosen by shape on a device of 128 multiprocessors: long K over few
// tiles splits (weight gradients), a product of fewer than 64 rows over few tiles splits its K
// too (SmolVLA's 50 action tokens, on 64×64 tiles from 32 rows), other products stay whole (a
// prefill's projections, K 576 or 1536), and a forced count wins.
TEST(MatmulGpu, SplitKChosenForLongKOverFewTiles) {
  auto rng = testing::rng_for("matmul-gpu/split-k-chosen");
  struct Case {
    int64_t m, n, k;
    int forced;
    std::string kernel;
  };
  for (const Case& c : {Case{130, 70, 2048, 0, "matmul_64x64_split8"},
                        Case{512, 576, 576, 0, "matmul_64x64"},
                        Case{130, 70, 1536, 0, "matmul_64x64"},
                        Case{130, 70, 2048, 1, "matmul_64x64"},
                        Case{50, 70, 720, 0, "matmul_64x64_split5"},
                        Case{20, 70, 720, 0, "matmul_16x16_split9"}}) {
    SCOPED_TRACE(c.kernel + " at " + std::to_string(c.m) + " x " + std::to_string(c.k) + " x " +
                 std::to_string(c.n));
    codegen::DeviceTraits traits = testing::device_traits();
    traits.multiprocessors = 128;
    traits.matmul_split_k = c.forced;
    Graph g;
    Tensor a = g.input("a", {c.m, c.k});
    Tensor b = g.input("b", {c.n, c.k});
    Tensor out = matmul(a, b, false, true);
    const auto low = testing::lower_node(g, out.id(), traits);
    ASSERT_EQ(low.launches.size(), 1u);
    EXPECT_EQ(low.launches[0].name, c.kernel);
    const std::vector<Array> in{testing::random_array(rng, {{c.m, c.k}, DType::f32}),
                                testing::random_array(rng, {{c.n, c.k}, DType::f32})};
    auto want = reference::evaluate_nodes(g, {{"a", in[0]}, {"b", in[1]}},
                                          std::vector<NodeId>{out.id()});
    EXPECT_TRUE(testing::elementwise_near(testing::run_lowering(g, out.id(), in, traits),
                                          testing::stored(want[0]), 2e-5));
  }
}

// Through a session with MN_MATMUL_SPLIT_K: the fused residual add (the matmul's epilogue) runs
// once, in the workgroup that adds the partials, and gradients split as well.
TEST(MatmulGpu, SplitKWithEpilogueAndGradients) {
  const testing::ScopedEnv split("MN_MATMUL_SPLIT_K", "3");
  auto rng = testing::rng_for("matmul-gpu/split-k-session");
  Graph g;
  reference::Feeds feeds;
  Tensor a = g.input("a", {70, 200});
  Tensor b = g.input("b", {200, 90});
  Tensor r = g.input("r", {70, 90});
  for (const auto& [name, shape] : {std::pair<std::string, Shape>{"a", {70, 200}},
                                    std::pair<std::string, Shape>{"b", {200, 90}},
                                    std::pair<std::string, Shape>{"r", {70, 90}}}) {
    feeds[name] = testing::random_array(rng, {shape, DType::f32});
  }
  Tensor y = matmul(a, b) + r;
  g.output("y", y);
  Tensor w = g.constant(testing::random_array(rng, {{70, 90}, DType::f32}));
  const auto grads = gradients(sum(y * w), {a, b});
  g.output("da", grads[0]);
  g.output("db", grads[1]);
  expect_close(g, feeds, 2e-5);
}

TEST(MatmulGpu, SixteenBitTensorsNeedStorageAccess) {
  Graph g;
  Tensor c = matmul(g.input("a", {4, 5}, DType::f16), g.input("b", {5, 3}, DType::f16));
  codegen::DeviceTraits traits = testing::device_traits();
  traits.storage_16bit = false;
  EXPECT_THROW(testing::lower_node(g, c.id(), traits), Error);
}

}  // namespace
}  // namespace mn
