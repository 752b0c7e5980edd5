#include "vulkan/features.h"

#include <algorithm>

#include "vulkan/check.h"

namespace mn::vk {

ExtensionList::ExtensionList(VkPhysicalDevice device) {
  uint32_t count = 0;
  check(vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr),
        "vkEnumerateDeviceExtensionProperties");
  std::vector<VkExtensionProperties> props(count);
  check(vkEnumerateDeviceExtensionProperties(device, nullptr, &count, props.data()),
        "vkEnumerateDeviceExtensionProperties");
  for (const auto& p : props) names_.emplace_back(p.extensionName);
  std::sort(names_.begin(), names_.end());
}

bool ExtensionList::has(std::string_view name) const {
  return std::binary_search(names_.begin(), names_.end(), name);
}

std::vector<const char*> wanted_device_extensions(uint32_t api, const ExtensionList& available) {
  std::vector<const char*> wanted = {
      VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME, VK_EXT_SHADER_ATOMIC_FLOAT_2_EXTENSION_NAME,
      VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME,
      VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME,
      // Arenas NCCL all-reduces in place (SessionOptions::exportable_memory).
      VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME,
      // Kernels' register counts and the like, for profiles (DeviceOptions::pipeline_statistics).
      VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME,
      // The specification requires enabling it wherever it is offered (MoltenVK).
      "VK_KHR_portability_subset"};
  if (api < VK_API_VERSION_1_3) {
    wanted.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    wanted.push_back(VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME);
  }
  std::vector<const char*> enabled;
  for (const char* name : wanted) {
    if (available.has(name)) enabled.push_back(name);
  }
  return enabled;
}

FeatureChain::FeatureChain(uint32_t api, const ExtensionList& ext) {
  core.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  v13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
  subgroup_size_control.sType =
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
  atomic_float.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT;
  atomic_float2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_2_FEATURES_EXT;
  coopmat_nv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  coopmat_khr.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR;
  coopmat2_nv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV;
  bfloat16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR;
  executable_properties.sType =
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;

  has_v13 = api >= VK_API_VERSION_1_3;
  has_subgroup_size_control_ext = !has_v13 && ext.has(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  has_atomic_float = ext.has(VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
  has_atomic_float2 = ext.has(VK_EXT_SHADER_ATOMIC_FLOAT_2_EXTENSION_NAME);
  has_coopmat_nv = ext.has(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  has_coopmat_khr = ext.has(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
  // Workgroup-scope matrices are used through the KHR types, so both are needed.
  has_coopmat2_nv = has_coopmat_khr && ext.has(VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME);
  has_bfloat16 = ext.has(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
  has_executable_properties = ext.has(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);

  void** tail = &core.pNext;
  auto link = [&](auto& s) {
    *tail = &s;
    tail = &s.pNext;
  };
  link(v11);
  link(v12);
  if (has_v13) link(v13);
  if (has_subgroup_size_control_ext) link(subgroup_size_control);
  if (has_atomic_float) link(atomic_float);
  if (has_atomic_float2) link(atomic_float2);
  if (has_coopmat_nv) link(coopmat_nv);
  if (has_coopmat_khr) link(coopmat_khr);
  if (has_coopmat2_nv) link(coopmat2_nv);
  if (has_bfloat16) link(bfloat16);
  if (has_executable_properties) link(executable_properties);
}

void FeatureChain::query(VkPhysicalDevice device) { vkGetPhysicalDeviceFeatures2(device, &core); }

void FeatureChain::drop_costly_features() {
  // Robust access adds a bounds check to every load and store.
  core.features.robustBufferAccess = VK_FALSE;
  if (has_v13) v13.robustImageAccess = VK_FALSE;
  coopmat_nv.cooperativeMatrixRobustBufferAccess = VK_FALSE;
  coopmat_khr.cooperativeMatrixRobustBufferAccess = VK_FALSE;
  // Capture/replay and multi-device addressing constrain the allocator for nothing we use.
  v12.bufferDeviceAddressCaptureReplay = VK_FALSE;
  v12.bufferDeviceAddressMultiDevice = VK_FALSE;
}

}  // namespace mn::vk
