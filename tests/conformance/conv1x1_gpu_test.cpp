// 1×1 convolutions (unit stride, no padding, one group) run as matmuls
// (src/codegen/lower_conv_matmul.cpp): forward with and without bias, the input and weight
// gradients (one image, and several images summed), conv_transpose2d, against the CPU
// reference; the matmul kernels are the ones recorded, and other convolutions keep the implicit
// GEMM. On a tensor-core device the routing is off by design (the cooperative path's packing
// cost more than it saved on ResNet-50's 1×1 layers, measured on the H200): there the same
// convolutions must keep the implicit GEMM.
#include <gtest/gtest.h>

#include <cstdlib>
#include <tuple>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/coop_fixture.h"
#include "codegen/kernel.h"
#include "codegen/shader/shader_compiler.h"
#include "conv_fixture.h"
#include "ir/ops/conv.h"
#include "runtime/plan_options.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// The fixture, its random streams named after this file's tests.
struct Fixture : testing::ConvFixture {
  explicit Fixture(const std::string& name) : ConvFixture("conv1x1-gpu/" + name) {}
};

int count(const std::vector<std::string>& names, const std::string& part) {
  int n = 0;
  for (const auto& s : names) n += s.find(part) != std::string::npos;
  return n;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += n + " ";
  return s;
}

// Whether sessions on the test device plan with tensor cores (then 1×1 convolutions are not
// routed to the matmul, lower_conv_matmul.cpp).
bool tensor_core_device() { return runtime::plan_options(std::string()).device.coop; }

// The kernels of routed 1×1 convolutions: on a device without tensor cores, `matmuls` scalar
// matmul kernels, `batch_sums` sums of per-image weight gradients (-1: either count unchecked)
// and no implicit GEMM; on one with them, the implicit GEMM (f32, packed or staged on tensor
// cores) and no matmul.
void expect_matmul_route(const std::vector<std::string>& names, int matmuls, int batch_sums) {
  if (tensor_core_device()) {
    EXPECT_EQ(count(names, "matmul"), 0) << joined(names);
    EXPECT_EQ(count(names, "conv1x1_weight_batch_sum"), 0) << joined(names);
    EXPECT_GE(count(names, "_gemm_") + count(names, "_coop") + count(names, "_staged_"), 1)
        << joined(names);
    return;
  }
  EXPECT_EQ(count(names, "_gemm_"), 0) << joined(names);
  if (batch_sums >= 0)
    EXPECT_EQ(count(names, "conv1x1_weight_batch_sum"), batch_sums) << joined(names);
  if (matmuls >= 0) EXPECT_EQ(count(names, "matmul_64x64"), matmuls) << joined(names);
}

// Forward with bias and both gradients over a batch of 2, Cin ≠ Cout, a non-square image; no
// implicit-GEMM kernel runs (the bias gradient is a reduction).
TEST(Conv1x1Gpu, BatchedWithBiasAndGradients) {
  Fixture f("batched");
  Tensor x = f.input("x", {2, 72, 8, 9});
  Tensor w = f.input("w", {80, 72, 1, 1});
  Tensor b = f.input("b", {80});
  f.finish(conv2d(x, w, b));
  // forward, input gradient, weight gradient (batched product)
  expect_matmul_route(f.run_and_compare(), 3, 1);
}

// One image, no bias: the weight gradient is a single product (no batch sum); ragged tiles.
TEST(Conv1x1Gpu, SingleImage) {
  Fixture f("single");
  Tensor x = f.input("x", {1, 80, 9, 8});
  Tensor w = f.input("w", {96, 80, 1, 1});
  f.finish(conv2d(x, w));
  expect_matmul_route(f.run_and_compare(), 3, 0);
}

