#pragma once
// The chain of feature structures meganeura queries and enables. The same chain serves both:
// query it, keep what the device has, pass it to vkCreateDevice.
#include <string>
#include <string_view>
#include <vector>

#include "vulkan/vulkan_compat.h"

namespace mn::vk {

class ExtensionList {
 public:
  ExtensionList() = default;
  explicit ExtensionList(VkPhysicalDevice device);
  bool has(std::string_view name) const;
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;  // sorted
};

// Device extensions meganeura enables when present (and, for the API version, not core).
std::vector<const char*> wanted_device_extensions(uint32_t device_api_version,
                                                  const ExtensionList& available);

struct FeatureChain {
  // Links only the structures that are valid for this API version and extension list.
  FeatureChain(uint32_t device_api_version, const ExtensionList& extensions);
  FeatureChain(const FeatureChain&) = delete;
  FeatureChain& operator=(const FeatureChain&) = delete;

  void query(VkPhysicalDevice device);
  // Features that cost speed and that meganeura does not use are switched off before enabling.
  void drop_costly_features();

  VkPhysicalDeviceFeatures2 core{};
  VkPhysicalDeviceVulkan11Features v11{};
  VkPhysicalDeviceVulkan12Features v12{};
  VkPhysicalDeviceVulkan13Features v13{};
  VkPhysicalDeviceSubgroupSizeControlFeaturesEXT subgroup_size_control{};
  VkPhysicalDeviceShaderAtomicFloatFeaturesEXT atomic_float{};
  VkPhysicalDeviceShaderAtomicFloat2FeaturesEXT atomic_float2{};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coopmat_nv{};
  VkPhysicalDeviceCooperativeMatrixFeaturesKHR coopmat_khr{};
  VkPhysicalDeviceCooperativeMatrix2FeaturesNV coopmat2_nv{};
  VkPhysicalDeviceShaderBfloat16FeaturesKHR bfloat16{};
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_properties{};

  bool has_v13 = false;
  bool has_subgroup_size_control_ext = false;
  bool has_atomic_float = false;
  bool has_atomic_float2 = false;
  bool has_coopmat_nv = false;
  bool has_coopmat_khr = false;
  bool has_coopmat2_nv = false;
  bool has_bfloat16 = false;
  bool has_executable_properties = false;
};

}  // namespace mn::vk
