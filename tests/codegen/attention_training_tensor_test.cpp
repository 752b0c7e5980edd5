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

#include "codegen/attention_nodes.h"
#include "codegen/attention_tensor_tiles.h"
#include "codegen/current_toolchain.h"
#include "codegen/kernel.h"
#include "support/scoped_env.h"

namespace mn::codegen {
namespace {

using Case = testing::TrainingCase;
using testing::lower_training_nodes;

// An H200 with its tensor-addressed matrices (bf16 as f16), asked for the kernels.
DeviceTraits tensor_traits() {
  DeviceTraits t = testing::h200_wg_traits();
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  t.coop_bf16 = true;
  t.coop_tensor = t.coop_tensor_conversions = t.tensor_attention = true;
  return t;
}

TEST(AttentionTrainingTensor, EveryGradientFormCompilesToWorkgroupMatricesAndValidates) {
  REQUIRE_CURRENT_TOOLCHAIN();
  DeviceTraits t = tensor_traits();
  t.coop_attention = DeviceTraits::Choice::always;  // f32 operands too
  for (const Case& c : testing::kTrainingCases) {
    SCOPED_TRACE(c.tag);
    const auto lowered = lower_training_nodes(c, t, true);
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
      const auto [errors, dis] = testing::validate_current(k);
      EXPECT_EQ(errors, "");
      EXPECT_NE(dis.find("OpCooperativeMatrixLoadTensorNV"), std::string::npos);
      EXPECT_NE(dis.find("OpCooperativeMatrixPerElementOpNV"), std::string::npos);
      EXPECT_NE(dis.find("BFloat16"), std::string::npos);
    }
  }
}

// Every tile (MN_TENSOR_ATTENTION_GRAD_TILE) compiles and validates for the gradient forms of the
// cases it fits, with its own workgroup size; cases it does not fit take other kernels.
TEST(AttentionTrainingTensor, EveryTileCompilesWhereItFits) {
  REQUIRE_CURRENT_TOOLCHAIN();
  for (const AttentionTensorTile& tile : attention_tensor_tiles()) {
    DeviceTraits t = tensor_traits();
    t.coop_attention = DeviceTraits::Choice::always;
    t.tensor_attention_grad_tile = tile.name;
    for (const Case& c : testing::kTrainingCases) {
      SCOPED_TRACE(std::string(tile.name) + " " + c.tag);
      const auto d = static_cast<uint64_t>(c.d), dv = static_cast<uint64_t>(c.dv);
      const AttentionTensorTile resolved = training_attention_tile(t, d, dv);
      const bool fits = training_attention_fits(resolved, d, dv, t.coop_wg_bf16_granularity, t);
      for (const auto& [op, l] : lower_training_nodes(c, t, true)) {
        if (op == "attention_lse") continue;
        SCOPED_TRACE(op);
        ASSERT_EQ(l.launches.size(), 1u);
        const KernelLaunch& k = l.launches[0];
        if (!fits) {
          EXPECT_NE(k.name, op + "_tensor");
          continue;
        }
        ASSERT_EQ(k.name, op + "_tensor");
        EXPECT_EQ(k.workgroup[0], resolved.invocations);
        const auto [errors, dis] = testing::validate_current(k);
        EXPECT_EQ(errors, "");
      }
    }
  }
}

TEST(AttentionTrainingTensor, TakenOnlyWhereAskedForAndTheDeviceHasEverything) {
  const Case bf16 = testing::kTrainingCases[0];
  for (const auto& [op, l] : lower_training_nodes(bf16, tensor_traits(), true)) {
    EXPECT_EQ(l.launches.at(0).name, op + (op == "attention_lse" ? "_coop" : "_tensor"));
  }
  const std::pair<const char*, std::function<void(DeviceTraits&)>> others[] = {
      {"MN_TENSOR_ATTENTION=0", [](DeviceTraits& d) { d.tensor_attention = false; }},
      {"no tensor addressing", [](DeviceTraits& d) { d.coop_tensor = false; }},
      {"no conversions", [](DeviceTraits& d) { d.coop_tensor_conversions = false; }},
      {"no bf16 workgroup matrices", [](DeviceTraits& d) { d.coop_wg_bf16_granularity = {}; }},
      {"MN_COOP_ATTENTION=0",
       [](DeviceTraits& d) { d.coop_attention = DeviceTraits::Choice::never; }},
  };
  for (const auto& [what, change] : others) {
    DeviceTraits d = tensor_traits();
    change(d);
    for (const auto& [op, l] : lower_training_nodes(bf16, d)) {
      EXPECT_FALSE(l.launches.at(0).name.ends_with("_tensor")) << what << ": " << op;
    }
  }
  // f32 operands: only with bf16 products or when asked, as the subgroup-matrix kernels.
  Case f32 = bf16;
  f32.dtype = DType::f32;
  for (const auto& [op, l] : lower_training_nodes(f32, tensor_traits())) {
    EXPECT_FALSE(l.launches.at(0).name.ends_with("_tensor")) << op;
  }
  DeviceTraits products = tensor_traits();
  products.bf16_products = true;
  for (const auto& [op, l] : lower_training_nodes(f32, products, true)) {
    EXPECT_EQ(l.launches.at(0).name.ends_with("_tensor"), op != "attention_lse") << op;
  }
  // Heads must be multiples of 16 up to 128.
  for (int64_t d : {8, 24, 144}) {
    Case c = bf16;
    c.d = c.dv = d;
    for (const auto& [op, l] : lower_training_nodes(c, tensor_traits())) {
      EXPECT_FALSE(l.launches.at(0).name.ends_with("_tensor")) << d << ": " << op;
    }
  }
}

}  // namespace
}  // namespace mn::codegen