// Unbatched input with bias, and two leading batch axes.
TEST(Conv1x1Gpu, BatchAxes) {
  {
    Fixture f("unbatched");
    Tensor x = f.input("x", {64, 8, 9});
    Tensor w = f.input("w", {70, 64, 1, 1});
    Tensor b = f.input("b", {70});
    f.finish(conv2d(x, w, b));
    expect_matmul_route(f.run_and_compare(), -1, 0);
  }
  {
    Fixture f("two-axes");
    Tensor x = f.input("x", {2, 2, 64, 8, 8});
    Tensor w = f.input("w", {66, 64, 1, 1});
    f.finish(conv2d(x, w));
    expect_matmul_route(f.run_and_compare(), -1, 1);
  }
}

// Dilation does nothing to a 1×1 kernel; conv_transpose2d with bias is the input gradient plus
// the bias epilogue.
TEST(Conv1x1Gpu, DilatedAndTransposed) {
  Fixture f("transposed");
  Tensor x = f.input("x", {3, 64, 8, 8});
  Tensor w = f.input("w", {68, 64, 1, 1});
  Tensor wt = f.input("wt", {68, 72, 1, 1});
  Tensor bt = f.input("bt", {72});
  Tensor y = conv2d(x, w, {}, {.dilation = {2, 3}});
  f.finish(conv_transpose2d(y, wt, bt));
  expect_matmul_route(f.run_and_compare(), -1, -1);
}

// Strided and padded 1×1 convolutions are not plain products, and products too skinny for the
// scalar matmul's 64×64 tiles (no cooperative kernel on this device) run better as implicit
// GEMMs: all keep it, and MN_CONV_NO_MATMUL=1 keeps it for the routed ones too.
TEST(Conv1x1Gpu, OthersKeepImplicitGemm) {
  {
    Fixture f("strided");
    Tensor x = f.input("x", {2, 64, 16, 16});
    Tensor w = f.input("w", {64, 64, 1, 1});
    Tensor w2 = f.input("w2", {64, 64, 1, 1});
    f.finish(conv2d(conv2d(x, w, {}, {.stride = {2, 2}}), w2, {}, {.padding = {1, 0}}));
    const auto names = f.run_and_compare();
    EXPECT_EQ(count(names, "matmul"), 0) << joined(names);
    EXPECT_GE(count(names, "_gemm_"), 6) << joined(names);
  }
  {
    Fixture f("skinny");
    Tensor x = f.input("x", {2, 6, 5, 7});
    Tensor w = f.input("w", {10, 6, 1, 1});
    Tensor b = f.input("b", {10});
    f.finish(conv2d(x, w, b));
    const auto names = f.run_and_compare();
    EXPECT_EQ(count(names, "matmul"), 0) << joined(names);
    EXPECT_GE(count(names, "_gemm_"), 3) << joined(names);
  }
  {
    testing::ScopedEnv off("MN_CONV_NO_MATMUL", "1");
    Fixture f("disabled");
    Tensor x = f.input("x", {2, 64, 8, 8});
    Tensor w = f.input("w", {64, 64, 1, 1});
    f.finish(conv2d(x, w));
    const auto names = f.run_and_compare();
    EXPECT_EQ(count(names, "matmul"), 0) << joined(names);
    EXPECT_GE(count(names, "_gemm_"), 3) << joined(names);
  }
}

// One image of 32×32: the weight gradient is a 64×64 product over K = 1024, a single tile that
// the implicit GEMM splits along K; the forward and input gradient (K = 64) take the matmul.
TEST(Conv1x1Gpu, LongKWeightGradientKeepsImplicitGemm) {
  Fixture f("long-k");
  Tensor x = f.input("x", {1, 64, 32, 32});
  Tensor w = f.input("w", {64, 64, 1, 1});
  f.finish(conv2d(x, w));
  const auto names = f.run_and_compare();
  EXPECT_EQ(count(names, "conv2d_backward_weight_gemm_"), 1) << joined(names);
  EXPECT_EQ(count(names, "matmul_64x64"), tensor_core_device() ? 0 : 2) << joined(names);
}

