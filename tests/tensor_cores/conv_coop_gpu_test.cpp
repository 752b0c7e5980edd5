// Convolutions on tensor cores run on the device against float64, within the f16-operand
// model's bounds. The staged subgroup kernel (codegen/lower_conv_gemm_staged.h): forward with
// bias, split and not, ragged edges, the 7×7 stem (K not a multiple of the K step), the
// strided input gradient's phases, the weight gradient, through the NV and the KHR matrices.
// The packed workgroup-scope path: the implicit GEMMs of the forward convolution (with its bias
// epilogue, K split and summed, and not split), of the input gradient of a strided convolution
// (one GEMM per stride phase, each split along its own K), of the weight gradient (K = the
// batch's pixels, split) and the transposed orientation (Cᵀ = Bᵀ·Aᵀ). Each test also checks
// that the lowering took the path it is about, so a routing change cannot make it test the
// f32 kernel instead.
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>

#include "codegen/coop_fixture.h"
#include "ir/op_def.h"
#include "ir/ops/conv.h"
#include "support/tensor_cores.h"
#include "tensor_cores/coop_product.h"

namespace mn::testing {
namespace {

// One convolution op on two operands (and, for the forward, an optional per-channel bias).
struct ConvProblem {
  std::string tag;
  Shape a, b;  // the op's two operand shapes
  std::function<Tensor(Tensor, Tensor, Tensor bias)> op;
  int64_t k = 0;  // terms of each output's sum (the longest)
  bool bias = false;
};

// The lowering's launch names, joined.
std::string names(const codegen::Lowering& l) {
  std::string s;
  for (const auto& k : l.launches) s += k.name + " ";
  return s;
}

struct Outcome {
  std::string kernels;
  ::testing::AssertionResult fits = ::testing::AssertionSuccess();
};

// Lowers the problem with `t`, runs it, and compares with the model.
Outcome run(const ConvProblem& p, const codegen::DeviceTraits& t, uint64_t seed) {
  auto node = std::make_unique<codegen::testing::OneNode>();
  Tensor a = node->g.input("a", p.a);
  Tensor b = node->g.input("b", p.b);
  Tensor out = p.op(a, b, p.bias ? node->g.input("bias", {p.b[0]}) : Tensor{});
  node->g.output("out", out);
  node->id = out.id();
  for (NodeId i : node->g.node(out.id()).inputs) node->types.push_back(node->g.node(i).type);
  const codegen::Lowering l = node->lower(t);

  std::vector<std::vector<double>> operands;
  std::vector<DType> dtypes;
  operands.push_back(operand_values(static_cast<size_t>(numel(p.a)), seed, 1.0, DType::f32));
  operands.push_back(operand_values(static_cast<size_t>(numel(p.b)), seed + 1, 1.0, DType::f32));
  dtypes = {DType::f32, DType::f32};
  // The bilinear op alone, in float64 through the reference.
  auto product = [&](const std::vector<double>& x, const std::vector<double>& y) {
    Graph g;
    Tensor ga = g.input("a", p.a);
    Tensor gb = g.input("b", p.b);
    g.output("out", p.op(ga, gb, Tensor{}));
    reference::Feeds f;
    f["a"] = Array(p.a, DType::f32, x);
    f["b"] = Array(p.b, DType::f32, y);
    return reference::evaluate(g, f).at("out").data;
  };
  std::function<double(double, size_t, bool)> epi;
  const Shape& os = node->g.node(out.id()).type.shape;
  if (p.bias) {
    const int64_t channels = os[1], plane = os[2] * os[3];
    operands.push_back(operand_values(static_cast<size_t>(channels), seed + 2, 8.0, DType::f32));
    dtypes.push_back(DType::f32);
    const std::vector<double> bias = operands.back();
    epi = [bias, channels, plane](double v, size_t i, bool magnitude) {
      const double c = bias[(i / static_cast<size_t>(plane)) % static_cast<size_t>(channels)];
      return magnitude ? v + std::abs(c) : v + c;
    };
  }
  const ProductModel m =
      product_model(product, operands[0], operands[1], p.k, 0x1p-11, DType::f32, epi);
  const auto got = run_on_device(l, operands, dtypes, numel(os), DType::f32, t.coop_khr);
  return {names(l), fits_f16_model(got, m)};
}

codegen::DeviceTraits workgroup_traits() { return coop_trial_traits(CoopPath::workgroup); }

Conv2dOptions pad1() {
  Conv2dOptions o;
  o.padding = {1, 1};
  return o;
}

// The problems both paths run. A forward convolution with bias: M = 256 pixels, N = 256
// channels, K = 128·9 = 1152.
ConvProblem forward_with_bias() {
  return {
      "forward",        {1, 128, 16, 16},
      {256, 128, 3, 3}, [](Tensor x, Tensor w, Tensor bias) { return conv2d(x, w, bias, pad1()); },
      128 * 9,          true};
}

// The input gradient of a 3×3 convolution with stride 2: four phases of 256 pixels each, with
// 4, 2, 2 and 1 taps (K = 512 channels × taps), each its own GEMM.
ConvProblem strided_input_gradient() {
  Conv2dAttrs a;
  a.stride_h = a.stride_w = 2;
  a.pad_h = a.pad_w = 1;
  return {"input gradient",
          {4, 512, 8, 8},
          {512, 256, 3, 3},
          [a](Tensor gy, Tensor w, Tensor) { return conv2d_backward_input(gy, w, a, 16, 16); },
          512 * 9};
}

// The weight gradient: M = 256 output channels, N = 32·9 = 288, K = 16 images × 64 pixels.
ConvProblem weight_gradient() {
  Conv2dAttrs a;
  a.pad_h = a.pad_w = 1;
  return {"weight gradient",
          {16, 32, 8, 8},
          {16, 256, 8, 8},
          [a](Tensor x, Tensor gy, Tensor) { return conv2d_backward_weight(x, gy, a, 3, 3); },
          16 * 64};
}

// Launches whose kernel name contains `fragment`, the operands' magnitude launches
// (<product>_a_absmax, <product>_b_absmax) not counted.
int count_products(const std::string& kernels, const std::string& fragment) {
  int n = 0;
  std::istringstream names(kernels);
  for (std::string name; names >> name;) {
    const bool magnitude = name.size() >= 7 && name.compare(name.size() - 7, 7, "_absmax") == 0;
    if (!magnitude && name.find(fragment) != std::string::npos) ++n;
  }
  return n;
}

// Two tiles of 128×256 leave the device idle, so K is split in two and summed; with a device
// of one multiprocessor, not split.
TEST(ConvCoopGpu, ForwardWithBiasSplitAndNotSplit) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  const ConvProblem p = forward_with_bias();
  const Outcome split = run(p, workgroup_traits(), 1);
  EXPECT_NE(split.kernels.find("conv2d_coop_w128x"), std::string::npos) << split.kernels;
  EXPECT_NE(split.kernels.find("conv2d_coop_split_sum"), std::string::npos) << split.kernels;
  EXPECT_TRUE(split.fits) << split.kernels;
  codegen::DeviceTraits one = workgroup_traits();
  one.multiprocessors = 1;
  const Outcome whole = run(p, one, 2);
  EXPECT_NE(whole.kernels.find("conv2d_coop_w128x"), std::string::npos) << whole.kernels;
  EXPECT_EQ(whole.kernels.find("split_sum"), std::string::npos) << whole.kernels;
  EXPECT_TRUE(whole.fits) << whole.kernels;
}

// 384 output channels over 512 pixels pad least transposed on 128×256 tiles: the product's
// rows are the channels.
TEST(ConvCoopGpu, ForwardTransposedOrientation) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  const ConvProblem p{"transposed",
                      {2, 64, 16, 16},
                      {384, 64, 3, 3},
                      [](Tensor x, Tensor w, Tensor) { return conv2d(x, w, {}, pad1()); },
                      64 * 9};
  const Outcome o = run(p, workgroup_traits(), 3);
  EXPECT_NE(o.kernels.find("_coop_w128x256t"), std::string::npos) << o.kernels;
  EXPECT_TRUE(o.fits) << o.kernels;
}

