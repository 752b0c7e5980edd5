// The strided input gradient (conv2d_backward_input, conv_transpose2d) split by phase: each
// phase of the input pixels is a dense implicit GEMM over only the taps that reach it. Shapes
// cover strides 2 and 3 (and unequal ones), kernels 1×1 (phases no tap reaches, filled with zero
// or the bias), 3×3 and 7×7, padding, odd sizes where the last phase is shorter, groups,
// dilation sharing a factor with the stride, batches, and a K long enough to be split.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/kernel.h"
#include "ir/ops/conv.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

struct Case {
  std::string name;
  int64_t batch, c, o, h, w, kh, kw;
  Conv2dAttrs a;
};

// dx of the convolution `c` describes (input [batch, c, h, w]) against the CPU reference.
void expect_input_gradient_matches(const Case& c) {
  SCOPED_TRACE(c.name);
  const int64_t oh = conv_out_size(c.h, c.kh, c.a.stride_h, c.a.pad_h, c.a.dilation_h);
  const int64_t ow = conv_out_size(c.w, c.kw, c.a.stride_w, c.a.pad_w, c.a.dilation_w);
  auto rng = testing::rng_for("conv-phase/" + c.name);
  Graph g;
  Tensor gy = g.input("gy", {c.batch, c.o, oh, ow});
  Tensor w = g.input("w", {c.o, c.c / c.a.groups, c.kh, c.kw});
  g.output("dx", conv2d_backward_input(gy, w, c.a, c.h, c.w));
  reference::Feeds feeds;
  feeds["gy"] = testing::random_array(rng, gy.type(), -1.0, 1.0);
  feeds["w"] = testing::random_array(rng, w.type(), -1.0, 1.0);
  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  const Array expected = reference::evaluate(g, feeds).at("dx");
  const Array got = session->get("dx");
  ASSERT_EQ(got.shape, expected.shape);
  EXPECT_TRUE(testing::elementwise_near(got, expected, 2e-5));
}

Conv2dAttrs attrs(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dil = 1,
                  int64_t groups = 1) {
  return {sh, sw, ph, pw, dil, dil, groups};
}

TEST(ConvPhaseGpu, Stride2) {
  for (const Case& c : {
           Case{"1x1-s2", 2, 8, 16, 9, 7, 1, 1, attrs(2, 2, 0, 0)},
           Case{"3x3-s2-p1-groups", 2, 6, 10, 11, 8, 3, 3, attrs(2, 2, 1, 1, 1, 2)},
           Case{"7x7-s2-p3", 1, 3, 8, 13, 10, 7, 7, attrs(2, 2, 3, 3)},
           Case{"3x3-s2-d2", 2, 4, 6, 12, 9, 3, 3, attrs(2, 2, 2, 2, 2)},
           Case{"3x3-s2-p0-d2-groups", 1, 4, 4, 11, 12, 3, 3, attrs(2, 2, 0, 0, 2, 2)},
       }) {
    expect_input_gradient_matches(c);
  }
}

TEST(ConvPhaseGpu, Stride3AndUnequalStrides) {
  for (const Case& c : {
           Case{"3x3-s3-p1", 2, 4, 6, 10, 11, 3, 3, attrs(3, 3, 1, 1)},
           Case{"1x1-s3", 2, 5, 7, 8, 10, 1, 1, attrs(3, 3, 0, 0)},
           Case{"5x5-s3-p2-d2", 1, 3, 5, 14, 13, 5, 5, attrs(3, 3, 2, 2, 2)},
           Case{"3x2-s2x3-p1x0", 2, 6, 9, 9, 13, 3, 2, attrs(2, 3, 1, 0, 1, 3)},
       }) {
    expect_input_gradient_matches(c);
  }
}