// On a tensor-core device (an H200's traits) ResNet-50's 1×1 convolutions at batch 32 keep the
// implicit GEMM (measured faster there than the cooperative path): the portable kernel, or the
// staged tensor-core one for the wide GEMMs (ImplicitGemm::staged_when_unpacked; these traits
// have no workgroup-scope matrices to pack for); with MN_CONV_COOP_1X1=1
// (DeviceTraits::conv_coop_1x1) they
// lower to the cooperative-matrix matmul, forward (with a bias epilogue) and both gradients
// (but for layer4's weight gradient, whose per-image partials would outweigh its operands),
// and every launch compiles (it cannot run here).
TEST(Conv1x1Gpu, TensorCoreKernelsOnNvidiaTraits) {
  const codegen::DeviceTraits h200 = codegen::testing::h200_traits();
  // layer1's 256 -> 64 at 56×56 and layer4's 2048 -> 512 at 7×7 (49 columns per image: by
  // itself below the matmul's thresholds).
  Graph g;
  std::vector<Tensor> nodes;
  Tensor partials_outweigh;  // 7 × 7's weight gradient: 128 MiB of per-image partials
  for (const auto& [c, o, hw] : {std::tuple{256, 64, 56}, std::tuple{2048, 512, 7}}) {
    Tensor x = g.input("x" + std::to_string(c), {32, c, hw, hw});
    Tensor w = g.input("w" + std::to_string(c), {o, c, 1, 1});
    Tensor b = g.input("b" + std::to_string(c), {o});
    Tensor y = conv2d(x, w);
    nodes.push_back(y);
    nodes.push_back(conv2d(x, w, b));
    nodes.push_back(conv2d_backward_input(y, w, Conv2dAttrs{}, hw, hw));
    nodes.push_back(conv2d_backward_weight(x, y, Conv2dAttrs{}, 1, 1));
    if (hw == 7) partials_outweigh = nodes.back();
  }
  // The implicit GEMM's kernel for each node above: layer1's forward (to 64 channels) portable,
  // its gradients (to 256 input channels from 64, 64 × 256 weights) staged; layer4's forward and
  // weight gradient staged, its input gradient (from 512 channels) portable.
  const std::vector<std::string> implicit = {"_gemm_",   "_gemm_",   "_staged_", "_staged_",
                                             "_staged_", "_staged_", "_gemm_",   "_staged_"};
  ASSERT_EQ(nodes.size(), implicit.size());
  for (const bool forced : {false, true}) {
    codegen::DeviceTraits t = h200;
    t.conv_coop_1x1 = forced;  // MN_CONV_COOP_1X1=1
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Tensor n = nodes[i];
      const Node& node = g.node(n.id());
      std::vector<TensorType> types;
      for (NodeId in : node.inputs) types.push_back(g.node(in).type);
      const codegen::LowerFn* lower = codegen::find_lowering(node.op_name());
      ASSERT_NE(lower, nullptr);
      const codegen::Lowering l = (*lower)({node, types, t});
      std::vector<std::string> names;
      for (const auto& k : l.launches) names.push_back(k.name);
      SCOPED_TRACE(std::string(node.op_name()) + (forced ? " forced" : " default"));
      // The per-image products' partials would outweigh the operands 8 to 1: the implicit
      // GEMM, which sums inside its tiles, whatever the route.
      if (!forced || n.id() == partials_outweigh.id()) {
        EXPECT_EQ(count(names, "coop"), 0) << joined(names);
        EXPECT_GE(count(names, implicit[i]), 1) << joined(names);
        continue;
      }
      EXPECT_GE(count(names, "coop"), 1) << joined(names);
      EXPECT_EQ(count(names, "_gemm_"), 0) << joined(names);
      for (const auto& k : l.launches) {
        SCOPED_TRACE(k.name);
        EXPECT_NO_THROW(codegen::compile_glsl(k.glsl, codegen::CompileOptions{}));
      }
    }
  }
}

}  // namespace
}  // namespace mn