TEST(ConvCoopGpu, StridedInputGradientPhases) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  const ConvProblem p = strided_input_gradient();
  const Outcome o = run(p, workgroup_traits(), 4);
  EXPECT_EQ(count_products(o.kernels, "_coop_w128x"), 4) << o.kernels;
  EXPECT_TRUE(o.fits) << o.kernels;
}

// Four tiles: K split in two and summed.
TEST(ConvCoopGpu, WeightGradientSplitK) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  const ConvProblem p = weight_gradient();
  const Outcome o = run(p, workgroup_traits(), 5);
  EXPECT_NE(o.kernels.find("conv2d_backward_weight_coop_w128x"), std::string::npos) << o.kernels;
  EXPECT_NE(o.kernels.find("conv2d_backward_weight_coop_split_sum"), std::string::npos)
      << o.kernels;
  EXPECT_TRUE(o.fits) << o.kernels;
}

// The staged kernel asked for, on the subgroup tiles only.
codegen::DeviceTraits staged_traits(CoopPath path) {
  codegen::DeviceTraits t = coop_trial_traits(path);
  t.conv_staged = true;
  t.coop_wg_granularity = {};
  return t;
}

TEST(ConvStagedGpu, ForwardWithBiasSplitAndNotSplit) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  const ConvProblem p = forward_with_bias();
  const Outcome split = run(p, staged_traits(CoopPath::nv), 11);
  EXPECT_NE(split.kernels.find("conv2d_staged_s_splitk"), std::string::npos) << split.kernels;
  EXPECT_NE(split.kernels.find("conv2d_splitk_sum"), std::string::npos) << split.kernels;
  EXPECT_TRUE(split.fits) << split.kernels;
  codegen::DeviceTraits one = staged_traits(CoopPath::nv);
  one.multiprocessors = 1;
  const Outcome whole = run(p, one, 12);
  EXPECT_EQ(count_products(whole.kernels, "conv2d_staged_"), 1) << whole.kernels;
  EXPECT_EQ(whole.kernels.find("splitk"), std::string::npos) << whole.kernels;
  EXPECT_TRUE(whole.fits) << whole.kernels;
}

