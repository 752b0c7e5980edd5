#include "runtime/plan_options.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <span>
#include <string>

#include "codegen/attention_tensor_tiles.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/lower_matmul_tensor.h"
#include "codegen/shader/current_glslang.h"
#include "runtime/coop_selftest.h"
#include "runtime/device_pool.h"
#include "support/env_switch.h"

namespace mn::runtime {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// A count from the environment (`fallback` when unset); anything but digits is an error.
int env_count(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  const std::string s = v;
  if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos) {
    throw Error(std::string(name) + "='" + s + "' is not a count (0 to 9999)");
  }
  return std::stoi(s);
}

// A tile forced by `name` (empty when unset): one of `tiles`' names, or an error listing them
// (an unknown name would leave every product to the kernel's other choices without a word).
template <typename Tile>
std::string tile_name(const char* name, std::span<const Tile> tiles) {
  const std::string v = env_or(name, "");
  if (v.empty()) return v;
  std::string names;
  for (const Tile& t : tiles) {
    if (v == t.name) return v;
    names += std::string(names.empty() ? "" : ", ") + t.name;
  }
  throw Error(std::string(name) + "='" + v + "' names no tile; the tiles are " + names);
}

// MN_COOP_ATTENTION: unset chooses, 1 always, 0 never; anything else is an error.
codegen::DeviceTraits::Choice coop_attention_choice(const std::string& v) {
  using Choice = codegen::DeviceTraits::Choice;
  if (v.empty()) return Choice::automatic;
  if (v == "1") return Choice::always;
  if (v == "0") return Choice::never;
  throw Error("MN_COOP_ATTENTION='" + v + "' is neither 1 (always) nor 0 (never); unset, the " +
              "lowering chooses");
}

}  // namespace

codegen::DeviceTraits device_traits(const vk::DeviceCapabilities& c) {
  codegen::DeviceTraits t;
  t.subgroup_size = std::max(1u, c.compute.subgroup_size);
  t.subgroup_add = c.compute.subgroup_arithmetic;
  t.subgroup_vote = c.compute.subgroup_vote;
  t.subgroup_shuffle = c.compute.subgroup_shuffle;
  t.min_subgroup_size = std::max(1u, std::min(c.compute.min_subgroup_size, t.subgroup_size));
  t.max_subgroup_size = std::max(c.compute.max_subgroup_size, t.subgroup_size);
  t.max_workgroup_invocations = c.compute.max_workgroup_invocations;
  t.max_shared_bytes = c.compute.shared_memory_bytes;
  t.max_group_count = std::min({c.compute.max_workgroup_count[0], c.compute.max_workgroup_count[1],
                                c.compute.max_workgroup_count[2]});
  t.storage_16bit = c.types.storage_16bit;
  t.float_atomics = c.atomics.float32_add_buffer;
  if (c.compute.max_storage_buffers_per_stage > 0) {
    t.max_storage_buffers = c.compute.max_storage_buffers_per_stage;
  }
  t.max_shared_optin_bytes = c.compute.shared_memory_optin_bytes;
  t.multiprocessors = c.compute.multiprocessors;
  t.cache_prefetch = c.device_type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  const auto& cm = c.cooperative_matrix;
  if (cm.khr_feature && c.types.bfloat16_cooperative_matrix && c.types.int16) {
    for (const auto& m : cm.khr_configs) {
      if (m.m == 16 && m.n == 16 && m.k == 16 && m.a_type == "bf16" && m.b_type == "bf16" &&
          m.c_type == "f32" && m.result_type == "f32" && m.scope == "subgroup") {
        t.coop_bf16 = codegen::current_glslang().available;
      }
    }
  }
  if (cm.khr_feature && cm.workgroup_scope && cm.flexible_dimensions) {
    for (const auto& f : cm.flexible_configs) {
      if (f.scope != "workgroup" || f.a_type != f.b_type || f.c_type != "f32" ||
          f.result_type != "f32" || f.workgroup_invocations > t.max_workgroup_invocations) {
        continue;
      }
      const bool bf16 = f.a_type == "bf16" && c.types.bfloat16_cooperative_matrix;
      if (f.a_type != "f16" && !bf16) continue;
      auto& granularity = bf16 ? t.coop_wg_bf16_granularity : t.coop_wg_granularity;
      for (size_t i = 0; i < granularity.size(); ++i) {
        if (f.workgroup_invocations == 32u << i) {
          granularity[i] = {f.m_granularity, f.n_granularity, f.k_granularity};
        }
      }
    }
    t.coop_wg_max_dimension = cm.flexible_dimensions_max_dimension;
    t.coop_tensor =
        cm.tensor_addressing && cm.per_element_operations && codegen::current_glslang().available;
    t.coop_tensor_conversions = t.coop_tensor && cm.conversions;
    t.coop_tensor_reductions = t.coop_tensor && cm.reductions;
  }
  apply_environment(t);
  return t;
}

