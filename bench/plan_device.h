#pragma once
// The device a benchmark plans for when it plans without one (--plan-device NAME):
//  - "default": the planner's default device with 16-bit storage, as on every GPU with 16-bit
//    tensors (the planner's own default has none);
//  - "h200": an NVIDIA H200 as src/runtime/plan_options.cpp derives its traits from the
//    capabilities its driver reports (`mn devices --json` there): subgroup- and workgroup-scope
//    cooperative matrices (f16 and bf16), tensor-addressed loads, 132 multiprocessors.
// Plans for "h200" match the device's own to within the choices its self-tests and the
// environment switches make at run time.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "codegen/kernel.h"

namespace mn::bench {

inline std::optional<codegen::DeviceTraits> plan_device(const std::string& name) {
  codegen::DeviceTraits t;
  t.storage_16bit = true;
  if (name == "default") return t;
  if (name != "h200") return std::nullopt;
  t.subgroup_size = 32;
  t.subgroup_add = t.subgroup_vote = true;
  t.max_workgroup_invocations = 1024;
  t.max_shared_bytes = t.max_shared_optin_bytes = 49152;
  t.max_group_count = 65535;
  t.float_atomics = true;
  t.max_storage_buffers = std::numeric_limits<uint32_t>::max();
  t.multiprocessors = 132;
  t.coop = true;
  t.coop_wg_granularity = {{{16, 16, 16}, {16, 16, 16}, {32, 16, 16}, {32, 32, 16}}};
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  t.coop_wg_max_dimension = 1024;
  t.coop_tensor = true;
  return t;
}

}  // namespace mn::bench