// 450 pixels by 96 channels (neither a whole tile), and the stem's 7×7 taps over 3 channels
// with stride 2 (K = 147, not a whole K step), each through one multiprocessor (unsplit) and
// the device's (split).
TEST(ConvStagedGpu, RaggedEdgesAndTheStem) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  const ConvProblem ragged{"ragged",
                           {2, 64, 15, 15},
                           {96, 64, 3, 3},
                           [](Tensor x, Tensor w, Tensor) { return conv2d(x, w, {}, pad1()); },
                           64 * 9};
  Conv2dOptions stem_opt;
  stem_opt.stride = {2, 2};
  stem_opt.padding = {3, 3};
  const ConvProblem stem{
      "stem",        {2, 3, 64, 64},
      {64, 3, 7, 7}, [stem_opt](Tensor x, Tensor w, Tensor b) { return conv2d(x, w, b, stem_opt); },
      3 * 49,        true};
  uint64_t seed = 20;
  for (const ConvProblem* p : {&ragged, &stem}) {
    for (int mps : {1, 0}) {
      SCOPED_TRACE(p->tag + (mps ? " unsplit" : " split"));
      codegen::DeviceTraits t = staged_traits(CoopPath::nv);
      if (mps) t.multiprocessors = mps;
      const Outcome o = run(*p, t, seed++);
      EXPECT_EQ(count_products(o.kernels, "conv2d_staged_"), 1) << o.kernels;
      EXPECT_TRUE(o.fits) << o.kernels;
    }
  }
}

TEST(ConvStagedGpu, StridedInputGradientPhasesAndWeightGradient) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  const Outcome i = run(strided_input_gradient(), staged_traits(CoopPath::nv), 30);
  EXPECT_EQ(count_products(i.kernels, "_staged_"), 4) << i.kernels;
  EXPECT_TRUE(i.fits) << i.kernels;
  const Outcome w = run(weight_gradient(), staged_traits(CoopPath::nv), 31);
  EXPECT_NE(w.kernels.find("conv2d_backward_weight_staged_"), std::string::npos) << w.kernels;
  EXPECT_TRUE(w.fits) << w.kernels;
}

