#pragma once
// Vulkan devices shared by the sessions of a process: creating a device costs tens of
// milliseconds and every session on it shares its pipeline and shader caches.
#include <memory>
#include <optional>
#include <string>

#include "vulkan/device.h"

namespace mn::runtime {

std::shared_ptr<vk::Device> shared_device(const std::string& selector,
                                          std::optional<bool> validation);

}  // namespace mn::runtime
