#pragma once
// The device a benchmark plans for when it plans without one (--plan-device NAME):
//  - "default": the planner's default device with 16-bit storage, as on every GPU with 16-bit
//    tensors (the planner's own default has none);
//  - "h200": an NVIDIA H200 as src/runtime/plan_options.cpp derives its traits from the
//    capabilities its driver reports (`mn devices --json` there): subgroup- and workgroup-scope
//    cooperative matrices (f16 and bf16), bf16 subgroup matrices, tensor-addressed loads, 132
//    multiprocessors.
//    Its arena is made of 2 GiB chunks (the largest power of two its storage-buffer range
//    allows), bound at 16-byte alignment. Plans for "h200" match the device's own (the same
//    launches and arena bytes for SmolLM2's and ResNet's training steps) but for the choices
//    its self-tests make at run time; the environment's switches (MN_CONV_STAGED=1, ...)
//    apply as in a session there (runtime::apply_environment).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "plan/step_plan.h"
#include "runtime/plan_options.h"

namespace mn::bench {

// The planner's options for the named device (the device's traits, binding alignment and
// arena chunk), or nullopt for an unknown name.
inline std::optional<plan::PlanOptions> plan_device(const std::string& name) {
  plan::PlanOptions po;
  codegen::DeviceTraits& t = po.device;
  t.storage_16bit = true;
  if (name == "default") {
    runtime::apply_environment(t);
    return po;
  }
  if (name != "h200") return std::nullopt;
  po.alignment = 16;
  po.chunk_bytes = uint64_t{1} << 31;
  t.subgroup_size = 32;
  t.subgroup_add = t.subgroup_vote = t.subgroup_shuffle = true;
  t.min_subgroup_size = t.max_subgroup_size = 32;
  t.max_workgroup_invocations = 1024;
  t.max_shared_bytes = t.max_shared_optin_bytes = 49152;
  t.max_group_count = 65535;
  t.float_atomics = true;
  t.max_storage_buffers = std::numeric_limits<uint32_t>::max();
  t.multiprocessors = 132;
  t.cache_prefetch = true;
  t.coop = true;
  t.coop_bf16 = true;
  t.coop_wg_granularity = {{{16, 16, 16}, {16, 16, 16}, {32, 16, 16}, {32, 32, 16}}};
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  t.coop_wg_max_dimension = 1024;
  t.coop_tensor = t.coop_tensor_conversions = t.coop_tensor_reductions = true;
  runtime::apply_environment(t);
  return po;
}

}  // namespace mn::bench
