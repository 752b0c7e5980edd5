// GPU convolution and pooling beyond the op table's (small) samples: the shapes that select the
// implicit GEMM's wide and long tiles (128×64, 256×16, 256×32), K tiles shorter than 16, split-K
// partial sums with their deterministic finishing pass (weight gradients, and a forward conv with
// bias), the CNN's layers with their gradients, 16-bit storage, the grid folding past the
// device's group-count limit, and max pooling's backward kernels (overlapping windows with ties,
// disjoint windows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/kernel.h"
#include "conv_fixture.h"
#include "ir/ops/conv.h"
#include "support/random_fill.h"

namespace mn {
namespace {

// The fixture, its random streams named after this file's tests.
struct Fixture : testing::ConvFixture {
  explicit Fixture(const std::string& name) : ConvFixture("conv-gpu/" + name) {}
};

// The CNN's two blocks at its training batch: forward K = 9 (a K tile shorter than 16), 256×16
// and 256×32 tiles, the input gradient of the second conv, and weight gradients over
// K = 64·28·28 split across workgroups (a 16×16 tile, and a 32×144 one: 72 threads, a count
// that divides none of the tile's loads evenly).
TEST(ConvGpu, CnnBlocksWithGradients) {
  Fixture f("cnn");
  Tensor x = f.input("x", {64, 1, 28, 28});
  Tensor w1 = f.input("w1", {16, 1, 3, 3});
  Tensor b1 = f.input("b1", {16});
  Tensor w2 = f.input("w2", {32, 16, 3, 3});
  Tensor b2 = f.input("b2", {32});
  Conv2dOptions same{.padding = {1, 1}};
  Tensor h = max_pool2d(relu(conv2d(x, w1, b1, same)));
  f.finish(max_pool2d(relu(conv2d(h, w2, b2, same))));
  f.run_and_compare();
}

// 128×64 tiles per group, with stride, padding and dilation; the input gradient skips taps off
// the stride grid.
TEST(ConvGpu, WideTilesWithGroupsStrideDilation) {
  Fixture f("groups");
  Tensor x = f.input("x", {2, 8, 21, 21});
  Tensor w = f.input("w", {128, 4, 3, 3});
  Tensor b = f.input("b", {128});
  f.finish(conv2d(x, w, b, {.stride = {2, 2}, .padding = {2, 2}, .dilation = {2, 2}, .groups = 2}));
  f.run_and_compare();
}

TEST(ConvGpu, TransposedWithBias) {
  Fixture f("transpose");
  Tensor x = f.input("x", {2, 64, 8, 8});
  Tensor w = f.input("w", {64, 16, 4, 4});
  Tensor b = f.input("b", {16});
  f.finish(conv_transpose2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}}));
  f.run_and_compare();
}

// A 4×4 output with 256 input channels: one tile, so K = 2304 is split and the bias is added
// by the finishing pass.
TEST(ConvGpu, SplitKForwardWithBias) {
  Fixture f("splitk");
  Tensor x = f.input("x", {1, 256, 4, 4});
  Tensor w = f.input("w", {64, 256, 3, 3});
  Tensor b = f.input("b", {64});
  f.finish(conv2d(x, w, b, {.padding = {1, 1}}), false);
  f.run_and_compare();
}

TEST(ConvGpu, HalfPrecisionStorage) {
  Fixture f("f16");
  Tensor x = f.input("x", {2, 8, 10, 10}, DType::f16);
  Tensor w = f.input("w", {32, 8, 3, 3}, DType::f16);
  f.finish(conv2d(x, w, {}, {.padding = {1, 1}}), false);
  f.run_and_compare(2e-3);
}

TEST(PoolGpu, LargerWindowsWithGradients) {
  Fixture f("pool");
  Tensor x = f.input("x", {4, 8, 17, 17});
  Tensor m = max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  Tensor a = avg_pool2d(
      x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
  Tensor up = upsample_bilinear2d(m + a, 23, 21);
  Tensor near = upsample_nearest2d(x, 40, 13);
  f.finish(sum(up, {2, 3}) + sum(adaptive_avg_pool2d(near, 5, 3), {2, 3}));
  f.run_and_compare();
}

// Overlapping windows: each window's argmax is found once (into scratch), then every input
// element gathers over the windows holding it. Inputs on four levels make ties everywhere, where
// the first maximum of a window's scan must win as in the reference.
TEST(PoolGpu, OverlappingWindowsBackwardWithTies) {
  Fixture f("pool-ties");
  Tensor x = f.input("x", {2, 3, 13, 12});
  for (double& v : f.feeds["x"].data) v = std::floor(v * 2.0) / 2.0;
  Tensor a = max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  Tensor b = max_pool2d(x, {.kernel = {2, 3}, .stride = {1, 2}, .dilation = {2, 1}});
  f.finish(sum(a, {2, 3}) + sum(b, {2, 3}));
  const auto names = f.run_and_compare();
  int argmax = 0;
  for (const auto& n : names) argmax += n == "max_pool2d_backward_argmax";
  EXPECT_EQ(argmax, 2);
}

// Windows that cannot overlap take the per-cell backward kernel: with padding, dilation, gaps
// between windows (stride past the span) and ceil mode's partial last window. Windows disjoint
// along one axis only take the gather kernel with a single candidate window along that axis.
TEST(PoolGpu, DisjointWindowsBackward) {
  Fixture f("pool-cells");
  Tensor x = f.input("x", {2, 3, 11, 10});
  Tensor a = max_pool2d(x, {.kernel = {2, 2},
                            .stride = {3, 3},
                            .padding = {1, 1},
                            .dilation = {2, 2},
                            .ceil_mode = true});
  Tensor b = max_pool2d(x, {.kernel = {2, 3}, .stride = {3, 4}});
  Tensor c = max_pool2d(x, {.kernel = {3, 2}, .stride = {2, 3}, .padding = {1, 0}});
  f.finish(sum(a, {2, 3}) + sum(b, {2, 3}) + sum(c, {2, 3}));
  f.run_and_compare();
}

// Past the device's group-count limit the tiles fold into a second grid dimension.
TEST(ConvGpu, GridFoldsPastGroupLimit) {
  const codegen::LowerFn* lower = codegen::find_lowering("conv2d");
  ASSERT_NE(lower, nullptr);
  Graph g;
  Tensor x = g.input("x", {1, 3, 40, 40});
  Tensor w = g.input("w", {64, 3, 3, 3});
  Tensor y = conv2d(x, w);
  std::vector<TensorType> types{x.type(), w.type()};
  codegen::DeviceTraits device;
  device.max_group_count = 5;
  codegen::Lowering l = (*lower)({g.node(y.id()), types, device});
  ASSERT_EQ(l.launches.size(), 1u);
  const codegen::KernelLaunch& k = l.launches[0];
  // The kernel is named after its tile, "conv2d_gemm_<rows>x<columns>".
  unsigned rows = 0, cols = 0;
  ASSERT_EQ(std::sscanf(k.name.c_str(), "conv2d_gemm_%ux%u", &rows, &cols), 2) << k.name;
  const unsigned tiles = (38u * 38u + rows - 1) / rows * ((64u + cols - 1) / cols);
  ASSERT_GT(tiles, 5u);
  EXPECT_LE(k.groups[0], 5u);
  EXPECT_LE(k.groups[1], 5u);
  EXPECT_GE(k.groups[0] * k.groups[1], tiles);
  EXPECT_NE(k.glsl.find("if (tile >= " + std::to_string(tiles) + "u) return;"), std::string::npos);
}

}  // namespace
}  // namespace mn
