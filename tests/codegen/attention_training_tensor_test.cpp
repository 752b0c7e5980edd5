// Attention's gradient kernels on workgroup-scope tensor-addressed matrices on the CPU side
// (lavapipe has no cooperative matrices; results are checked on the device by
// tests/tensor_cores/attention_training_coop_gpu_test.cpp with MN_TENSOR_ATTENTION=1): which
// devices and operands take them, and that every gradient form, head size, mask and operand
// dtype compiles with the current glslang to workgroup-scope bf16 matrices that pass spirv-val
// 2025.5.
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

// An H200 with its tensor-addressed matrices (bf16 as f16), asked for the kernels.
DeviceTraits tensor_traits() {
  DeviceTraits t = testing::h200_wg_traits();
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  t.coop_bf16 = true;
  t.coop_tensor = t.coop_tensor_conversions = t.tensor_attention = true;
  return t;
}

// Each attention training node of the gradients of `c`'s attention lowered with `t`, by op
// name; with `grad_kv`, attention_grad_k a second time storing attention_grad_v beside dK, as
// "attention_grad_kv".
std::vector<std::pair<std::string, Lowering>> lower_training_nodes(const Case& c,
                                                                   const DeviceTraits& t,
                                                                   bool grad_kv = true) {
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
    lowered.emplace_back(op, (*find_lowering(op))(ctx));
    if (grad_kv && op == "attention_grad_k") {
      ctx.grad_v_output = n.type.dtype;
      lowered.emplace_back("attention_grad_kv", (*find_lowering(op))(ctx));
    }
  }
  return lowered;
}

const Case kCases[] = {
    {"d64-causal-gqa", 9, 3, 200, 200, 64, 64, true, false, DType::bf16},
    {"d128-causal", 3, 1, 80, 80, 128, 128, true, false, DType::bf16},
    {"d64-mask-long-key", 2, 1, 40, 100, 64, 64, false, true, DType::f16},
    {"d64-dv128-causal-mask", 2, 2, 90, 40, 64, 128, true, true, DType::bf16},
    {"d96-dv32-mask", 2, 2, 20, 130, 96, 32, false, true, DType::f32},
    {"d32-dv48-causal", 2, 1, 90, 40, 32, 48, true, false, DType::f32},
};

TEST(AttentionTrainingTensor, EveryGradientFormCompilesToWorkgroupMatricesAndValidates) {
  if (!current_glslang().available) GTEST_SKIP() << current_glslang().status;
  if (test::spirv_val_path().empty()) GTEST_SKIP() << "no spirv-val in the build";
  DeviceTraits t = tensor_traits();
  t.coop_attention = DeviceTraits::Choice::always;  // f32 operands too
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.tag);
    const auto lowered = lower_training_nodes(c, t);
    ASSERT_EQ(lowered.size(), 5u);
    for (const auto& [op, l] : lowered) {
      SCOPED_TRACE(op);
      ASSERT_EQ(l.launches.size(), 1u);
      const KernelLaunch& k = l.launches[0];
      if (op == "attention_lse") {  // keeps the subgroup-matrix kernel
        EXPECT_EQ(k.name, "attention_lse_coop");
        continue;
      }
      EXPECT_EQ(k.name, op + "_tensor");
      EXPECT_TRUE(k.current_compiler);
      EXPECT_EQ(k.workgroup[0], std::max(c.d, c.dv) > 64 ? 256u : 128u);
      if (op == "attention_grad_kv") {
        EXPECT_EQ(k.bindings.back().arg, ArgRef::output(1));
        EXPECT_EQ(k.bindings[k.bindings.size() - 2].arg, ArgRef::output(0));
      }
      CompileOptions co;
      co.compiler = GlslCompiler::current;
      co.target = TargetEnv::vulkan_1_3;
      co.name = k.name;
      const auto spirv = compile_glsl(k.glsl, co);
      EXPECT_EQ(test::spirv_val_errors(spirv), "");
      const std::string dis = test::spirv_dis(spirv);
      EXPECT_NE(dis.find("OpCooperativeMatrixLoadTensorNV"), std::string::npos);
      EXPECT_NE(dis.find("OpCooperativeMatrixPerElementOpNV"), std::string::npos);
      EXPECT_NE(dis.find("BFloat16"), std::string::npos);
    }
  }
}

TEST(AttentionTrainingTensor, TakenOnlyWhereAskedForAndTheDeviceHasEverything) {
  const Case bf16 = kCases[0];
  for (const auto& [op, l] : lower_training_nodes(bf16, tensor_traits())) {
    EXPECT_EQ(l.launches.at(0).name, op + (op == "attention_lse" ? "_coop" : "_tensor"));
  }
  const std::pair<const char*, std::function<void(DeviceTraits&)>> others[] = {
      {"MN_TENSOR_ATTENTION unset", [](DeviceTraits& d) { d.tensor_attention = false; }},
      {"no tensor addressing", [](DeviceTraits& d) { d.coop_tensor = false; }},
      {"no conversions", [](DeviceTraits& d) { d.coop_tensor_conversions = false; }},
      {"no bf16 workgroup matrices", [](DeviceTraits& d) { d.coop_wg_bf16_granularity = {}; }},
      {"MN_COOP_ATTENTION=0",
       [](DeviceTraits& d) { d.coop_attention = DeviceTraits::Choice::never; }},
  };
  for (const auto& [what, change] : others) {
    DeviceTraits d = tensor_traits();
    change(d);
    for (const auto& [op, l] : lower_training_nodes(bf16, d, false)) {
      EXPECT_FALSE(l.launches.at(0).name.ends_with("_tensor")) << what << ": " << op;
    }
  }
  // f32 operands: only with bf16 products or when asked, as the subgroup-matrix kernels.
  Case f32 = bf16;
  f32.dtype = DType::f32;
  for (const auto& [op, l] : lower_training_nodes(f32, tensor_traits(), false)) {
    EXPECT_FALSE(l.launches.at(0).name.ends_with("_tensor")) << op;
  }
  DeviceTraits products = tensor_traits();
  products.bf16_products = true;
  for (const auto& [op, l] : lower_training_nodes(f32, products)) {
    EXPECT_EQ(l.launches.at(0).name.ends_with("_tensor"), op != "attention_lse") << op;
  }
  // Heads must be multiples of 16 up to 128.
  for (int64_t d : {8, 24, 144}) {
    Case c = bf16;
    c.d = c.dv = d;
    for (const auto& [op, l] : lower_training_nodes(c, tensor_traits(), false)) {
      EXPECT_FALSE(l.launches.at(0).name.ends_with("_tensor")) << d << ": " << op;
    }
  }
}

}  // namespace
}  // namespace mn::codegen
