// Convolutions on tensor cores, checked on the CPU side (lavapipe has no cooperative matrices;
// the products are checked on the device by tests/tensor_cores): which GEMMs take the staged
// subgroup kernel and which the packed workgroup-scope one, their launches (magnitudes,
// packing, product, split-K sum), that they compile and pass spirv-val, and the packed im2col
// operand itself, run on this device against the CPU.
#include <cmath>
#include <memory>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "codegen/glsl.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/shader/shader_compiler.h"
#include "ir/op_def.h"
#include "ir/ops/conv.h"
#include "runtime/device_pool.h"
#include "runtime/run_lowering.h"
#include "support/spirv_val.h"

namespace mn::codegen {
namespace {

// The H200 with its workgroup-scope matrices but no subgroup tiles: the packed path.
DeviceTraits wg_traits() {
  DeviceTraits t = testing::h200_wg_traits();
  t.coop_tiles &= ~0xffu;
  return t;
}

using Node1 = testing::OneNode;

// conv2d of x [n, c, h, w] by w [o, c, taps, taps], padding taps / 2.
std::unique_ptr<Node1> conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o,
                            int64_t taps = 3) {
  auto r = std::make_unique<Node1>();
  Tensor x = r->g.input("x", {n, c, h, w});
  Tensor k = r->g.input("w", {o, c, taps, taps});
  Conv2dOptions opt;
  opt.padding = {taps / 2, taps / 2};
  Tensor y = conv2d(x, k, {}, opt);
  r->g.output("y", y);
  r->id = y.id();
  r->types = {r->g.node(x.id()).type, r->g.node(k.id()).type};
  return r;
}

// The weight gradient of a 3×3 convolution (padding 1) over 4 images of 256 channels at 16×16:
// M = 256 output channels, N = 256·9, K = 4·256 pixels.
Lowering weight_gradient(const DeviceTraits& t) {
  Graph g;
  Tensor x = g.input("x", {4, 256, 16, 16});
  Tensor gy = g.input("gy", {4, 256, 16, 16});
  Conv2dAttrs a;
  a.pad_h = a.pad_w = 1;
  Tensor dw = conv2d_backward_weight(x, gy, a, 3, 3);
  g.output("dw", dw);
  const std::vector<TensorType> types{g.node(x.id()).type, g.node(gy.id()).type};
  return (*find_lowering("conv2d_backward_weight"))(LowerContext{g.node(dw.id()), types, t});
}

bool named(const Lowering& l, const std::string& fragment) {
  for (const KernelLaunch& k : l.launches) {
    if (k.name.find(fragment) != std::string::npos) return true;
  }
  return false;
}

// Every launch compiles with the build's compiler (the products through the KHR rewrite where
// marked) and, where the build has spirv-val 2025.5, validates.
void expect_compiles(const Lowering& l) {
  for (const KernelLaunch& k : l.launches) {
    SCOPED_TRACE(k.name);
    CompileOptions co;
    co.coop_khr = k.coop_khr;
    co.target = TargetEnv::vulkan_1_3;
    std::vector<uint32_t> spirv;
    ASSERT_NO_THROW(spirv = compile_glsl(k.glsl, co));
    if (!test::spirv_val_path().empty()) EXPECT_EQ(test::spirv_val_errors(spirv), "");
  }
}

TEST(ConvCoop, ForwardInputAndWeightGradientsTakeTheTensorCores) {
  const DeviceTraits t = wg_traits();
  auto f = conv(4, 256, 16, 16, 256);  // M = 1024 pixels, N = 256 channels, K = 2304
  const Lowering fwd = f->lower(t);
  // Absmax and pack for im2col(x) and for w, then the product: 8 tiles of 128×256 leave the
  // device idle, so K is split in 4 and a last launch sums the partial tiles into c_store.
  ASSERT_EQ(fwd.launches.size(), 6u);
  EXPECT_EQ(fwd.launches[0].name, "conv2d_coop_absmax");
  EXPECT_EQ(fwd.launches[1].name, "conv2d_coop_pack");
  // No tile or orientation pads anything: the larger tile, as the GEMM is stated.
  EXPECT_EQ(fwd.launches[4].name, "conv2d_coop_w128x256");
  EXPECT_TRUE(fwd.launches[4].coop_khr);
  EXPECT_EQ(fwd.launches[5].name, "conv2d_coop_split_sum");
  EXPECT_NE(fwd.launches[5].glsl.find("c_store(g, m, n, acc)"), std::string::npos);
  // The scale comes from x's and w's largest magnitudes, read directly.
  EXPECT_NE(fwd.launches[0].glsl.find("v = X_ld(j)"), std::string::npos);
  EXPECT_NE(fwd.launches[2].glsl.find("v = Wt_ld(j)"), std::string::npos);
  // Packed im2col: M = 1024 by K = 2304, pixels contiguous.
  EXPECT_EQ(fwd.scratch_bytes[0], 1024u * 2304 * 2 + 16);
  // Weight gradient: M = 256, N = 2304, K = 1024: 36 tiles, K split in two, then summed.
  const Lowering wl = weight_gradient(t);
  Graph g;
  Conv2dAttrs a;
  a.pad_h = a.pad_w = 1;
  Tensor gy = g.input("gy", {4, 256, 16, 16});
  EXPECT_TRUE(named(wl, "_coop_w128x"));
  EXPECT_EQ(wl.launches.back().name, "conv2d_backward_weight_coop_split_sum");
  // Input gradient (stride 1): M = 1024, N = 256, K = 2304.
  Tensor gi = conv2d_backward_input(gy, g.input("w", {256, 256, 3, 3}), a, 16, 16);
  g.output("dx", gi);
  const std::vector<TensorType> gtypes{g.node(gy.id()).type, {{256, 256, 3, 3}, DType::f32}};
  const Lowering il = (*find_lowering("conv2d_backward_input"))(LowerContext{g.node(gi.id()), gtypes, t});
  EXPECT_TRUE(named(il, "_coop_w128x256"));
  // 128 images fill the device with 256 tiles: no split, the product stores through c_store.
  const Lowering big = conv(128, 256, 16, 16, 256)->lower(t);
  ASSERT_EQ(big.launches.size(), 5u);
  EXPECT_NE(big.launches[4].glsl.find("c_store(g, gm, gn, v)"), std::string::npos);
  // 384 output channels over 1024 pixels pad least transposed on 128×256 tiles (3 × 4 tiles,
  // against 1024 × 512 as stated): the product's rows are channels, and the sum of its split
  // K reads the partial tiles at (channel, pixel).
  const Lowering tr = conv(4, 256, 16, 16, 384)->lower(t);
  EXPECT_TRUE(named(tr, "_coop_w128x256t"));
  EXPECT_NE(tr.launches.back().glsl.find("uint slot = (n / 128u)"), std::string::npos);
  // Everything compiles; the products through the KHR rewrite.
  for (const Lowering* l : {&fwd, &wl, &il, &big, &tr}) expect_compiles(*l);
}

TEST(ConvCoop, SmallOrNarrowGemmsKeepThePortableKernel) {
  const DeviceTraits t = wg_traits();
  // 64 output channels: 1/M + 1/N > 9e-3, the packing would cost more than it saves.
  EXPECT_FALSE(named(conv(4, 256, 16, 16, 64)->lower(t), "_coop"));
  // K = 32·9 = 288 < 512.
  EXPECT_FALSE(named(conv(4, 32, 16, 16, 256)->lower(t), "_coop"));
  // M·N·K = 64·256·2304 < 2^24.
  EXPECT_FALSE(named(conv(1, 256, 8, 8, 256)->lower(t), "_coop"));
  // No workgroup-scope matrices.
  DeviceTraits none = t;
  none.coop_wg_granularity = {};
  EXPECT_FALSE(named(conv(4, 256, 16, 16, 256)->lower(none), "_coop"));
}

// The weight gradient of a taps×taps convolution (padding taps / 2) from c to o channels over n
// images of h×h.
Lowering weight_gradient_of(const DeviceTraits& t, int64_t n, int64_t c, int64_t h, int64_t o,
                            int64_t taps) {
  Graph g;
  Tensor x = g.input("x", {n, c, h, h});
  Tensor gy = g.input("gy", {n, o, h, h});
  Conv2dAttrs a;
  a.pad_h = a.pad_w = taps / 2;
  Tensor dw = conv2d_backward_weight(x, gy, a, taps, taps);
  g.output("dw", dw);
  const std::vector<TensorType> types{g.node(x.id()).type, g.node(gy.id()).type};
  return (*find_lowering("conv2d_backward_weight"))(LowerContext{g.node(dw.id()), types, t});
}

// Weight gradients pack for narrower products than forward convolutions do (their long K makes
// the portable kernel's gather slow): with taps up to 1/M + 1/N < 0.025, 1×1 to 0.012.
TEST(ConvCoop, NarrowWeightGradientsTakeTheTensorCores) {
  const DeviceTraits t = wg_traits();
  // 3×3 over 64 channels (ResNet's first stage): M = 64, N = 576, 1/M + 1/N = 0.0174.
  EXPECT_TRUE(named(weight_gradient_of(t, 4, 64, 56, 64, 3), "_coop_w"));
  // Its forward keeps the portable kernel (M = 12544 pixels, N = 64: 0.0157 > 9e-3).
  EXPECT_FALSE(named(conv(4, 64, 56, 56, 64)->lower(t), "_coop"));
  // 1×1 from 128 to 512 channels: M = 512, N = 128, 0.0098.
  EXPECT_TRUE(named(weight_gradient_of(t, 4, 128, 28, 512, 1), "_coop_w"));
  // 1×1 from 64 to 256 channels: M = 256, N = 64, 0.0195 (measured slower packed).
  EXPECT_FALSE(named(weight_gradient_of(t, 4, 64, 56, 256, 1), "_coop"));
  // 3×3 from 16 to 16 channels: 0.069, beyond even the weight gradients' bound.
  EXPECT_FALSE(named(weight_gradient_of(t, 64, 16, 56, 16, 3), "_coop"));
}

// The packed im2col operand of a forward convolution with stride 2, dilation 2 and padding,
// run here: every element equals x under its tap scaled by 2^e (zero in the padding and past
// M and K), and e follows x's largest magnitude.
TEST(ConvCoop, PackedIm2colOnDevice) {
  const DeviceTraits t = wg_traits();
  auto r = std::make_unique<Node1>();
  const int64_t n = 8, c = 64, h = 21, w = 19, o = 256;
  Tensor x = r->g.input("x", {n, c, h, w});
  Tensor k = r->g.input("w", {o, c, 3, 3});
  Conv2dOptions opt;
  opt.stride = {2, 2};
  opt.padding = {2, 1};
  opt.dilation = {2, 1};
  Tensor y = conv2d(x, k, {}, opt);
  r->g.output("y", y);
  r->id = y.id();
  r->types = {r->g.node(x.id()).type, r->g.node(k.id()).type};
  const int64_t oh = conv_out_size(h, 3, 2, 2, 2), ow = conv_out_size(w, 3, 2, 1, 1);
  const int64_t m = n * oh * ow, kk = c * 9;
  ASSERT_GE(m * o * kk, int64_t{1} << 24);
  Lowering l = r->lower(t);
  ASSERT_EQ(l.launches.size(), 5u);
  // Keep A's absmax and pack; copy the packed halves (and the exponent) to the output.
  const int64_t mp = (m + 127) / 128 * 128, kp = (kk + 63) / 64 * 64, count = mp * kp;
  Lowering only;
  only.launches = {l.launches[0], l.launches[1]};
  only.scratch_bytes = {l.scratch_bytes[0], l.scratch_bytes[1]};
  const std::string decl = glsl::buffer(0, DType::f16, "H", true) + glsl::buffer(1, DType::f32, "O", false);
  const std::string body = "  O_st(i, i < " + std::to_string(count) + "u ? H_ld(i) : float(int(H_ldb(" +
                           std::to_string(count) + "u) | (H_ldb(" + std::to_string(count + 1) +
                           "u) << 16))));\n";
  only.launches.push_back(glsl::elementwise_launch("copy", decl, body, static_cast<uint64_t>(count + 1), t,
                                                   {{ArgRef::scratch(0), false}, {ArgRef::output(), true}}));
  std::vector<double> xv(static_cast<size_t>(n * c * h * w)), wv(static_cast<size_t>(o * c * 9), 0.0);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<double>(static_cast<int>(i % 37) - 18) / 4.0;
  auto dev = runtime::shared_device("", std::nullopt);
  CompileOptions co;
  co.target = target_env_for(dev->capabilities().api_version);
  const std::vector<double> operands[] = {xv, wv};
  const DType dtypes[] = {DType::f32, DType::f32};
  const auto got = runtime::run_lowering(*dev, only, operands, dtypes, count + 1, DType::f32, co);
  // Largest |x| = 4.5 in [2^2, 2^3): e = 15 - 3 = 12. Pixels are contiguous (K×M layout).
  EXPECT_EQ(got[static_cast<size_t>(count)], 12.0);
  for (int64_t kq = 0; kq < kp; ++kq) {
    for (int64_t mq = 0; mq < mp; ++mq) {
      double want = 0;
      if (mq < m && kq < kk) {
        const int64_t b = mq / (oh * ow), p = mq % (oh * ow), yy = p / ow, xx = p % ow;
        const int64_t ch = kq / 9, i = kq % 9 / 3, j = kq % 3;
        const int64_t ih = yy * 2 + i * 2 - 2, iw = xx * 2 + j - 1;
        if (ih >= 0 && ih < h && iw >= 0 && iw < w) {
          want = std::ldexp(xv[static_cast<size_t>(((b * c + ch) * h + ih) * w + iw)], 12);
        }
      }
      ASSERT_EQ(got[static_cast<size_t>(kq * mp + mq)], want) << "k " << kq << " m " << mq;
    }
  }
}

// The H200 with the staged kernel asked for (MN_CONV_STAGED=1).
DeviceTraits staged_traits() {
  DeviceTraits t = testing::h200_wg_traits();
  t.conv_staged = true;
  return t;
}

// With subgroup tiles, every GEMM of a convolution large enough for the tensor cores takes the
// staged kernel: two magnitude launches, the product, and a sum where K is split. Nothing is
// packed, so narrow and short-K GEMMs take it too.
TEST(ConvStaged, ForwardInputAndWeightGradientsStageTheirOperands) {
  const DeviceTraits t = staged_traits();
  // M = 1024 pixels, N = 256 channels, K = 2304: 16 tiles of 128×128 fill an eighth of the
  // device, K is split (each split at least 256 long) and summed.
  const Lowering fwd = conv(4, 256, 16, 16, 256)->lower(t);
  ASSERT_EQ(fwd.launches.size(), 4u);
  EXPECT_EQ(fwd.launches[0].name, "conv2d_staged_a_absmax");
  EXPECT_EQ(fwd.launches[1].name, "conv2d_staged_b_absmax");
  EXPECT_EQ(fwd.launches[2].name, "conv2d_staged_s_splitk");
  EXPECT_EQ(fwd.launches[3].name, "conv2d_splitk_sum");
  EXPECT_NE(fwd.launches[0].glsl.find("v = X_ld(j)"), std::string::npos);
  EXPECT_NE(fwd.launches[1].glsl.find("v = Wt_ld(j)"), std::string::npos);
  // Pixels are x's contiguous axis: A's slab is K×M, read column-major; w is contiguous
  // along K: B's slab is N×K, read column-major too.
  EXPECT_NE(fwd.launches[2].glsl.find("coopMatLoadNV(fa0, S, abuf + 0u * "), std::string::npos);
  EXPECT_EQ(fwd.launches[2].glsl.find("HA["), std::string::npos);
  // No scratch but the magnitudes and the partial products.
  ASSERT_EQ(fwd.scratch_bytes.size(), 3u);
  EXPECT_EQ(fwd.scratch_bytes[2] % (1024u * 256 * 4), 0u);
  // 64 images: 16384 pixels on 128 × 2 tiles of 128 × 128 fill the device unsplit, and the
  // product stores through c_store with lanes along the pixels.
  const Lowering big = conv(64, 256, 16, 16, 256)->lower(t);
  ASSERT_EQ(big.launches.size(), 3u);
  EXPECT_EQ(big.launches[2].name.find("_splitk"), std::string::npos);
  EXPECT_NE(big.launches[2].glsl.find("c_store(g, gm, gn, v)"), std::string::npos);
  EXPECT_NE(big.launches[2].glsl.find("uint r = lane & 15u"), std::string::npos);
  // 64 output channels and K = 64·9 (both below the packed path's thresholds).
  const Lowering narrow = conv(32, 64, 56, 56, 64)->lower(t);
  EXPECT_TRUE(named(narrow, "conv2d_staged_"));
  // The 7×7 stem: K = 3·49 = 147 is not a multiple of the K step.
  const Lowering stem = conv(32, 3, 224, 224, 64, 7)->lower(t);
  EXPECT_TRUE(named(stem, "conv2d_staged_"));
  // Weight gradient: M = 256, N = 2304, K = 4·256 pixels.
  const Lowering wl = weight_gradient(t);
  Graph g;
  Conv2dAttrs a;
  a.pad_h = a.pad_w = 1;
  EXPECT_TRUE(named(wl, "conv2d_backward_weight_staged_"));
  // Input gradient with stride 2: one staged GEMM per phase.
  Conv2dAttrs s2 = a;
  s2.stride_h = s2.stride_w = 2;
  Tensor gy2 = g.input("gy2", {16, 256, 8, 8});
  Tensor gi = conv2d_backward_input(gy2, g.input("w", {256, 128, 3, 3}), s2, 16, 16);
  g.output("dx", gi);
  const std::vector<TensorType> gtypes{g.node(gy2.id()).type, {{256, 128, 3, 3}, DType::f32}};
  const Lowering il =
      (*find_lowering("conv2d_backward_input"))(LowerContext{g.node(gi.id()), gtypes, t});
  int staged = 0;
  for (const KernelLaunch& k : il.launches) {
    if (k.name.find("_staged_") != std::string::npos &&
        k.name.find("absmax") == std::string::npos) {
      ++staged;
    }
  }
  EXPECT_EQ(staged, 4);
  for (const Lowering* l : {&fwd, &big, &narrow, &stem, &wl, &il}) expect_compiles(*l);
  // Through the KHR rewrite too, as on a device with only VK_KHR_cooperative_matrix.
  Lowering khr = fwd;
  for (KernelLaunch& k : khr.launches) k.coop_khr = true;
  expect_compiles(khr);
}

// Wide 1×1 GEMMs that the packed path declines (short K, narrow products) take the staged kernel
// unasked, where it was measured faster than the portable one; narrow ones keep the portable.
TEST(ConvStaged, WideOneByOneGemmsTakeItUnasked) {
  const DeviceTraits t = testing::h200_wg_traits();
  ASSERT_FALSE(t.conv_staged);
  // Forward from 64 to 256 channels (K = 64): staged; from 256 to 64: portable.
  EXPECT_TRUE(named(conv(4, 64, 56, 56, 256, 1)->lower(t), "conv2d_staged_"));
  const Lowering narrow = conv(4, 256, 56, 56, 64, 1)->lower(t);
  EXPECT_FALSE(named(narrow, "_staged_") || named(narrow, "_coop"));
  // Input gradients: back from 64 output channels to 256 inputs, staged; from 256 to 1024
  // (K = 256), portable.
  Graph g;
  Conv2dAttrs a;
  auto input_gradient = [&](int64_t o, int64_t c, int64_t h) {
    Tensor gy = g.input("gy" + std::to_string(o), {4, o, h, h});
    Tensor w = g.input("w" + std::to_string(o), {o, c, 1, 1});
    Tensor dx = conv2d_backward_input(gy, w, a, h, h);
    const std::vector<TensorType> types{g.node(gy.id()).type, g.node(w.id()).type};
    return (*find_lowering("conv2d_backward_input"))(LowerContext{g.node(dx.id()), types, t});
  };
  EXPECT_TRUE(named(input_gradient(64, 256, 56), "conv2d_backward_input_staged_"));
  EXPECT_FALSE(named(input_gradient(256, 1024, 14), "_staged_"));
  // Weight gradients from 64 to 256 channels (packing measured slower): staged; 64 to 64:
  // portable.
  EXPECT_TRUE(named(weight_gradient_of(t, 4, 64, 56, 256, 1), "conv2d_backward_weight_staged_"));
  const Lowering small = weight_gradient_of(t, 4, 64, 56, 64, 1);
  EXPECT_FALSE(named(small, "_staged_") || named(small, "_coop"));
  // Tensor cores turned off (MN_CONV_COOP=0): the portable kernel.
  DeviceTraits off = t;
  off.conv_coop = false;
  EXPECT_FALSE(named(conv(4, 64, 56, 56, 256, 1)->lower(off), "_staged_"));
}

TEST(ConvStaged, SmallGemmsAndOtherDevicesKeepTheirKernels) {
  const DeviceTraits t = staged_traits();
  // Not asked for: the packed path.
  EXPECT_TRUE(named(conv(4, 256, 16, 16, 256)->lower(testing::h200_wg_traits()), "_coop_w128x"));
  // M·N·K = 64·64·576 < 2^24.
  EXPECT_FALSE(named(conv(1, 64, 8, 8, 64)->lower(t), "_staged"));
  // 8 output channels: below a fragment's 16.
  EXPECT_FALSE(named(conv(32, 256, 32, 32, 8)->lower(t), "_staged"));
  // No subgroup tiles: the packed workgroup-scope path.
  DeviceTraits wg = wg_traits();
  wg.conv_staged = true;
  EXPECT_TRUE(named(conv(4, 256, 16, 16, 256)->lower(wg), "_coop_w128x"));
  // A subgroup other than 32 wide, or no cooperative matrices: the portable kernel.
  DeviceTraits wide = t;
  wide.subgroup_size = 64;
  wide.coop_wg_granularity = {};
  EXPECT_FALSE(named(conv(4, 256, 16, 16, 256)->lower(wide), "_staged"));
  DeviceTraits none = t;
  none.coop = false;
  EXPECT_FALSE(named(conv(4, 256, 16, 16, 256)->lower(none), "_staged"));
}

}  // namespace
}  // namespace mn::codegen
