// The tensor-core attention kernel on the CPU side (lavapipe has no cooperative matrices; its
// results are checked on the device by tests/tensor_cores/coop_attention_gpu_test.cpp): when a
// prompt's attention takes it, and that every form compiles and rewrites to KHR.
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/attention_nodes.h"
#include "codegen/coop_fixture.h"
#include "codegen/kernel.h"
#include "codegen/shader/shader_compiler.h"
#include "codegen/shader/spirv_coop_khr.h"

namespace mn::codegen {
namespace {

using Case = testing::AttentionCase;
using testing::attention_node;
using testing::kernel_name;

// Traits of an H200 taking the kernel wherever it fits (MN_COOP_ATTENTION=1).
DeviceTraits always() {
  DeviceTraits t = testing::h200_traits();
  t.coop_attention = DeviceTraits::Choice::always;
  return t;
}

TEST(CoopAttention, EveryFormCompilesAndRewritesToKhr) {
  const DeviceTraits t = always();
  const CompileOptions co;
  const Case cases[] = {
      {"d64-causal-gqa", {1, 9, 512, 64}, {1, 3, 512, 64}, {1, 3, 512, 64}, {}, true},
      {"d128", {2, 4, 100, 128}, {2, 4, 300, 128}, {2, 4, 300, 128}, {}, false},
      {"d16-mask", {1, 2, 40, 16}, {1, 2, 70, 16}, {1, 2, 70, 16}, {1, 40, 70}, false},
      {"d32-dv96-row-mask", {3, 33, 32}, {3, 65, 32}, {3, 65, 96}, {3, 1, 65}, true},
      {"positions", {2, 4, 64, 64}, {2, 2, 256, 64}, {2, 2, 256, 64}, {}, false, true},
      {"f16", {1, 2, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}, {}, true, false, DType::f16},
      {"bf16", {1, 2, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}, {}, false, false, DType::bf16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag);
    const Lowering l = attention_node(c)->lower(t);
    ASSERT_EQ(l.launches.size(), 1u);
    const KernelLaunch& k = l.launches[0];
    EXPECT_EQ(k.name, "attention_coop");
    EXPECT_EQ(k.workgroup[0], 128u);
    const auto spirv = compile_glsl(k.glsl, co);
    ASSERT_TRUE(uses_nv_cooperative_matrix(spirv));
    EXPECT_FALSE(uses_nv_cooperative_matrix(rewrite_nv_coop_to_khr(spirv)));
  }
}

// A training step's forward storing the log-sum-exp (schedule/saved_lse.h): output 1 bound after
// the operands and the output, the operands rounded to bf16, and the kernel still compiles and
// rewrites. (Its values: tests/tensor_cores/attention_training_coop_gpu_test.cpp.)
TEST(CoopAttention, SavingTheLogSumExpCompilesAndRewritesToKhr) {
  const DeviceTraits t = always();
  for (const Case& c :
       {Case{"d64-causal-gqa", {1, 9, 512, 64}, {1, 3, 512, 64}, {1, 3, 512, 64}, {}, true},
        Case{"d32-mask", {2, 2, 40, 32}, {2, 2, 70, 32}, {2, 2, 70, 32}, {2, 40, 70}, false}}) {
    SCOPED_TRACE(c.tag);
    auto n = attention_node(c);
    LowerContext ctx = n->ctx(t);
    ctx.saved_lse = DType::f32;
    const Lowering l = (*find_lowering("scaled_dot_product_attention"))(ctx);
    ASSERT_EQ(l.launches.size(), 1u);
    const KernelLaunch& k = l.launches[0];
    EXPECT_EQ(k.name, "attention_coop+lse");
    EXPECT_EQ(k.bindings.back().arg, ArgRef::output(1));
    EXPECT_NE(k.glsl.find("mn_f32_to_bf16"), std::string::npos);
    const auto spirv = compile_glsl(k.glsl, CompileOptions{});
    ASSERT_TRUE(uses_nv_cooperative_matrix(spirv));
    EXPECT_FALSE(uses_nv_cooperative_matrix(rewrite_nv_coop_to_khr(spirv)));
  }
}

TEST(CoopAttention, OnlyPromptsWithSuitableHeadsOnTensorCoreDevices) {
  const DeviceTraits t = always();
  const Case prompt{"prompt", {1, 2, 64, 64}, {1, 2, 64, 64}, {1, 2, 64, 64}, {}, true};
  EXPECT_EQ(kernel_name(prompt, t), "attention_coop");
  // 32 query rows is the least; decoding and short queries keep the f32 kernels.
  Case rows = prompt;
  rows.q[2] = 32;
  EXPECT_EQ(kernel_name(rows, t), "attention_coop");
  rows.q[2] = 31;
  EXPECT_NE(kernel_name(rows, t), "attention_coop");
  // Heads must be multiples of 16 up to 128, on both sides.
  for (int64_t d : {8, 24, 144}) {
    Case c = prompt;
    c.q[3] = c.k[3] = d;
    EXPECT_NE(kernel_name(c, t), "attention_coop") << d;
  }
  Case values = prompt;
  values.v[3] = 40;
  EXPECT_NE(kernel_name(values, t), "attention_coop");
  // Devices that do not take it: the f32 kernels.
  const std::pair<const char*, std::function<void(DeviceTraits&)>> others[] = {
      {"no cooperative matrices", [](DeviceTraits& d) { d.coop = false; }},
      {"subgroups of 64", [](DeviceTraits& d) { d.subgroup_size = 64; }},
      {"no subgroup vote", [](DeviceTraits& d) { d.subgroup_vote = false; }},
      {"MN_COOP_ATTENTION=0",
       [](DeviceTraits& d) { d.coop_attention = DeviceTraits::Choice::never; }},
      {"8 KiB of shared memory", [](DeviceTraits& d) { d.max_shared_bytes = 8192; }},
  };
  for (const auto& [what, change] : others) {
    DeviceTraits d = t;
    change(d);
    EXPECT_NE(kernel_name(prompt, d), "attention_coop") << what;
  }
}

// Unset, MN_COOP_ATTENTION lets the lowering choose: the tensor-core kernel where its grid gives
// the H200's 132 multiprocessors two workgroups each, or where the register-tiled kernel does
// not serve; otherwise the register tiles.
TEST(CoopAttention, ChosenForGridsThatFillTheDeviceOrHeadsTheRegisterTilesCannotTake) {
  const DeviceTraits t = testing::h200_traits();
  ASSERT_EQ(t.coop_attention, DeviceTraits::Choice::automatic);
  // 4 × 66 workgroups of 64 rows: two per multiprocessor.
  Case full{"full", {1, 4, 66 * 64, 64}, {1, 4, 66 * 64, 64}, {1, 4, 66 * 64, 64}, {}, true};
  EXPECT_EQ(kernel_name(full, t), "attention_coop");
  Case short_of = full;
  short_of.q[2] = short_of.k[2] = short_of.v[2] = 65 * 64;  // 260 workgroups
  EXPECT_EQ(kernel_name(short_of, t), "attention_tiled_registers");
  // Whisper-tiny's encoder at batch 1: 6 heads of 1500 rows, 144 workgroups.
  const Case whisper{"whisper", {1, 6, 1500, 64}, {1, 6, 1500, 64}, {1, 6, 1500, 64}, {}, false};
  EXPECT_EQ(kernel_name(whisper, t), "attention_tiled_registers");
  // Heads of 128: the register tiles do not fit 48 KiB, the f32 fallback is the scalar tiled
  // kernel, so the tensor cores take even a small grid.
  const Case wide{"wide", {1, 2, 128, 128}, {1, 2, 128, 128}, {1, 2, 128, 128}, {}, true};
  EXPECT_EQ(kernel_name(wide, t), "attention_coop");
}

}  // namespace
}  // namespace mn::codegen
