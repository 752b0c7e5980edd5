// Attention's training kernels on tensor cores on the CPU side (lavapipe has no cooperative
// matrices; results are checked on the device by
// tests/tensor_cores/attention_training_coop_gpu_test.cpp): which operands and devices take
// them, and that every form, head size, mask and dtype compiles with the current glslang to
// bf16 matrices that pass spirv-val 2025.5.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "codegen/kernel.h"
#include "codegen/shader/current_glslang.h"
#include "codegen/shader/shader_compiler.h"
#include "support/expect_error.h"
#include "support/scoped_env.h"
#include "support/spirv_val.h"

namespace mn::codegen {
namespace {

struct Case {
  std::string tag;
  int64_t hq, hkv, lq, lk, d, dv;
  bool causal, mask;
  DType dtype;
};

// An H200 with bf16 subgroup matrices.
DeviceTraits bf16_traits() {
  DeviceTraits t = testing::h200_traits();
  t.coop_bf16 = true;
  return t;
}

// Each attention training node of the gradients of `c`'s attention, lowered with `t`: its
// op name and its launches. With `grad_kv`, attention_grad_k is lowered storing
// attention_grad_v beside dK (schedule/grad_kv.h) and listed as "attention_grad_kv".
std::vector<std::pair<std::string, Lowering>> lower_training_nodes(const Case& c,
                                                                   const DeviceTraits& t,
                                                                   bool grad_kv = false) {
  mn::testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  Graph g;
  Tensor q = g.input("q", {2, c.hq, c.lq, c.d}, c.dtype);
  Tensor k = g.input("k", {2, c.hkv, c.lk, c.d}, c.dtype);
  Tensor v = g.input("v", {2, c.hkv, c.lk, c.dv}, c.dtype);
  Tensor dout = g.input("dout", {2, c.hq, c.lq, c.dv}, c.dtype);
  Tensor mask = c.mask ? g.input("mask", {c.lq, c.lk}, c.dtype) : Tensor{};
  Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal);
  const std::vector<Tensor> grads = gradients(out, {q, k, v}, dout);
  for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::to_string(i), grads[i]);
  std::vector<std::pair<std::string, Lowering>> lowered;
  for (const Node& n : g.nodes()) {
    const std::string op(n.op_name());
    if (op != "attention_lse" && !op.starts_with("attention_grad_")) continue;
    std::vector<TensorType> types;
    for (NodeId in : n.inputs) types.push_back(g.node(in).type);
    LowerContext ctx{n, types, t};
    if (grad_kv && op == "attention_grad_k") {
      ctx.grad_v_output = n.type.dtype;
      lowered.emplace_back("attention_grad_kv", (*find_lowering(op))(ctx));
      continue;
    }
    lowered.emplace_back(op, (*find_lowering(op))(ctx));
  }
  return lowered;
}

const Case kCases[] = {
    {"d64-causal-gqa", 9, 3, 200, 200, 64, 64, true, false, DType::bf16},
    {"d128-causal", 3, 1, 80, 80, 128, 128, true, false, DType::bf16},
    {"d64-mask-long-key", 2, 1, 40, 100, 64, 64, false, true, DType::f16},
    {"d64-dv128-causal-mask", 2, 2, 90, 40, 64, 128, true, true, DType::bf16},
    {"d96-dv32-mask", 2, 2, 20, 130, 96, 32, false, true, DType::f32},
    {"d16-dv48-causal", 2, 1, 90, 40, 16, 48, true, false, DType::f32},
};

