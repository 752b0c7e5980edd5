// Attention's forward on workgroup-scope tensor-addressed matrices on the CPU side (lavapipe has
// no cooperative matrices; its results are checked on the device by
// tests/tensor_cores/coop_attention_gpu_test.cpp and attention_training_coop_gpu_test.cpp with
// MN_TENSOR_ATTENTION=1): which attentions and devices take it, and that every form compiles
// with the current glslang and passes spirv-val 2025.5.
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/attention_nodes.h"
#include "codegen/attention_tensor_tiles.h"
#include "codegen/current_toolchain.h"
#include "codegen/kernel.h"

namespace mn::codegen {
namespace {

using Case = testing::AttentionCase;
using testing::attention_node;
using testing::kernel_name;

// An H200 with its tensor-addressed matrices (bf16 as f16), asked for the kernels.
DeviceTraits tensor_traits() {
  DeviceTraits t = testing::h200_wg_traits();
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  t.coop_bf16 = true;
  t.coop_tensor = t.coop_tensor_conversions = t.coop_tensor_reductions = true;
  t.tensor_attention = t.tensor_prompt_attention = true;
  t.tensor_attention_fills = 0;  // one workgroup a tile (splits: SmallGridsSplitTheirKeyBlocks)
  return t;
}

const Case kCases[] = {
    {"d64-causal-gqa", {1, 9, 512, 64}, {1, 3, 512, 64}, {1, 3, 512, 64}, {}, true},
    {"d128", {2, 4, 100, 128}, {2, 4, 300, 128}, {2, 4, 300, 128}, {}, false},
    {"d16-mask", {1, 2, 40, 16}, {1, 2, 70, 16}, {1, 2, 70, 16}, {1, 40, 70}, false},
    {"d32-dv96-row-mask", {3, 33, 32}, {3, 65, 32}, {3, 65, 96}, {3, 1, 65}, true},
    {"f16", {1, 2, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}, {}, true, false, DType::f16},
    {"bf16", {1, 2, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}, {}, false, false, DType::bf16},
    // A prompt prefilled into caches of 256 slots at per-row positions.
    {"prefill", {2, 9, 100, 64}, {2, 3, 256, 64}, {2, 3, 256, 64}, {}, false, true},
    {"prefill-bf16",
     {1, 4, 512, 64},
     {1, 2, 600, 64},
     {1, 2, 600, 64},
     {},
     false,
     true,
     DType::bf16},
};

// The case's attention lowered for `t`, saving the log-sum-exp with `lse`.
Lowering lower_case(const Case& c, const DeviceTraits& t, bool lse) {
  auto n = attention_node(c);
  LowerContext ctx = n->ctx(t);
  if (lse) ctx.saved_lse = DType::f32;
  return (*find_lowering("scaled_dot_product_attention"))(ctx);
}

// Every form (none split here), with each block's loads where they are used and, but over
// prompts at positions, all at the block's start (DeviceTraits::tensor_attention_early_loads).
TEST(AttentionTensor, EveryFormCompilesAndValidates) {
  REQUIRE_CURRENT_TOOLCHAIN();
  for (const bool early : {false, true}) {
    DeviceTraits t = tensor_traits();
    t.tensor_attention_early_loads = early;
    for (const Case& c : kCases) {
      for (const bool lse : {false, true}) {
        if (lse && c.positions) continue;  // no log-sum-exp at positions
        SCOPED_TRACE(c.tag + (lse ? " saving the log-sum-exp" : "") +
                     (early ? ", early loads" : ""));
        const Lowering l = lower_case(c, t, lse);
        ASSERT_EQ(l.launches.size(), 1u);
        const KernelLaunch& k = l.launches[0];
        EXPECT_EQ(k.name, lse ? "attention_tensor+lse" : "attention_tensor");
        EXPECT_TRUE(k.current_compiler);
        EXPECT_EQ(k.workgroup[0], c.q.back() > 64 || c.v.back() > 64 ? 256u : 128u);
        if (lse) EXPECT_EQ(k.bindings.back().arg, ArgRef::output(1));
        // bf16 matrices where the operands are bf16 or the log-sum-exp is saved, f16 otherwise.
        const bool bf16 = lse || c.dtype == DType::bf16;
        EXPECT_NE(k.glsl.find(bf16 ? "#define ELEM bfloat16_t" : "#define ELEM float16_t"),
                  std::string::npos);
        // Not over prompts at positions (not yet measured there).
        const bool early_here = early && !c.positions;
        EXPECT_NE(k.glsl.find(early_here ? "#define EARLY_LOADS 1" : "#define EARLY_LOADS 0"),
                  std::string::npos);
        const auto [errors, dis] = testing::validate_current(k);
        EXPECT_EQ(errors, "");
        EXPECT_NE(dis.find("OpCooperativeMatrixLoadTensorNV"), std::string::npos);
        EXPECT_NE(dis.find("OpCooperativeMatrixReduceNV"), std::string::npos);
        EXPECT_NE(dis.find("OpCooperativeMatrixPerElementOpNV"), std::string::npos);
      }
    }
  }
}

// Unforced, the tile follows the grid: the large-grid tile (128 rows, 256 invocations) where it
// gives every multiprocessor two workgroups, the default below (a prompt, a 1 × 256 step), and
// a forced tile whatever the grid. The lowering's workgroup is the chosen tile's.
TEST(AttentionTensor, TheTileFollowsTheGrid) {
  DeviceTraits t = tensor_traits();
  t.multiprocessors = 132;
  const AttentionTensorTile small = forward_attention_tile(t, 64, 64);
  EXPECT_EQ(std::string(small.name), "r64c64");
  EXPECT_EQ(std::string(forward_attention_tile(t, 64, 64, 72, 512).name), "r128c32w256");
  EXPECT_EQ(std::string(forward_attention_tile(t, 64, 64, 9, 512).name), "r64c64");
  // 65 × 4 workgroups against 2 × 132, and 66 × 4.
  EXPECT_EQ(std::string(forward_attention_tile(t, 64, 64, 65, 512).name), "r64c64");
  EXPECT_EQ(std::string(forward_attention_tile(t, 64, 64, 66, 512).name), "r128c32w256");
  EXPECT_EQ(std::string(training_attention_tile(t, 64, 64, 72, 512).name), "r128c32w256");
  EXPECT_EQ(std::string(training_attention_tile(t, 64, 64, 24, 512).name), "r64c64");
  DeviceTraits forced = t;
  forced.tensor_attention_tile = forced.tensor_attention_grad_tile = "r32c32w32";
  EXPECT_EQ(std::string(forward_attention_tile(forced, 64, 64, 72, 512).name), "r32c32w32");
  EXPECT_EQ(std::string(training_attention_tile(forced, 64, 64, 72, 512).name), "r32c32w32");
  // Through the lowering: 8 × 9 heads of 512 rows, and 9 heads of 512.
  for (const auto& [batch, want] : {std::pair<int64_t, uint32_t>{8, 256}, {1, 128}}) {
    const Case c{"grid", {batch, 9, 512, 64}, {batch, 3, 512, 64}, {batch, 3, 512, 64}, {}, true};
    auto n = attention_node(c);
    LowerContext ctx = n->ctx(t);
    const Lowering l = (*find_lowering("scaled_dot_product_attention"))(ctx);
    ASSERT_EQ(l.launches.size(), 1u);
    EXPECT_EQ(l.launches[0].name, "attention_tensor");
    EXPECT_EQ(l.launches[0].workgroup[0], want) << batch;
  }
}

// Every forward tile (MN_TENSOR_ATTENTION_TILE) compiles and validates for the forms it fits, with
// its own workgroup size; a form it does not fit takes another kernel.
TEST(AttentionTensor, EveryTileCompilesWhereItFits) {
  REQUIRE_CURRENT_TOOLCHAIN();
  for (const AttentionTensorTile& tile : attention_tensor_tiles()) {
    DeviceTraits t = tensor_traits();
    t.tensor_attention_tile = tile.name;
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(tile.name) + " " + c.tag);
      const auto d = static_cast<uint64_t>(c.q.back()), dv = static_cast<uint64_t>(c.v.back());
      const AttentionTensorTile resolved = forward_attention_tile(t, d, dv);
      EXPECT_EQ(resolved.rows, tile.rows);
      if (!forward_attention_fits(resolved, d, dv, t.coop_wg_granularity, t)) {
        EXPECT_NE(kernel_name(c, t), "attention_tensor");
        continue;
      }
      auto n = attention_node(c);
      LowerContext ctx = n->ctx(t);
      const Lowering l = (*find_lowering("scaled_dot_product_attention"))(ctx);
      ASSERT_EQ(l.launches.size(), 1u);
      const KernelLaunch& k = l.launches[0];
      ASSERT_EQ(k.name, "attention_tensor");
      EXPECT_EQ(k.workgroup[0], resolved.invocations);
      // The grid covers every head's query tiles of `rows`.
      const uint64_t heads = static_cast<uint64_t>(numel(c.q) / (c.q[c.q.size() - 2] * c.q.back()));
      const uint64_t tiles =
          (static_cast<uint64_t>(c.q[c.q.size() - 2]) + tile.rows - 1) / tile.rows;
      EXPECT_GE(static_cast<uint64_t>(k.groups[0]) * k.groups[1] * k.groups[2], heads * tiles);
      const auto [errors, dis] = testing::validate_current(k);
      EXPECT_EQ(errors, "");
    }
  }
  // The w256 tile needs value heads in its 32 columns' granularity: d16 falls back.
  DeviceTraits t = tensor_traits();
  t.tensor_attention_tile = "r128c64w256";
  EXPECT_NE(kernel_name(kCases[2], t), "attention_tensor");
}