// One 2×2 output with 512 channels: each phase's K (512 · taps) is split across workgroups,
// each phase with its own scratch buffer.
TEST(ConvPhaseGpu, SplitK) {
  expect_input_gradient_matches({"splitk", 1, 8, 512, 4, 4, 3, 3, attrs(2, 2, 1, 1)});
  Graph g;
  Tensor gy = g.input("gy", {1, 512, 2, 2});
  Tensor w = g.input("w", {512, 8, 3, 3});
  Tensor dx = conv2d_backward_input(gy, w, attrs(2, 2, 1, 1), 4, 4);
  std::vector<TensorType> types{gy.type(), w.type()};
  codegen::DeviceTraits device;
  codegen::Lowering l =
      (*codegen::find_lowering("conv2d_backward_input"))({g.node(dx.id()), types, device});
  EXPECT_EQ(l.scratch_bytes.size(), 4u);
  std::vector<int> scratch;
  for (const codegen::KernelLaunch& k : l.launches) {
    if (!k.name.ends_with("_splitk")) continue;
    for (const codegen::KernelBinding& b : k.bindings) {
      if (b.arg.kind == codegen::ArgRef::Kind::scratch) scratch.push_back(b.arg.index);
    }
  }
  EXPECT_EQ(scratch, (std::vector<int>{0, 1, 2, 3}));
}

// conv_transpose2d takes the same phases plus its bias, which also fills the phases no tap
// reaches (a 1×1 kernel with stride 2).
TEST(ConvPhaseGpu, TransposedWithBias) {
  auto rng = testing::rng_for("conv-phase/transpose");
  Graph g;
  Tensor x = g.input("x", {2, 6, 5, 4});
  Tensor w1 = g.input("w1", {6, 4, 1, 1});
  Tensor w3 = g.input("w3", {6, 4, 3, 3});
  Tensor b = g.input("b", {4});
  g.output("y1", conv_transpose2d(x, w1, b, {.stride = {2, 2}}));
  g.output("y3", conv_transpose2d(x, w3, b,
                                  {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 0}}));
  reference::Feeds feeds;
  for (const Tensor& t : {x, w1, w3, b}) {
    feeds[g.node(t.id()).name] = testing::random_array(rng, t.type(), -1.0, 1.0);
  }
  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  for (const auto& [name, expected] : reference::evaluate(g, feeds)) {
    SCOPED_TRACE(name);
    const Array got = session->get(name);
    ASSERT_EQ(got.shape, expected.shape);
    EXPECT_TRUE(testing::elementwise_near(got, expected, 2e-5));
  }
}

// The strided lowering has no tap off the stride grid left to mask: one GEMM per phase a tap
// reaches, a fill for the others.
TEST(ConvPhaseGpu, LoweringSkipsOffGridTaps) {
  const codegen::LowerFn* lower = codegen::find_lowering("conv2d_backward_input");
  ASSERT_NE(lower, nullptr);
  Graph g;
  Tensor gy = g.input("gy", {2, 16, 5, 5});
  Tensor w1 = g.input("w1", {16, 8, 1, 1});
  Tensor w3 = g.input("w3", {16, 8, 3, 3});
  Tensor dx1 = conv2d_backward_input(gy, w1, attrs(2, 2, 0, 0), 10, 10);
  Tensor dx3 = conv2d_backward_input(gy, w3, attrs(2, 2, 1, 1), 10, 10);
  codegen::DeviceTraits device;
  for (Tensor dx : {dx1, dx3}) {
    const Node& node = g.node(dx.id());
    std::vector<TensorType> types{gy.type(), g.node(node.inputs[1]).type};
    codegen::Lowering l = (*lower)({node, types, device});
    int gemms = 0, fills = 0;
    for (const codegen::KernelLaunch& k : l.launches) {
      SCOPED_TRACE(k.name);
      EXPECT_EQ(k.name.rfind("conv2d_backward_input_phase", 0), 0u);
      EXPECT_EQ(k.glsl.find("% 2u == 0u"), std::string::npos);
      if (k.name.find("_gemm_") != std::string::npos) ++gemms;
      if (k.name.ends_with("_zero")) ++fills;
    }
    // 1×1: only phase (0, 0) has a tap; 3×3: every phase has 1, 2 or 4 of them.
    EXPECT_EQ(gemms, dx.id() == dx1.id() ? 1 : 4);
    EXPECT_EQ(fills, dx.id() == dx1.id() ? 3 : 0);
  }
}

}  // namespace
}  // namespace mn