// Wide 1×1 GEMMs take the staged kernel unasked where the packed path declines them: the
// forward from 64 to 256 channels, its input gradient, and its weight gradient.
TEST(ConvStagedGpu, OneByOneLayersUnasked) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  Conv2dAttrs unit;
  const ConvProblem forward{"forward",
                            {4, 64, 24, 24},
                            {256, 64, 1, 1},
                            [](Tensor x, Tensor w, Tensor b) { return conv2d(x, w, b); },
                            64,
                            true};
  const ConvProblem input{
      "input gradient",
      {4, 64, 24, 24},
      {64, 256, 1, 1},
      [unit](Tensor gy, Tensor w, Tensor) { return conv2d_backward_input(gy, w, unit, 24, 24); },
      64};
  const ConvProblem weight{
      "weight gradient",
      {8, 64, 24, 24},
      {8, 256, 24, 24},
      [unit](Tensor x, Tensor gy, Tensor) { return conv2d_backward_weight(x, gy, unit, 1, 1); },
      8 * 24 * 24};
  uint64_t seed = 45;
  for (const ConvProblem* p : {&forward, &input, &weight}) {
    SCOPED_TRACE(p->tag);
    const Outcome o = run(*p, coop_trial_traits(CoopPath::nv), seed++);
    EXPECT_EQ(count_products(o.kernels, "_staged_"), 1) << o.kernels;
    EXPECT_TRUE(o.fits) << o.kernels;
  }
}

TEST(ConvStagedGpu, ThroughTheKhrRewrite) {
  MN_REQUIRE_COOP_PATH(CoopPath::khr);
  const ConvProblem p{
      "forward",        {2, 128, 16, 16},
      {192, 128, 3, 3}, [](Tensor x, Tensor w, Tensor bias) { return conv2d(x, w, bias, pad1()); },
      128 * 9,          true};
  const Outcome o = run(p, staged_traits(CoopPath::khr), 40);
  EXPECT_NE(o.kernels.find("conv2d_staged_"), std::string::npos) << o.kernels;
  EXPECT_TRUE(o.fits) << o.kernels;
}

// The harness on any device: the same problems through the f32 implicit GEMM fit the model (far
// inside it), so the reference, the bias indexing and the operand order are right before the
// tensor-core tests rely on them.
TEST(ConvCoopHarness, PortableKernelFitsTheModel) {
  codegen::DeviceTraits t = workgroup_traits();
  t.coop = false;
  Conv2dAttrs stride2;
  stride2.stride_h = stride2.stride_w = 2;
  stride2.pad_h = stride2.pad_w = 1;
  const ConvProblem problems[] = {
      {"forward",
       {1, 16, 8, 8},
       {24, 16, 3, 3},
       [](Tensor x, Tensor w, Tensor bias) { return conv2d(x, w, bias, pad1()); },
       16 * 9,
       true},
      {"input gradient",
       {2, 24, 4, 4},
       {24, 16, 3, 3},
       [stride2](Tensor gy, Tensor w, Tensor) {
         return conv2d_backward_input(gy, w, stride2, 8, 8);
       },
       24 * 9},
      {"weight gradient",
       {2, 16, 8, 8},
       {2, 24, 8, 8},
       [](Tensor x, Tensor gy, Tensor) {
         Conv2dAttrs a;
         a.pad_h = a.pad_w = 1;
         return conv2d_backward_weight(x, gy, a, 3, 3);
       },
       2 * 64},
  };
  uint64_t seed = 50;
  for (const ConvProblem& p : problems) {
    SCOPED_TRACE(p.tag);
    const Outcome o = run(p, t, seed++);
    EXPECT_EQ(o.kernels.find("coop"), std::string::npos) << o.kernels;
    EXPECT_TRUE(o.fits) << o.kernels;
  }
}

}  // namespace
}  // namespace mn::testing