// Grids too small for the device share each tile's key blocks among workgroups: segments enough
// for DeviceTraits::tensor_attention_fills fills of its 132 multiprocessors, none shorter than four
// blocks, each segment's O, M and L stored in the scratch and combined by the tile's last
// workgroup (counted per tile). A prompt at positions, whose blocks only the device knows, keeps
// one workgroup a tile. Every form compiles and validates split.
TEST(AttentionTensor, SmallGridsSplitTheirKeyBlocks) {
  REQUIRE_CURRENT_TOOLCHAIN();
  // SmolLM2's causal heads at 512: 9 heads × 8 tiles of 64 rows, walking 1 to 8 blocks of 64
  // keys (324 in all). 4 fills: 528 segments wanted, segments of 4 blocks (1 would do).
  const Case step = kCases[0];
  for (const auto& [fills, splits] : {std::pair<uint32_t, uint64_t>{4, 2}, {0, 1}}) {
    SCOPED_TRACE(fills);
    DeviceTraits t = tensor_traits();
    t.tensor_attention_fills = fills;
    auto n = attention_node(step);
    LowerContext ctx = n->ctx(t);
    const Lowering l = (*find_lowering("scaled_dot_product_attention"))(ctx);
    ASSERT_EQ(l.launches.size(), 1u);
    const KernelLaunch& k = l.launches[0];
    if (splits == 1) {
      EXPECT_EQ(k.name, "attention_tensor");
      EXPECT_TRUE(l.scratch_bytes.empty() && l.counter_bytes.empty());
      continue;
    }
    EXPECT_EQ(k.name, "attention_tensor_split" + std::to_string(splits));
    ASSERT_EQ(l.scratch_bytes.size(), 1u);
    EXPECT_EQ(l.scratch_bytes[0], splits * 72 * 64 * (64 + 2 * 64) * sizeof(float));
    ASSERT_EQ(l.counter_bytes.size(), 1u);
    EXPECT_EQ(l.counter_bytes[0], 72 * sizeof(uint32_t));
    EXPECT_EQ(k.bindings[k.bindings.size() - 2].arg, ArgRef::scratch(0));
    EXPECT_EQ(k.bindings.back().arg, ArgRef::counters(0));
    EXPECT_GE(static_cast<uint64_t>(k.groups[0]) * k.groups[1] * k.groups[2], splits * 72);
  }
  DeviceTraits many = tensor_traits();
  many.tensor_attention_fills = 9999;  // segments of four blocks wherever a tile walks eight
  for (const Case& c : kCases) {
    for (const bool lse : {false, true}) {
      if (lse && c.positions) continue;
      SCOPED_TRACE(c.tag + (lse ? " saving the log-sum-exp" : ""));
      const Lowering l = lower_case(c, many, lse);
      ASSERT_EQ(l.launches.size(), 1u);
      const KernelLaunch& k = l.launches[0];
      // At least eight blocks of 64 keys in the longest tile: the causal heads at 512.
      const int64_t keys = c.k[c.k.size() - 2];
      const bool split = !c.positions && keys >= 8 * 64;
      EXPECT_EQ(k.name.find("_split") != std::string::npos, split) << k.name;
      if (lse) EXPECT_TRUE(k.name.ends_with("+lse")) << k.name;
      const auto [errors, dis] = testing::validate_current(k);
      EXPECT_EQ(errors, "");
      if (split) EXPECT_NE(dis.find("OpAtomicIAdd"), std::string::npos);
    }
  }
}

