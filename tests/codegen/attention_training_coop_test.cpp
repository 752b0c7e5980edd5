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

#include "codegen/attention_nodes.h"
#include "codegen/current_toolchain.h"
#include "codegen/kernel.h"
#include "support/expect_error.h"
#include "support/scoped_env.h"

namespace mn::codegen {
namespace {

using Case = testing::TrainingCase;
using testing::lower_training_nodes;

// An H200 with bf16 subgroup matrices.
DeviceTraits bf16_traits() {
  DeviceTraits t = testing::h200_traits();
  t.coop_bf16 = true;
  return t;
}

TEST(AttentionTrainingCoop, EveryFormCompilesToBf16MatricesAndValidates) {
  REQUIRE_CURRENT_TOOLCHAIN();
  DeviceTraits t = bf16_traits();
  t.coop_attention = DeviceTraits::Choice::always;  // f32 operands too
  for (const Case& c : testing::kTrainingCases) {
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
      const auto [errors, dis] = testing::validate_current(k);
      EXPECT_EQ(errors, "");
      EXPECT_NE(dis.find("OpCooperativeMatrixMulAddKHR"), std::string::npos);
      EXPECT_NE(dis.find("BFloat16"), std::string::npos);
    }
  }
}

TEST(AttentionTrainingCoop, SixteenBitOperandsOnDevicesWithBf16MatricesTakeIt) {
  const Case bf16 = testing::kTrainingCases[0];
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
  Case c = testing::kTrainingCases[0];
  mn::expect_error<Error>([&] { lower_training_nodes(c, t, true); },
                          {"attention_grad_k", "attention_grad_v"});
}

}  // namespace
}  // namespace mn::codegen
