#pragma once
// What the planner needs to know about a device: kernel-shaping traits (subgroup, shared
// memory, 16-bit storage, atomics, tensor cores), binding alignment and the largest binding.
// Sessions and `mn inspect` plan through the same function, so what inspect shows is what runs.
#include <string>

#include "plan/step_plan.h"
#include "vulkan/device.h"

namespace mn::runtime {

codegen::DeviceTraits device_traits(const vk::DeviceCapabilities& caps);
plan::PlanOptions plan_options(const vk::Device& device);
// The options of the device a session with this selector would use (see SessionOptions).
plan::PlanOptions plan_options(const std::string& device_selector);
std::string device_name(const std::string& device_selector);

}  // namespace mn::runtime
