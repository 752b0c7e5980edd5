// When cooperative matrices are used: reported configurations, the capability table, the
// MN_DISABLE_COOP / MN_COOP overrides, the self-test cache (through an injected self-test),
// and the fallback on a device without them (lavapipe in CI).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/session.h>

#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/shader/shader_compiler.h"
#include "runtime/coop_support.h"
#include "runtime/device_pool.h"
#include "runtime/host_tensor.h"
#include "runtime/plan_options.h"
#include "support/expect_error.h"
#include "support/scoped_env.h"
#include "support/scratch_dir.h"
#include "vulkan/arena.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn::runtime {
namespace {

vk::DeviceCapabilities nvidia() {
  vk::DeviceCapabilities c;
  c.name = "NVIDIA H200";
  c.vendor_id = 0x10de;
  c.device_id = 0x2335;
  c.driver_version = "570.1";
  c.device_type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  c.types.float16 = true;
  c.vulkan_memory_model = true;
  c.cooperative_matrix.nv_feature = c.cooperative_matrix.khr_feature = true;
  vk::CooperativeMatrixConfig f16{16, 16, 16, "f16", "f16", "f32", "f32", false, "subgroup"};
  vk::CooperativeMatrixConfig narrow{16, 8, 16, "f16", "f16", "f16", "f16", false, "subgroup"};
  c.cooperative_matrix.nv_configs = {narrow, f16};
  c.cooperative_matrix.khr_configs = {f16};
  return c;
}

using EnvVar = testing::ScopedEnv;

TEST(CoopSupport, CandidateFromReportedConfigurations) {
  auto c = nvidia();
  EXPECT_TRUE(coop_candidate(c, CoopMode::automatic).usable);
  const auto khr = coop_candidate(c, CoopMode::khr);
  EXPECT_TRUE(khr.usable);
  EXPECT_TRUE(khr.khr);
  EXPECT_FALSE(coop_candidate(c, CoopMode::off).usable);

  auto narrow_only = c;
  narrow_only.cooperative_matrix.nv_configs.pop_back();
  EXPECT_FALSE(coop_candidate(narrow_only, CoopMode::automatic).usable);
  EXPECT_TRUE(coop_candidate(narrow_only, CoopMode::khr).usable);  // KHR still has it

  auto no_feature = c;
  no_feature.cooperative_matrix.nv_feature = false;
  EXPECT_NE(coop_candidate(no_feature, CoopMode::automatic).reason, "");
  EXPECT_FALSE(coop_candidate(no_feature, CoopMode::automatic).usable);

  auto no_f16 = c;
  no_f16.types.float16 = false;
  EXPECT_FALSE(coop_candidate(no_f16, CoopMode::automatic).usable);
}

TEST(CoopSupport, CapabilityTableOverridesTheDriver) {
  auto c = nvidia();
  c.name = "NVIDIA GeForce GTX 1080";  // reports NV cooperative matrices, has no tensor cores
  const auto cand = coop_candidate(c, CoopMode::automatic);
  EXPECT_FALSE(cand.usable);
  EXPECT_NE(cand.reason.find("capability table"), std::string::npos);
  auto soft = nvidia();
  soft.vendor_id = 0x10005;
  soft.name = "llvmpipe (LLVM 15.0.6, 256 bits)";
  EXPECT_FALSE(coop_candidate(soft, CoopMode::automatic).usable);
}

TEST(CoopSupport, EnvironmentOverrides) {
  {
    EnvVar a("MN_DISABLE_COOP", "1"), b("MN_COOP", "khr");
    EXPECT_EQ(coop_mode_from_env(), CoopMode::off);  // disabling wins
  }
  {
    EnvVar a("MN_DISABLE_COOP", nullptr), b("MN_COOP", "khr");
    EXPECT_EQ(coop_mode_from_env(), CoopMode::khr);
  }
  {
    EnvVar a("MN_DISABLE_COOP", "0"), b("MN_COOP", nullptr);
    EXPECT_EQ(coop_mode_from_env(), CoopMode::automatic);
  }
  {
    EnvVar a("MN_DISABLE_COOP", nullptr), b("MN_COOP", "tensor");
    EXPECT_THROW(coop_mode_from_env(), Error);
  }
}

TEST(CoopSupport, SelfTestRunsOncePerDeviceAndDriverAndIsCached) {
  const test::ScratchDir dir("coop-cache");
  const auto file = dir / "coop_selftest.txt";
  int runs = 0;
  uint32_t result = 0b101;  // tile 1 fails
  auto self_test = [&](const codegen::DeviceTraits& trial) {
    ++runs;
    EXPECT_TRUE(trial.coop);  // the trial may use every tile
    EXPECT_EQ(trial.coop_tiles, ~0u);
    return result;
  };
  const auto c = nvidia();
  {
    CoopSelfTestCache cache(file);
    codegen::DeviceTraits t;
    configure_coop(c, CoopMode::automatic, cache, "kernels v1", self_test, t);
    EXPECT_EQ(runs, 1);
    EXPECT_TRUE(t.coop);
    EXPECT_FALSE(t.coop_khr);
    EXPECT_EQ(t.coop_tiles, 0b101u);
    configure_coop(c, CoopMode::automatic, cache, "kernels v1", self_test, t);
    EXPECT_EQ(runs, 1);  // from memory
  }
  {
    CoopSelfTestCache cache(file);  // another process: from the file
    codegen::DeviceTraits t;
    configure_coop(c, CoopMode::automatic, cache, "kernels v1", self_test, t);
    EXPECT_EQ(runs, 1);
    EXPECT_EQ(t.coop_tiles, 0b101u);
    // A new driver, another path or changed kernels test again.
    auto updated = c;
    updated.driver_version = "575.2";
    result = 0;  // everything fails there: no cooperative kernels at all
    configure_coop(updated, CoopMode::automatic, cache, "kernels v1", self_test, t);
    EXPECT_EQ(runs, 2);
    EXPECT_FALSE(t.coop);
    result = 0b111;
    configure_coop(c, CoopMode::khr, cache, "kernels v1", self_test, t);
    EXPECT_EQ(runs, 3);
    EXPECT_TRUE(t.coop_khr);
    configure_coop(c, CoopMode::automatic, cache, "kernels v2", self_test, t);
    EXPECT_EQ(runs, 4);
    // Disabled: no self-test, no cooperative kernels.
    configure_coop(c, CoopMode::off, cache, "kernels v3", self_test, t);
    EXPECT_EQ(runs, 4);
    EXPECT_FALSE(t.coop);
  }
}

TEST(CoopSupport, DeviceWithoutCooperativeMatricesFallsBack) {
  // The test device (lavapipe in CI) has none: sessions plan the scalar kernels and run.
  const auto po = plan_options(std::string());
  if (po.device.coop) GTEST_SKIP() << "this device runs cooperative matrices";
  Graph g;
  Tensor a = g.input("a", {96, 80});
  Tensor b = g.input("b", {80, 72});
  g.output("c", matmul(a, b));
  SessionOptions so;
  so.profile = true;
  auto s = build_session(g, so);
  std::vector<float> av(96 * 80), bv(80 * 72);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(i % 5) - 2.0f;
  s->set("a", av);
  s->set("b", bv);
  s->step();
  for (const auto& k : s->profile()) EXPECT_EQ(k.name.find("coop"), std::string::npos);
  const auto c = s->get_f32("c");
  for (int64_t i : {0, 50, 95}) {
    for (int64_t j : {0, 33, 71}) {
      double e = 0;
      for (int64_t p = 0; p < 80; ++p)
        e += av[static_cast<size_t>(i * 80 + p)] * bv[static_cast<size_t>(p * 72 + j)];
      EXPECT_EQ(c[static_cast<size_t>(i * 72 + j)], e);
    }
  }
}

}  // namespace
}  // namespace mn::runtime

