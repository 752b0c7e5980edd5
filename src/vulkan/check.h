#pragma once
// Every VkResult is checked; a failure becomes an mn::DeviceError naming the call.
#include <string_view>

#include <vulkan/vulkan.h>

namespace mn::vk {

// The enumerant's name ("VK_ERROR_OUT_OF_DEVICE_MEMORY"), or its number if unknown.
std::string result_name(VkResult result);

[[noreturn]] void throw_vk_error(VkResult result, std::string_view call);

// Throws mn::DeviceError "<call> failed: <result>" unless result is VK_SUCCESS.
inline void check(VkResult result, std::string_view call) {
  if (result != VK_SUCCESS) throw_vk_error(result, call);
}

}  // namespace mn::vk
