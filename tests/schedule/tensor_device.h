#pragma once
// The device the schedule tests plan for where attention takes the tensor-core kernels: shared
// memory for the register tiles (48 KiB), tensor-addressed workgroup matrices with bf16 among
// them, the tensor-core attention kernels and their fused outputs, asked for wherever they fit
// (as an H200's traits, src/runtime/plan_options.cpp).
#include "codegen/kernel.h"

namespace mn::testing {

inline codegen::DeviceTraits tensor_device() {
  codegen::DeviceTraits t;
  t.max_shared_bytes = 49152;
  t.max_workgroup_invocations = 1024;
  t.coop = t.coop_bf16 = t.subgroup_vote = t.storage_16bit = true;
  t.subgroup_size = 32;
  t.coop_wg_granularity = {{{16, 16, 16}, {16, 16, 16}, {32, 16, 16}, {32, 32, 16}}};
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  t.coop_wg_max_dimension = 1024;
  t.coop_tensor = t.coop_tensor_conversions = t.coop_tensor_reductions = true;
  t.tensor_attention = t.fused_attention_outputs = true;
  t.coop_attention = codegen::DeviceTraits::Choice::always;
  return t;
}

}  // namespace mn::testing
