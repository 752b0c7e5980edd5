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

// The node lowered to a tensor-addressed kernel (split or not).
bool on_tensor_kernel(const Lowering& l) {
  return l.launches.at(0).name.find("_tensor") != std::string::npos;
}

// Every form, with each block's loads where they are used and, in kernels whose blocks are not
// split, all at the block's start (DeviceTraits::tensor_attention_early_loads).
TEST(AttentionTrainingTensor, EveryGradientFormCompilesToWorkgroupMatricesAndValidates) {
  REQUIRE_CURRENT_TOOLCHAIN();
  for (const bool early : {false, true}) {
    DeviceTraits t = tensor_traits();
    t.coop_attention = DeviceTraits::Choice::always;  // f32 operands too
    t.tensor_attention_early_loads = early;
    for (const Case& c : testing::kTrainingCases) {
      SCOPED_TRACE(c.tag + (early ? ", early loads" : ""));
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
        EXPECT_TRUE(k.name.starts_with(op + "_tensor")) << k.name;
        EXPECT_TRUE(k.current_compiler);
        EXPECT_EQ(k.workgroup[0], std::max(c.d, c.dv) > 64 ? 256u : 128u);
        if (op == "attention_grad_kv") {
          // dV beside dK, before the split's partials and counters where it has them.
          const size_t outputs = k.bindings.size() - (l.scratch_bytes.empty() ? 0 : 2);
          EXPECT_EQ(k.bindings[outputs - 1].arg, ArgRef::output(1));
          EXPECT_EQ(k.bindings[outputs - 2].arg, ArgRef::output(0));
        }
        const auto [errors, dis] = testing::validate_current(k);
        EXPECT_EQ(errors, "");
        EXPECT_NE(dis.find("OpCooperativeMatrixLoadTensorNV"), std::string::npos);
        EXPECT_NE(dis.find("OpCooperativeMatrixPerElementOpNV"), std::string::npos);
        EXPECT_NE(dis.find("BFloat16"), std::string::npos);
        // Early loads in kernels whose tiles' blocks are not split only.
        const bool early_here = early && k.name.find("_split") == std::string::npos;
        EXPECT_NE(k.glsl.find(early_here ? "#define EARLY_LOADS 1" : "#define EARLY_LOADS 0"),
                  std::string::npos);
      }
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
          EXPECT_FALSE(k.name.starts_with(op + "_tensor")) << k.name;
          continue;
        }
        ASSERT_TRUE(k.name.starts_with(op + "_tensor")) << k.name;
        EXPECT_EQ(k.workgroup[0], resolved.invocations);
        const auto [errors, dis] = testing::validate_current(k);
        EXPECT_EQ(errors, "");
      }
    }
  }
}