namespace mn::codegen {
namespace {

// The launches before the product (largest magnitude, scaled f16 packing) are plain compute
// kernels: run them on the test device and check the packed operand bit for bit.
// Workgroup-scope matrices become traits only for f16·f16+f32 at workgroup scope, per
// workgroup size, and only with both VK_NV_cooperative_matrix2 features.
// MN_COOP_ATTENTION read into the traits: unset chooses, 1 always, 0 never, anything else an
// error naming the variable.
TEST(CoopTraits, AttentionChoiceFromTheEnvironment) {
  const vk::DeviceCapabilities c = runtime::nvidia();
  using Choice = DeviceTraits::Choice;
  const std::pair<const char*, Choice> choices[] = {
      {nullptr, Choice::automatic}, {"1", Choice::always}, {"0", Choice::never}};
  for (const auto& [value, want] : choices) {
    testing::ScopedEnv e("MN_COOP_ATTENTION", value);
    EXPECT_EQ(runtime::device_traits(c).coop_attention, want) << (value ? value : "unset");
  }
  for (const char* bad : {"2", "yes"}) {
    testing::ScopedEnv e("MN_COOP_ATTENTION", bad);
    mn::expect_error<Error>([&] { runtime::device_traits(c); }, {"MN_COOP_ATTENTION", bad});
  }
}

// The on/off switches read into the traits: 1 on, 0 off, unset their default; anything else an
// error naming the variable and the value (never the default in its place).
TEST(CoopTraits, SwitchesFromTheEnvironment) {
  const vk::DeviceCapabilities c = runtime::nvidia();
  struct Switch {
    const char* name;
    bool DeviceTraits::*field;
    bool unset;
  };
  for (const Switch& s :
       {Switch{"MN_FUSED_ATTENTION_OUTPUTS", &DeviceTraits::fused_attention_outputs, true},
        Switch{"MN_TENSOR_ATTENTION", &DeviceTraits::tensor_attention, true},
        Switch{"MN_CONV_STAGED", &DeviceTraits::conv_staged, false},
        Switch{"MN_COOP_PREPACK", &DeviceTraits::coop_prepack, true},
        Switch{"MN_COOP_WG", &DeviceTraits::coop_wg, true},
        Switch{"MN_CONV_COOP", &DeviceTraits::conv_coop, true},
        Switch{"MN_CONV_COOP_1X1", &DeviceTraits::conv_coop_1x1, false},
        Switch{"MN_TENSOR_SIBLING", &DeviceTraits::tensor_sibling, true},
        Switch{"MN_TILED_NORM", &DeviceTraits::tiled_norm, false},
        Switch{"MN_TILED_SIBLING", &DeviceTraits::tiled_sibling, true},
        Switch{"MN_ATTENTION_DECODE_GROUPS", &DeviceTraits::decode_attention_groups, false},
        Switch{"MN_ATTENTION_PARTIALS_IN_PRODUCTS", &DeviceTraits::attention_partials_in_products,
               true},
        Switch{"MN_CACHE_PREFETCH", &DeviceTraits::cache_prefetch, true},
        Switch{"MN_SHARED_LAUNCHES", &DeviceTraits::shared_launches, true},
        Switch{"MN_SPREAD_UPDATES", &DeviceTraits::spread_updates, false},
        Switch{"MN_COOP_TENSOR_LONG_SPLIT", &DeviceTraits::coop_tensor_long_split, true}}) {
    for (const auto& [value, want] :
         {std::pair<const char*, bool>{nullptr, s.unset}, {"0", false}, {"1", true}}) {
      testing::ScopedEnv e(s.name, value);
      EXPECT_EQ(runtime::device_traits(c).*s.field, want)
          << s.name << "=" << (value ? value : "unset");
    }
    for (const char* bad : {"2", "yes", "on"}) {
      testing::ScopedEnv e(s.name, bad);
      mn::expect_error<Error>([&] { runtime::device_traits(c); }, {s.name, bad});
    }
  }
  // Cache prefetches default to on for discrete GPUs only (lavapipe and integrated GPUs: off).
  for (const auto type : {VK_PHYSICAL_DEVICE_TYPE_CPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU}) {
    vk::DeviceCapabilities other = c;
    other.device_type = type;
    EXPECT_FALSE(runtime::device_traits(other).cache_prefetch) << vk::device_type_name(type);
    testing::ScopedEnv on("MN_CACHE_PREFETCH", "1");
    EXPECT_TRUE(runtime::device_traits(other).cache_prefetch) << vk::device_type_name(type);
  }
  // MN_CONV_NO_MATMUL=1 clears conv_matmul.
  for (const auto& [value, want] :
       {std::pair<const char*, bool>{nullptr, true}, {"0", false}, {"1", true}}) {
    testing::ScopedEnv e("MN_TENSOR_PROMPT_ATTENTION", value);
    EXPECT_EQ(runtime::device_traits(c).tensor_prompt_attention, want) << (value ? value : "unset");
  }
  for (const auto& [value, want] :
       {std::pair<const char*, bool>{nullptr, true}, {"0", true}, {"1", false}}) {
    testing::ScopedEnv e("MN_CONV_NO_MATMUL", value);
    EXPECT_EQ(runtime::device_traits(c).conv_matmul, want) << (value ? value : "unset");
  }
  testing::ScopedEnv e("MN_COOP_TENSOR", "true");
  mn::expect_error<Error>([&] { runtime::device_traits(c); }, {"MN_COOP_TENSOR", "true"});
  testing::ScopedEnv d("MN_DISABLE_COOP", "yes");
  mn::expect_error<Error>([] { runtime::coop_mode_from_env(); }, {"MN_DISABLE_COOP", "yes"});
}

// Forced tiles must name a tile of their kernel, and MN_COOP_STAGES count 1 or 2 buffers: an
// unknown name would leave every product to the kernel's own choice (or another kernel)
// without a word.
TEST(CoopTraits, ForcedTilesAndStagesFromTheEnvironment) {
  const vk::DeviceCapabilities c = runtime::nvidia();
  struct Tile {
    const char* name;
    std::string DeviceTraits::*field;
    const char* valid;
  };
  for (const Tile& t :
       {Tile{"MN_COOP_TILE", &DeviceTraits::coop_subgroup_tile, "m"},
        Tile{"MN_COOP_WG_TILE", &DeviceTraits::coop_wg_tile, "w128x128"},
        Tile{"MN_COOP_TENSOR_TILE", &DeviceTraits::coop_tensor_tile, "t128x256k32u4"},
        Tile{"MN_TENSOR_ATTENTION_TILE", &DeviceTraits::tensor_attention_tile, "r32c64w32"},
        Tile{"MN_TENSOR_ATTENTION_GRAD_TILE", &DeviceTraits::tensor_attention_grad_tile,
             "r64c64w64"}}) {
    {
      testing::ScopedEnv e(t.name, nullptr);
      EXPECT_EQ(runtime::device_traits(c).*t.field, "") << t.name;
    }
    {
      testing::ScopedEnv e(t.name, t.valid);
      EXPECT_EQ(runtime::device_traits(c).*t.field, t.valid) << t.name;
    }
    testing::ScopedEnv e(t.name, "huge");
    mn::expect_error<Error>([&] { runtime::device_traits(c); }, {t.name, "huge", t.valid});
  }
  {
    testing::ScopedEnv e("MN_COOP_STAGES", "1");
    EXPECT_TRUE(runtime::device_traits(c).coop_single_stage);
  }
  {
    testing::ScopedEnv e("MN_COOP_STAGES", nullptr);
    EXPECT_FALSE(runtime::device_traits(c).coop_single_stage);
  }
  for (const char* bad : {"3", "0", "one"}) {
    testing::ScopedEnv e("MN_COOP_STAGES", bad);
    mn::expect_error<Error>([&] { runtime::device_traits(c); }, {"MN_COOP_STAGES"});
  }
}

// The subgroup facts the decode attention's streams size themselves by come from the
// capabilities (a driver that picks 8 to 32 lanes a subgroup per pipeline: streams no wider than
// 8 lanes, workgroups of whole 32-lane subgroups), and its block switches take their documented
// values only.
TEST(CoopTraits, SubgroupSizesAndDecodeAttentionSwitches) {
  vk::DeviceCapabilities c = runtime::nvidia();
  c.compute.subgroup_size = 32;
  c.compute.min_subgroup_size = 8;
  c.compute.max_subgroup_size = 32;
  c.compute.subgroup_shuffle = true;
  const DeviceTraits t = runtime::device_traits(c);
  EXPECT_TRUE(t.subgroup_shuffle);
  EXPECT_EQ(t.min_subgroup_size, 8u);
  EXPECT_EQ(t.max_subgroup_size, 32u);
  EXPECT_EQ(t.decode_attention_keys, 0u);
  EXPECT_EQ(t.decode_attention_lane_keys, 0u);
  {
    testing::ScopedEnv keys("MN_ATTENTION_DECODE_KEYS", "128");
    testing::ScopedEnv lane("MN_ATTENTION_DECODE_LANE_KEYS", "4");
    const DeviceTraits forced = runtime::device_traits(c);
    EXPECT_EQ(forced.decode_attention_keys, 128u);
    EXPECT_EQ(forced.decode_attention_lane_keys, 4u);
  }
  for (const char* bad : {"8", "48", "2048", "many"}) {
    testing::ScopedEnv e("MN_ATTENTION_DECODE_KEYS", bad);
    mn::expect_error<Error>([&] { runtime::device_traits(c); }, {"MN_ATTENTION_DECODE_KEYS", bad});
  }
  for (const char* bad : {"3", "32", "x"}) {
    testing::ScopedEnv e("MN_ATTENTION_DECODE_LANE_KEYS", bad);
    mn::expect_error<Error>([&] { runtime::device_traits(c); },
                            {"MN_ATTENTION_DECODE_LANE_KEYS", bad});
  }
}

// The fills attention's tensor-addressed kernels split their tiles' blocks for: 4 unset, a count
// as given (0: no split), anything else an error naming the variable and the value.
TEST(CoopTraits, AttentionSplitFillsFromTheEnvironment) {
  const vk::DeviceCapabilities c = runtime::nvidia();
  for (const auto& [name, field] :
       {std::pair{"MN_TENSOR_ATTENTION_FILLS", &DeviceTraits::tensor_attention_fills},
        std::pair{"MN_TENSOR_ATTENTION_GRAD_FILLS", &DeviceTraits::tensor_attention_grad_fills}}) {
    for (const auto& [value, want] :
         {std::pair<const char*, uint32_t>{nullptr, 4}, {"0", 0}, {"2", 2}, {"16", 16}}) {
      testing::ScopedEnv e(name, value);
      EXPECT_EQ(runtime::device_traits(c).*field, want) << name << "=" << (value ? value : "unset");
    }
    for (const char* bad : {"-1", "many", "4.5", "100000"}) {
      testing::ScopedEnv e(name, bad);
      mn::expect_error<Error>([&] { runtime::device_traits(c); }, {name, bad});
    }
  }
}

// The plan's arena slack (a percentage, default 10) and the bf16 attention operands and early
// loads (switches, on by default) from the environment; other values are errors naming the
// variable and the value.
TEST(CoopTraits, ArenaSlackAndAttentionSwitchesFromTheEnvironment) {
  const vk::DeviceCapabilities c = runtime::nvidia();
  for (const auto& [value, want] :
       {std::pair<const char*, double>{nullptr, 0.10}, {"0", 0.0}, {"25", 0.25}}) {
    testing::ScopedEnv e("MN_PLAN_ARENA_SLACK", value);
    EXPECT_DOUBLE_EQ(runtime::device_traits(c).plan_arena_slack, want);
  }
  for (const char* bad : {"-5", "ten", "2.5", "100000"}) {
    testing::ScopedEnv e("MN_PLAN_ARENA_SLACK", bad);
    mn::expect_error<Error>([&] { runtime::device_traits(c); }, {"MN_PLAN_ARENA_SLACK", bad});
  }
  for (const auto& [name, field] :
       {std::pair{"MN_BF16_ATTENTION_OPERANDS", &DeviceTraits::bf16_attention_operands},
        std::pair{"MN_TENSOR_ATTENTION_EARLY_LOADS",
                  &DeviceTraits::tensor_attention_early_loads}}) {
    for (const auto& [value, want] :
         {std::pair<const char*, bool>{nullptr, true}, {"0", false}, {"1", true}}) {
      testing::ScopedEnv e(name, value);
      EXPECT_EQ(runtime::device_traits(c).*field, want) << name << "=" << (value ? value : "unset");
    }
    for (const char* bad : {"yes", "2", "on"}) {
      testing::ScopedEnv e(name, bad);
      mn::expect_error<Error>([&] { runtime::device_traits(c); }, {name, bad});
    }
  }
}

TEST(CoopTraits, WorkgroupScopeGranularitiesFromFlexibleDimensions) {
  vk::DeviceCapabilities c = runtime::nvidia();
  c.compute.max_workgroup_invocations = 1024;
  auto& cm = c.cooperative_matrix;
  using F = vk::CooperativeMatrixFlexibleConfig;
  cm.flexible_configs = {F{16, 16, 16, "f16", "f16", "f32", "f32", false, "subgroup", 0},
                         F{32, 16, 16, "f16", "f16", "f16", "f16", false, "workgroup", 128},
                         F{32, 16, 16, "f16", "f16", "f32", "f32", false, "workgroup", 128},
                         F{32, 32, 16, "f16", "f16", "f32", "f32", false, "workgroup", 256},
                         F{32, 32, 32, "i8", "i8", "i32", "i32", false, "workgroup", 64}};
  cm.flexible_dimensions_max_dimension = 1024;
  // Without the features: nothing.
  EXPECT_EQ(runtime::device_traits(c).coop_wg_granularity[3][0], 0u);
  cm.workgroup_scope = cm.flexible_dimensions = true;
  const DeviceTraits t = runtime::device_traits(c);
  const std::array<uint32_t, 3> none{0, 0, 0}, g128{32, 16, 16}, g256{32, 32, 16};
  EXPECT_EQ(t.coop_wg_granularity[0], none);
  EXPECT_EQ(t.coop_wg_granularity[1], none);
  EXPECT_EQ(t.coop_wg_granularity[2], g128);
  EXPECT_EQ(t.coop_wg_granularity[3], g256);
  EXPECT_EQ(t.coop_wg_max_dimension, 1024u);
  EXPECT_TRUE(coop_wg_tile_supported(coop_wg_tiles()[0], t));
  EXPECT_TRUE(coop_wg_tile_supported(coop_wg_tiles()[1], t));
  // A device with smaller workgroups than a tile needs.
  c.compute.max_workgroup_invocations = 128;
  EXPECT_EQ(runtime::device_traits(c).coop_wg_granularity[3], none);
}

// Runs the absmax and pack launches of `l` (the first two) on input `av`; returns the packed
// scratch buffer's bytes.
std::vector<std::byte> run_pack(const Lowering& l, const std::vector<float>& av) {
  auto dev = runtime::shared_device("", std::nullopt);
  const uint64_t packed = l.scratch_bytes[0], parts = l.scratch_bytes[1];
  const uint64_t align = 256, in_bytes = av.size() * 4;
  const uint64_t at_packed = (in_bytes + align - 1) / align * align;
  const uint64_t at_parts = at_packed + (packed + align - 1) / align * align;
  vk::Arena arena(*dev, at_parts + (parts + align - 1) / align * align);
  arena.write(0, std::as_bytes(std::span(av)));
  CompileOptions co;
  co.target = target_env_for(dev->capabilities().api_version);
  std::vector<std::unique_ptr<vk::Pipeline>> pipelines;
  vk::Recording rec(*dev, {false, "pack test"});
  for (size_t p = 0; p < 2; ++p) {
    const KernelLaunch& k = l.launches[p];
    vk::KernelInterface ki;
    ki.buffer_count = static_cast<uint32_t>(k.bindings.size());
    ki.workgroup_size = k.workgroup;
    pipelines.push_back(std::make_unique<vk::Pipeline>(*dev, compile_glsl(k.glsl, co), ki, k.name));
    vk::Dispatch d;
    d.pipeline = pipelines.back().get();
    for (const KernelBinding& kb : k.bindings) {
      std::pair<uint64_t, uint64_t> r{0, in_bytes};
      if (kb.arg == ArgRef::scratch(0)) r = {at_packed, packed};
      if (kb.arg == ArgRef::scratch(1)) r = {at_parts, parts};
      d.buffers.push_back(
          {arena.range(r.first, r.second), kb.written ? vk::Access::read_write : vk::Access::read});
    }
    d.groups = k.groups;
    d.label = k.name;
    rec.dispatch(std::move(d));
  }
  rec.run();
  dev->check_validation("pack test");
  std::vector<std::byte> out(packed);
  arena.read(at_packed, out);
  return out;
}

TEST(CoopPack, ScaledF16CopyOnDevice) {
  Graph g;
  Tensor a = g.input("a", {40, 24});
  Tensor b = g.input("b", {24, 72});
  Tensor c = matmul(a, b);
  g.output("c", c);
  const std::vector<TensorType> types{g.node(a.id()).type, g.node(b.id()).type};
  DeviceTraits t;
  t.coop = true;
  const LowerContext ctx{g.node(c.id()), types, t};
  const Lowering l =
      lower_matmul_coop(ctx, geometry(ctx), 1, coop_tiles()[0], CoopOptions{}, nullptr);
  ASSERT_EQ(l.launches.size(), 5u);

  // A holds tiny values (a deep layer's activations): its largest magnitude 3e-6 lies in
  // [2^-19, 2^-18), so e = 15 + 18 = 33 and the packed values are x·2^33 rounded to f16.
  const size_t n = 40 * 24;
  std::vector<float> av(n);
  for (size_t i = 0; i < n; ++i) av[i] = 3e-6f * (static_cast<float>(i % 13) - 6.0f) / 6.0f;
  const std::vector<std::byte> out = run_pack(l, av);
  const auto halves = runtime::decode(std::span(out).first(n * 2), DType::f16, n);
  std::vector<double> expect(n);
  for (size_t i = 0; i < n; ++i) expect[i] = std::ldexp(static_cast<double>(av[i]), 33);
  std::vector<std::byte> rounded(n * 2);
  runtime::encode(std::span<const double>(expect), DType::f16, rounded);
  EXPECT_EQ(std::memcmp(rounded.data(), out.data(), n * 2), 0);
  EXPECT_NEAR(halves[6], 0.0, 0.0);
  int32_t e = 0;
  std::memcpy(&e, out.data() + (n + 7) / 8 * 16, 4);
  EXPECT_EQ(e, 33);
}

// The workgroup-scope kernel reads whole tiles: each matrix of a batched, transposed A
// (2 × 40 × 24, read as 24 × 40) lands zero-padded in a 64 × 128 one (K to 64, M to 128).
TEST(CoopPack, PaddedCopyOnDevice) {
  Graph g;
  Tensor a = g.input("a", {2, 40, 24});
  Tensor b = g.input("b", {40, 72});
  Tensor c = matmul(a, b, true, false);
  g.output("c", c);
  const std::vector<TensorType> types{g.node(a.id()).type, g.node(b.id()).type};
  DeviceTraits t;
  t.coop = true;
  t.coop_wg_granularity[2] = {32, 16, 16};
  const LowerContext ctx{g.node(c.id()), types, t};
  const CoopWgTile& tile = coop_wg_tiles()[0];
  ASSERT_EQ(tile.bm, 128);
  ASSERT_EQ(tile.bk, 64);
  const Lowering l = lower_matmul_coop_wg(ctx, geometry(ctx), 2, tile, nullptr);
  ASSERT_EQ(l.launches.size(), 5u);
  const size_t n = 2 * 40 * 24, rows = 64, cols = 128, padded = 2 * rows * cols;
  ASSERT_EQ(l.scratch_bytes[0], padded * 2 + 16);
  std::vector<float> av(n);
  for (size_t i = 0; i < n; ++i) av[i] = static_cast<float>(static_cast<int>(i % 29) - 14) / 8.0f;
  const std::vector<std::byte> out = run_pack(l, av);
  const auto got = runtime::decode(std::span(out).first(padded * 2), DType::f16, padded);
  // Largest magnitude 1.75 in [2^0, 2^1): e = 15 - 1 = 14.
  for (size_t z = 0; z < 2; ++z) {
    for (size_t r = 0; r < rows; ++r) {
      for (size_t col = 0; col < cols; ++col) {
        const double want = r < 40 && col < 24
                                ? std::ldexp(static_cast<double>(av[(z * 40 + r) * 24 + col]), 14)
                                : 0.0;
        ASSERT_EQ(got[(z * rows + r) * cols + col], want) << z << " " << r << " " << col;
      }
    }
  }
  int32_t e = 0;
  std::memcpy(&e, out.data() + padded * 2, 4);
  EXPECT_EQ(e, 14);
}

}  // namespace
}  // namespace mn::codegen
