#pragma once
// The Vulkan instance, and the validation layer's messages when MN_VALIDATION=1.
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <vulkan/vulkan.h>

namespace mn::vk {

// Warnings and errors reported through VK_EXT_debug_utils. The callback runs inside Vulkan
// calls, where throwing is not allowed, so messages are stored and checked after the call.
class ValidationLog {
 public:
  void add(std::string message);
  size_t count() const;
  std::vector<std::string> messages() const;
  // Throws mn::DeviceError listing the messages that arrived since the previous check.
  void check(std::string_view where);

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
  size_t checked_ = 0;
};

// What the calling thread is doing, named in the validation messages its Vulkan calls raise
// (the layer reports on the calling thread), so that kernels created on several threads at once
// are told apart whichever thread's check finds the message. Scopes nest; the inner one names.
class ValidationScope {
 public:
  explicit ValidationScope(std::string what);
  ~ValidationScope();
  ValidationScope(const ValidationScope&) = delete;
  ValidationScope& operator=(const ValidationScope&) = delete;
  // The calling thread's innermost scope, or null.
  static const std::string* current();

 private:
  std::string what_;
  const std::string* outer_;
};

// True when MN_VALIDATION is set to anything but "" or "0".
bool validation_requested_by_env();

class Instance {
 public:
  // With validation, VK_LAYER_KHRONOS_validation (with synchronization validation) is
  // enabled and every warning or error it reports is logged; missing layer: mn::DeviceError.
  explicit Instance(bool validation);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  // The API version requested: the loader's, capped at 1.3.
  uint32_t api_version() const { return api_version_; }
  bool validation_enabled() const { return validation_; }
  ValidationLog& validation_log() { return log_; }
  const ValidationLog& validation_log() const { return log_; }

  std::vector<VkPhysicalDevice> physical_devices() const;

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  uint32_t api_version_ = VK_API_VERSION_1_2;
  bool validation_ = false;
  ValidationLog log_;
};

}  // namespace mn::vk