// Grids too small for the device share each tile's blocks among workgroups: segments enough for
// DeviceTraits::tensor_attention_grad_fills fills of its 132 multiprocessors, none shorter than
// four blocks, each segment's result stored in the scratch and added by the tile's last workgroup
// (counted per tile). Two batch entries of SmolLM2's causal heads (9 over 3) at 512: dK and dV on
// 64-row tiles, 6 heads × 8 tiles (blocks of 64 query rows of 3 query heads: 24 for the first
// tile, 3 for the last, 648 in all); dQ 18 heads × 8 tiles (1 to 8 blocks of keys, 648 in all).
TEST(AttentionTrainingTensor, SmallGridsSplitTheirTilesBlocks) {
  REQUIRE_CURRENT_TOOLCHAIN();
  const Case step{"smollm2-512", 9, 3, 512, 512, 64, 64, true, false, DType::bf16};
  struct Want {
    uint32_t fills;
    uint64_t kv_splits, q_splits;
  };
  // 4 fills: 528 segments wanted, segments of 4 blocks (2 would do); 1 fill: 132, segments of 5
  // blocks; 0: none.
  for (const Want& w : {Want{4, 6, 2}, Want{1, 5, 2}, Want{0, 1, 1}}) {
    SCOPED_TRACE(w.fills);
    DeviceTraits t = tensor_traits();
    t.tensor_attention_grad_fills = w.fills;
    for (const auto& [op, l] : lower_training_nodes(step, t, true)) {
      if (op != "attention_grad_kv" && op != "attention_grad_q") continue;
      SCOPED_TRACE(op);
      ASSERT_EQ(l.launches.size(), 1u);
      const KernelLaunch& k = l.launches[0];
      const bool kv = op == "attention_grad_kv";
      const uint64_t splits = kv ? w.kv_splits : w.q_splits, tiles = kv ? 48 : 144;
      // Each block's loads at its start only where the blocks are not split.
      EXPECT_NE(k.glsl.find(splits == 1 ? "#define EARLY_LOADS 1" : "#define EARLY_LOADS 0"),
                std::string::npos);
      const uint64_t width = kv ? 128 : 64;  // dK and dV, or dQ
      if (splits == 1) {
        EXPECT_EQ(k.name, op + "_tensor");
        EXPECT_TRUE(l.scratch_bytes.empty());
        EXPECT_TRUE(l.counter_bytes.empty());
        continue;
      }
      EXPECT_EQ(k.name, op + "_tensor_split" + std::to_string(splits));
      ASSERT_EQ(l.scratch_bytes.size(), 1u);
      EXPECT_EQ(l.scratch_bytes[0], splits * tiles * 64 * width * sizeof(float));
      ASSERT_EQ(l.counter_bytes.size(), 1u);
      EXPECT_EQ(l.counter_bytes[0], tiles * sizeof(uint32_t));
      EXPECT_EQ(k.bindings[k.bindings.size() - 2].arg, ArgRef::scratch(0));
      EXPECT_EQ(k.bindings.back().arg, ArgRef::counters(0));
      EXPECT_GE(static_cast<uint64_t>(k.groups[0]) * k.groups[1] * k.groups[2], splits * tiles);
      const auto [errors, dis] = testing::validate_current(k);
      EXPECT_EQ(errors, "");
      EXPECT_NE(dis.find("OpAtomicIAdd"), std::string::npos);
    }
  }
  // At 8192 the tiles take 128 rows and blocks of 32: dQ's 1152 tiles (4 to 256 blocks, 149760
  // in all) fill the device many times over and keep one workgroup a tile; dK and dV's 384 tiles
  // (12 to 768 blocks, 149760) take segments of 284 blocks, 3 for the first tiles.
  const Case long_rows{"smollm2-8192", 9, 3, 8192, 8192, 64, 64, true, false, DType::bf16};
  for (const auto& [op, l] : lower_training_nodes(long_rows, tensor_traits(), true)) {
    if (op == "attention_grad_q") EXPECT_EQ(l.launches.at(0).name, "attention_grad_q_tensor");
    if (op == "attention_grad_kv") {
      EXPECT_EQ(l.launches.at(0).name, "attention_grad_kv_tensor_split3");
    }
  }
}

TEST(AttentionTrainingTensor, TakenOnlyWhereAskedForAndTheDeviceHasEverything) {
  const Case bf16 = testing::kTrainingCases[0];
  for (const auto& [op, l] : lower_training_nodes(bf16, tensor_traits(), true)) {
    EXPECT_TRUE(
        l.launches.at(0).name.starts_with(op + (op == "attention_lse" ? "_coop" : "_tensor")))
        << l.launches.at(0).name;
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
      EXPECT_FALSE(on_tensor_kernel(l)) << what << ": " << op;
    }
  }
  // f32 operands: only with bf16 products or when asked, as the subgroup-matrix kernels.
  Case f32 = bf16;
  f32.dtype = DType::f32;
  for (const auto& [op, l] : lower_training_nodes(f32, tensor_traits())) {
    EXPECT_FALSE(on_tensor_kernel(l)) << op;
  }
  DeviceTraits products = tensor_traits();
  products.bf16_products = true;
  for (const auto& [op, l] : lower_training_nodes(f32, products, true)) {
    EXPECT_EQ(on_tensor_kernel(l), op != "attention_lse") << op;
  }
  // Heads must be multiples of 16 up to 128.
  for (int64_t d : {8, 24, 144}) {
    Case c = bf16;
    c.d = c.dv = d;
    for (const auto& [op, l] : lower_training_nodes(c, tensor_traits())) {
      EXPECT_FALSE(on_tensor_kernel(l)) << d << ": " << op;
    }
  }
}

}  // namespace
}  // namespace mn::codegen
