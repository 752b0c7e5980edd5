#pragma once
// What the planner needs to know about a device: kernel-shaping traits (subgroup, shared
// memory, 16-bit storage, atomics, tensor cores), binding alignment and the largest binding.
// Sessions and `mn inspect` plan through the same function, so what inspect shows is what runs.
#include <string>

#include "plan/step_plan.h"
#include "vulkan/device.h"

namespace mn::runtime {

codegen::DeviceTraits device_traits(const vk::DeviceCapabilities& caps);
// The environment's switches over a device's traits (MN_MATMUL_SPLIT_K, MN_COOP_ATTENTION,
// MN_CONV_STAGED, MN_COOP_TENSOR=0, MN_COOP_TENSOR_TILE, MN_COOP_TENSOR_SPLIT_K), as
// device_traits applies them; a malformed value is an error naming it.
void apply_environment(codegen::DeviceTraits& t);
plan::PlanOptions plan_options(const vk::Device& device);
// The options of the device a session with this selector would use (see SessionOptions).
plan::PlanOptions plan_options(const std::string& device_selector);
std::string device_name(const std::string& device_selector);

}  // namespace mn::runtime
