#include "vulkan/instance.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <meganeura/error.h>

#include "support/env_switch.h"
#include "vulkan/check.h"

namespace mn::vk {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::string severity_name(VkDebugUtilsMessageSeverityFlagBitsEXT severity) {
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) return "error";
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) return "warning";
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT) return "info";
  return "verbose";
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT types,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data,
                                          void* user) {
  std::string text = "[" + severity_name(severity);
  if (types & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT) text += " validation";
  if (types & VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT) text += " performance";
  if (types & VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT) text += " general";
  text += "] ";
  if (data && data->pMessageIdName) text += std::string(data->pMessageIdName) + ": ";
  text += data && data->pMessage ? data->pMessage : "(no message)";
  if (const std::string* scope = ValidationScope::current()) text += " (" + *scope + ")";
  static_cast<ValidationLog*>(user)->add(std::move(text));
  return VK_FALSE;  // never abort the call: the caller decides after it returns
}

bool has_layer(const char* name) {
  uint32_t count = 0;
  check(vkEnumerateInstanceLayerProperties(&count, nullptr), "vkEnumerateInstanceLayerProperties");
  std::vector<VkLayerProperties> layers(count);
  check(vkEnumerateInstanceLayerProperties(&count, layers.data()),
        "vkEnumerateInstanceLayerProperties");
  return std::any_of(layers.begin(), layers.end(), [&](const VkLayerProperties& l) {
    return std::strcmp(l.layerName, name) == 0;
  });
}

std::vector<std::string> instance_extensions(const char* layer) {
  uint32_t count = 0;
  check(vkEnumerateInstanceExtensionProperties(layer, &count, nullptr),
        "vkEnumerateInstanceExtensionProperties");
  std::vector<VkExtensionProperties> props(count);
  check(vkEnumerateInstanceExtensionProperties(layer, &count, props.data()),
        "vkEnumerateInstanceExtensionProperties");
  std::vector<std::string> names;
  for (const auto& p : props) names.emplace_back(p.extensionName);
  return names;
}

}  // namespace

namespace {
thread_local const std::string* current_scope = nullptr;
}  // namespace

ValidationScope::ValidationScope(std::string what) : what_(std::move(what)), outer_(current_scope) {
  current_scope = &what_;
}

ValidationScope::~ValidationScope() { current_scope = outer_; }

const std::string* ValidationScope::current() { return current_scope; }

void ValidationLog::add(std::string message) {
  std::lock_guard lock(mutex_);
  messages_.push_back(std::move(message));
}

size_t ValidationLog::count() const {
  std::lock_guard lock(mutex_);
  return messages_.size();
}

std::vector<std::string> ValidationLog::messages() const {
  std::lock_guard lock(mutex_);
  return messages_;
}

void ValidationLog::check(std::string_view where) {
  std::lock_guard lock(mutex_);
  if (checked_ == messages_.size()) return;
  std::string text = "Vulkan validation reported " + std::to_string(messages_.size() - checked_) +
                     " message(s) during " + std::string(where) + ":";
  for (size_t i = checked_; i < messages_.size(); ++i) text += "\n  " + messages_[i];
  checked_ = messages_.size();
  throw DeviceError(text);
}

bool validation_requested_by_env() { return support::env_switch("MN_VALIDATION", false); }

Instance::Instance(bool validation) : validation_(validation) {
  uint32_t loader_version = VK_API_VERSION_1_0;
  check(vkEnumerateInstanceVersion(&loader_version), "vkEnumerateInstanceVersion");
  if (loader_version < VK_API_VERSION_1_2) {
    throw DeviceError("the Vulkan loader supports only API " +
                      std::to_string(VK_API_VERSION_MAJOR(loader_version)) + "." +
                      std::to_string(VK_API_VERSION_MINOR(loader_version)) +
                      "; meganeura needs 1.2 or later");
  }
  api_version_ = std::min(loader_version, VK_API_VERSION_1_3);

  std::vector<const char*> layers;
  std::vector<const char*> extensions;
  const std::vector<std::string> available = instance_extensions(nullptr);
  auto available_has = [&](const char* name) {
    return std::find(available.begin(), available.end(), name) != available.end();
  };
  VkInstanceCreateFlags flags = 0;
  // MoltenVK is listed only when the application accepts portability drivers.
  if (available_has(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }

  VkDebugUtilsMessengerCreateInfoEXT messenger_info{};
  messenger_info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  messenger_info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                   VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger_info.pfnUserCallback = on_message;
  messenger_info.pUserData = &log_;

  // Synchronization validation checks that the barriers the recorder leaves out were
  // indeed unnecessary.
  const VkValidationFeatureEnableEXT enables[] = {
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{};
  features.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;

  const void* next = nullptr;
  if (validation_) {
    if (!has_layer(kValidationLayer)) {
      throw DeviceError(
          "MN_VALIDATION is set but the Vulkan validation layer VK_LAYER_KHRONOS_validation is "
          "not installed (Debian package vulkan-validationlayers)");
    }
    layers.push_back(kValidationLayer);
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    const std::vector<std::string> layer_ext = instance_extensions(kValidationLayer);
    if (std::find(layer_ext.begin(), layer_ext.end(), VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) !=
        layer_ext.end()) {
      extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
      features.pNext = &messenger_info;
      next = &features;
    } else {
      next = &messenger_info;
    }
  }

  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "meganeura";
  app.applicationVersion = VK_MAKE_API_VERSION(0, 0, 1, 0);
  app.pEngineName = "meganeura";
  app.engineVersion = VK_MAKE_API_VERSION(0, 0, 1, 0);
  app.apiVersion = api_version_;

  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pNext = next;
  info.flags = flags;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  const VkResult result = vkCreateInstance(&info, nullptr, &instance_);
  if (result == VK_ERROR_INCOMPATIBLE_DRIVER) {
    throw DeviceError(
        "vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver found; install "
        "one, e.g. Debian's mesa-vulkan-drivers for the CPU, or point VK_DRIVER_FILES at the "
        "driver's ICD json)");
  }
  check(result, "vkCreateInstance");

  if (validation_) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (!create) {
      vkDestroyInstance(instance_, nullptr);
      throw DeviceError("vkCreateDebugUtilsMessengerEXT is missing although validation is on");
    }
    messenger_info.pNext = nullptr;
    const VkResult r = create(instance_, &messenger_info, nullptr, &messenger_);
    if (r != VK_SUCCESS) {
      vkDestroyInstance(instance_, nullptr);
      check(r, "vkCreateDebugUtilsMessengerEXT");
    }
  }
}

Instance::~Instance() {
  if (messenger_ != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  vkDestroyInstance(instance_, nullptr);
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
  uint32_t count = 0;
  check(vkEnumeratePhysicalDevices(instance_, &count, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> devices(count);
  VkResult result = vkEnumeratePhysicalDevices(instance_, &count, devices.data());
  if (result != VK_INCOMPLETE) check(result, "vkEnumeratePhysicalDevices");
  devices.resize(count);
  return devices;
}

}  // namespace mn::vk