void apply_environment(codegen::DeviceTraits& t) {
  t.matmul_split_k = env_count("MN_MATMUL_SPLIT_K", 0);
  t.coop_attention = coop_attention_choice(env_or("MN_COOP_ATTENTION", ""));
  t.conv_staged = support::env_switch("MN_CONV_STAGED", false);
  // On since measured (docs/perf.md, 2026-12-05): =0 keeps the separate kernels, the
  // subgroup-matrix attention kernels.
  t.fused_attention_outputs = support::env_switch("MN_FUSED_ATTENTION_OUTPUTS", true);
  t.tensor_attention = support::env_switch("MN_TENSOR_ATTENTION", true);
  t.tensor_prompt_attention = support::env_switch("MN_TENSOR_PROMPT_ATTENTION", true);
  t.bf16_attention_operands = support::env_switch("MN_BF16_ATTENTION_OPERANDS", true);
  t.plan_arena_slack = env_count("MN_PLAN_ARENA_SLACK", 10) / 100.0;
  if (!support::env_switch("MN_COOP_TENSOR", true)) {
    t.coop_tensor = t.coop_tensor_conversions = t.coop_tensor_reductions = false;
  }
  t.coop_tensor_tile = tile_name("MN_COOP_TENSOR_TILE", codegen::tensor_tiles());
  t.tensor_attention_tile =
      tile_name("MN_TENSOR_ATTENTION_TILE", codegen::attention_tensor_tiles());
  t.tensor_attention_grad_tile =
      tile_name("MN_TENSOR_ATTENTION_GRAD_TILE", codegen::attention_tensor_tiles());
  t.tensor_attention_fills = static_cast<uint32_t>(env_count("MN_TENSOR_ATTENTION_FILLS", 4));
  t.tensor_attention_grad_fills =
      static_cast<uint32_t>(env_count("MN_TENSOR_ATTENTION_GRAD_FILLS", 4));
  t.tensor_attention_early_loads = support::env_switch("MN_TENSOR_ATTENTION_EARLY_LOADS", true);
  t.coop_tensor_split_k = env_count("MN_COOP_TENSOR_SPLIT_K", 0);
  t.coop_tensor_long_split = support::env_switch("MN_COOP_TENSOR_LONG_SPLIT", true);
  t.tensor_sibling = support::env_switch("MN_TENSOR_SIBLING", true);
  t.tiled_norm = support::env_switch("MN_TILED_NORM", false);
  t.tiled_sibling = support::env_switch("MN_TILED_SIBLING", true);
  // Off since measured slower on the H100 (docs/perf.md, 2026-12-06): =1 chains the products.
  t.gemv_chain = support::env_switch("MN_GEMV_CHAIN", false);
  // Off since measured slower but for long contexts at large batches (docs/perf.md, 2026-12-06).
  t.decode_attention_groups = support::env_switch("MN_ATTENTION_DECODE_GROUPS", false);
  t.attention_partials_in_products = support::env_switch("MN_ATTENTION_PARTIALS_IN_PRODUCTS", true);
  t.decode_attention_keys = static_cast<uint32_t>(env_count("MN_ATTENTION_DECODE_KEYS", 0));
  if (t.decode_attention_keys != 0 &&
      (!std::has_single_bit(t.decode_attention_keys) || t.decode_attention_keys < 16 ||
       t.decode_attention_keys > 1024)) {
    throw Error("MN_ATTENTION_DECODE_KEYS='" + std::to_string(t.decode_attention_keys) +
                "': the decode attention's blocks take a power of two from 16 to 1024 keys");
  }
  t.decode_attention_lane_keys =
      static_cast<uint32_t>(env_count("MN_ATTENTION_DECODE_LANE_KEYS", 0));
  if (t.decode_attention_lane_keys > 16 ||
      (t.decode_attention_lane_keys != 0 && !std::has_single_bit(t.decode_attention_lane_keys))) {
    throw Error("MN_ATTENTION_DECODE_LANE_KEYS='" + std::to_string(t.decode_attention_lane_keys) +
                "': a lane of the decode attention takes 1, 2, 4, 8 or 16 keys a block");
  }
  t.coop_subgroup_tile = tile_name("MN_COOP_TILE", codegen::coop_tiles());
  t.coop_wg_tile = tile_name("MN_COOP_WG_TILE", codegen::coop_wg_tiles());
  const int stages = env_count("MN_COOP_STAGES", 2);
  if (stages != 1 && stages != 2) {
    throw Error("MN_COOP_STAGES='" + std::to_string(stages) +
                "': the subgroup tiles stage their operands in 1 or 2 buffers");
  }
  t.coop_single_stage = stages == 1;
  t.coop_prepack = support::env_switch("MN_COOP_PREPACK", true);
  t.coop_wg = support::env_switch("MN_COOP_WG", true);
  t.conv_coop = support::env_switch("MN_CONV_COOP", true);
  t.conv_matmul = !support::env_switch("MN_CONV_NO_MATMUL", false);
  t.conv_coop_1x1 = support::env_switch("MN_CONV_COOP_1X1", false);
  t.cache_prefetch = support::env_switch("MN_CACHE_PREFETCH", t.cache_prefetch);
  t.shared_launches = support::env_switch("MN_SHARED_LAUNCHES", true);
  t.spread_updates = support::env_switch("MN_SPREAD_UPDATES", t.spread_updates);
}

plan::PlanOptions plan_options(const vk::Device& device) {
  const vk::DeviceCapabilities& caps = device.capabilities();
  plan::PlanOptions po;
  po.device = device_traits(caps);
  configure_device_coop(device, po.device);  // tensor cores: capability table and self-test
  po.alignment =
      std::bit_ceil(std::max<uint64_t>(16, caps.buffers.min_storage_buffer_offset_alignment));
  po.chunk_bytes = std::bit_floor(
      std::min({caps.buffers.max_storage_buffer_range, caps.buffers.max_memory_allocation_bytes,
                caps.buffers.max_buffer_bytes}));
  return po;
}

plan::PlanOptions plan_options(const std::string& device_selector) {
  return plan_options(*shared_device(device_selector, std::nullopt));
}

std::string device_name(const std::string& device_selector) {
  return shared_device(device_selector, std::nullopt)->capabilities().name;
}

}  // namespace mn::runtime