TEST(AttentionTrainingCoop, EveryFormCompilesToBf16MatricesAndValidates) {
  if (!current_glslang().available) GTEST_SKIP() << current_glslang().status;
  if (test::spirv_val_path().empty()) GTEST_SKIP() << "no spirv-val in the build";
  DeviceTraits t = bf16_traits();
  t.coop_attention = DeviceTraits::Choice::always;  // f32 operands too
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.tag);
    auto lowered = lower_training_nodes(c, t);
    ASSERT_EQ(lowered.size(), 4u);
    for (auto& fused : lower_training_nodes(c, t, true)) {
      if (fused.first != "attention_grad_kv") continue;
      // dK and dV: the operands' bindings, then outputs 0 and 1.
      const auto& b = fused.second.launches.at(0).bindings;
      EXPECT_EQ(b.back().arg, ArgRef::output(1));
      EXPECT_EQ(b[b.size() - 2].arg, ArgRef::output(0));
      lowered.push_back(std::move(fused));
    }
    ASSERT_EQ(lowered.size(), 5u);
    for (const auto& [op, l] : lowered) {
      SCOPED_TRACE(op);
      ASSERT_EQ(l.launches.size(), 1u);
      const KernelLaunch& k = l.launches[0];
      EXPECT_EQ(k.name, op + "_coop");
      EXPECT_TRUE(k.current_compiler);
      EXPECT_EQ(k.workgroup[0], 128u);
      CompileOptions co;
      co.compiler = GlslCompiler::current;
      co.target = TargetEnv::vulkan_1_3;
      co.name = k.name;
      const auto spirv = compile_glsl(k.glsl, co);
      EXPECT_EQ(test::spirv_val_errors(spirv), "");
      const std::string dis = test::spirv_dis(spirv);
      EXPECT_NE(dis.find("OpCooperativeMatrixMulAddKHR"), std::string::npos);
      EXPECT_NE(dis.find("BFloat16"), std::string::npos);
    }
  }
}

TEST(AttentionTrainingCoop, SixteenBitOperandsOnDevicesWithBf16MatricesTakeIt) {
  const Case bf16 = kCases[0];
  for (const auto& [op, l] : lower_training_nodes(bf16, bf16_traits())) {
    EXPECT_EQ(l.launches.at(0).name, op + "_coop");
  }
  // f32 operands keep the f32 kernels unless asked (their matrices would round them to bf16).
  Case f32 = bf16;
  f32.dtype = DType::f32;
  for (const auto& [op, l] : lower_training_nodes(f32, bf16_traits())) {
    EXPECT_EQ(l.launches.at(0).name, op + "_tiled");
  }
  const std::pair<const char*, std::function<void(DeviceTraits&)>> others[] = {
      {"no bf16 matrices", [](DeviceTraits& d) { d.coop_bf16 = false; }},
      {"no cooperative matrices", [](DeviceTraits& d) { d.coop = false; }},
      {"subgroups of 64", [](DeviceTraits& d) { d.subgroup_size = 64; }},
      {"MN_COOP_ATTENTION=0",
       [](DeviceTraits& d) { d.coop_attention = DeviceTraits::Choice::never; }},
      {"8 KiB of shared memory", [](DeviceTraits& d) { d.max_shared_bytes = 8192; }},
  };
  for (const auto& [what, change] : others) {
    DeviceTraits d = bf16_traits();
    change(d);
    for (const auto& [op, l] : lower_training_nodes(bf16, d)) {
      EXPECT_FALSE(l.launches.at(0).name.ends_with("_coop")) << what << ": " << op;
    }
  }
  // Heads must be multiples of 16 up to 128.
  for (int64_t d : {8, 24, 144}) {
    Case c = bf16;
    c.d = c.dv = d;
    for (const auto& [op, l] : lower_training_nodes(c, bf16_traits())) {
      EXPECT_FALSE(l.launches.at(0).name.ends_with("_coop")) << d << ": " << op;
    }
  }
}

// attention_grad_k asked to store dV where no kernel can (the f32 kernels do not): a clear
// error naming both ops, not a kernel that leaves output 1 unwritten.
TEST(AttentionTrainingCoop, ValueGradientBesideTheKeyGradientOnlyOnTensorCores) {
  DeviceTraits t = bf16_traits();
  t.coop_bf16 = false;
  Case c = kCases[0];
  mn::expect_error<Error>([&] { lower_training_nodes(c, t, true); },
                          {"attention_grad_k", "attention_grad_v"});
}

}  // namespace
}  // namespace mn::codegen