TEST(AttentionTensor, TakenOnlyWhereAskedForAndTheDeviceHasEverything) {
  const Case prompt = kCases[0];
  EXPECT_EQ(kernel_name(prompt, tensor_traits()), "attention_tensor");
  const std::pair<const char*, std::function<void(DeviceTraits&)>> others[] = {
      {"MN_TENSOR_ATTENTION=0", [](DeviceTraits& d) { d.tensor_attention = false; }},
      {"no tensor addressing", [](DeviceTraits& d) { d.coop_tensor = false; }},
      {"no conversions", [](DeviceTraits& d) { d.coop_tensor_conversions = false; }},
      {"no reductions", [](DeviceTraits& d) { d.coop_tensor_reductions = false; }},
      {"no workgroup matrices", [](DeviceTraits& d) { d.coop_wg_granularity = {}; }},
      {"MN_COOP_ATTENTION=0",
       [](DeviceTraits& d) { d.coop_attention = DeviceTraits::Choice::never; }},
  };
  for (const auto& [what, change] : others) {
    DeviceTraits d = tensor_traits();
    change(d);
    EXPECT_NE(kernel_name(prompt, d), "attention_tensor") << what;
  }
  // Heads must be multiples of 16 up to 128, on both sides.
  for (int64_t d : {8, 24, 144}) {
    Case c = prompt;
    c.q[3] = c.k[3] = d;
    EXPECT_NE(kernel_name(c, tensor_traits()), "attention_tensor") << d;
  }
  Case values = prompt;
  values.v[3] = 40;
  EXPECT_NE(kernel_name(values, tensor_traits()), "attention_tensor");
  // At positions, a few query rows (decoding) keep the row kernels unless the tensor cores are
  // asked for.
  Case decode{"decode", {2, 9, 4, 64}, {2, 3, 256, 64}, {2, 3, 256, 64}, {}, false, true};
  EXPECT_NE(kernel_name(decode, tensor_traits()), "attention_tensor");
  DeviceTraits always = tensor_traits();
  always.coop_attention = DeviceTraits::Choice::always;
  EXPECT_EQ(kernel_name(decode, always), "attention_tensor");
  // Prompts at positions only where sessions allow them (not with MN_TENSOR_PROMPT_ATTENTION=0).
  const Case prefill = kCases[6];
  ASSERT_TRUE(prefill.positions);
  EXPECT_EQ(kernel_name(prefill, tensor_traits()), "attention_tensor");
  DeviceTraits unasked = tensor_traits();
  unasked.tensor_prompt_attention = false;
  EXPECT_NE(kernel_name(prefill, unasked), "attention_tensor");
}

}  // namespace
}  // namespace mn::codegen
