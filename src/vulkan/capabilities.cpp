#include "vulkan/capabilities.h"

#include <algorithm>
#include <cstdio>

#include "vulkan/check.h"
#include "vulkan/features.h"
#include "vulkan/vulkan_compat.h"

namespace mn::vk {
namespace {

constexpr uint64_t kBarWindowBytes = 256ull << 20;  // the classic PCI BAR without resizing

std::string vendor_name(uint32_t id) {
  switch (id) {
    case 0x10DE:
      return "NVIDIA";
    case 0x1002:
      return "AMD";
    case 0x8086:
      return "Intel";
    case 0x13B5:
      return "ARM";
    case 0x5143:
      return "Qualcomm";
    case 0x106B:
      return "Apple";
    case 0x1010:
      return "ImgTec";
    case 0x10005:
      return "Mesa";
    default: {
      char text[16];
      std::snprintf(text, sizeof text, "0x%04X", id);
      return text;
    }
  }
}

std::string driver_version_text(uint32_t vendor_id, uint32_t v) {
  char text[48];
  if (vendor_id == 0x10DE) {  // NVIDIA packs 10.8.8.6 bits
    std::snprintf(text, sizeof text, "%u.%u.%u.%u", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff,
                  v & 0x3f);
  } else {
    std::snprintf(text, sizeof text, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                  VK_API_VERSION_PATCH(v));
  }
  return text;
}

std::string component_type_name(int type) {
  switch (type) {
    case 0:
      return "f16";
    case 1:
      return "f32";
    case 2:
      return "f64";
    case 3:
      return "i8";
    case 4:
      return "i16";
    case 5:
      return "i32";
    case 6:
      return "i64";
    case 7:
      return "u8";
    case 8:
      return "u16";
    case 9:
      return "u32";
    case 10:
      return "u64";
    case 1000141000:
      return "bf16";
    case 1000491000:
      return "i8_packed";
    case 1000491001:
      return "u8_packed";
    case 1000491002:
      return "e4m3";
    case 1000491003:
      return "e5m2";
    default:
      return "type" + std::to_string(type);
  }
}

std::string scope_name(int scope) {
  switch (scope) {
    case 1:
      return "device";
    case 2:
      return "workgroup";
    case 3:
      return "subgroup";
    case 5:
      return "queue_family";
    default:
      return "scope" + std::to_string(scope);
  }
}

void query_cooperative_matrix(VkInstance instance, VkPhysicalDevice device,
                              DeviceCapabilities::CooperativeMatrix& out) {
  if (out.nv_extension) {
    auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
        vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
    if (get) {
      uint32_t count = 0;
      check(get(device, &count, nullptr), "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
      std::vector<VkCooperativeMatrixPropertiesNV> props(count);
      for (auto& p : props) p.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
      check(get(device, &count, props.data()), "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
      for (const auto& p : props) {
        out.nv_configs.push_back({p.MSize, p.NSize, p.KSize, component_type_name(p.AType),
                                  component_type_name(p.BType), component_type_name(p.CType),
                                  component_type_name(p.DType), false, scope_name(p.scope)});
      }
    }
  }
  if (out.khr_extension) {
    auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
        vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
    if (get) {
      uint32_t count = 0;
      check(get(device, &count, nullptr), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
      std::vector<VkCooperativeMatrixPropertiesKHR> props(count);
      for (auto& p : props) p.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
      check(get(device, &count, props.data()), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
      for (const auto& p : props) {
        out.khr_configs.push_back({p.MSize, p.NSize, p.KSize, component_type_name(p.AType),
                                   component_type_name(p.BType), component_type_name(p.CType),
                                   component_type_name(p.ResultType),
                                   p.saturatingAccumulation == VK_TRUE, scope_name(p.scope)});
      }
    }
  }
}

void query_flexible_dimensions(VkInstance instance, VkPhysicalDevice device,
                               DeviceCapabilities::CooperativeMatrix& out) {
  auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV>(
      vkGetInstanceProcAddr(instance,
                            "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"));
  if (!get) return;
  const char* what = "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
  uint32_t count = 0;
  check(get(device, &count, nullptr), what);
  std::vector<VkCooperativeMatrixFlexibleDimensionsPropertiesNV> props(count);
  for (auto& p : props) p.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV;
  check(get(device, &count, props.data()), what);
  for (const auto& p : props) {
    out.flexible_configs.push_back(
        {p.MGranularity, p.NGranularity, p.KGranularity, component_type_name(p.AType),
         component_type_name(p.BType), component_type_name(p.CType),
         component_type_name(p.ResultType), p.saturatingAccumulation == VK_TRUE,
         scope_name(p.scope), p.workgroupInvocations});
  }
}

void query_memory(VkPhysicalDevice device, DeviceCapabilities& caps) {
  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(device, &mem);
  auto& out = caps.memory;
  out.unified = caps.device_type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                caps.device_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    const bool local = (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    out.heaps.push_back({mem.memoryHeaps[i].size, local});
    if (local) out.device_local_bytes = std::max(out.device_local_bytes, mem.memoryHeaps[i].size);
  }
  constexpr VkMemoryPropertyFlags kMappable =
      VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  for (uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    const auto& t = mem.memoryTypes[i];
    out.types.push_back({t.heapIndex, t.propertyFlags});
    if ((t.propertyFlags & kMappable) == kMappable) {
      const uint64_t heap = mem.memoryHeaps[t.heapIndex].size;
      if (out.unified || heap > kBarWindowBytes) {
        out.host_visible_device_local_bytes = std::max(out.host_visible_device_local_bytes, heap);
      }
    }
  }
}

}  // namespace

std::string version_text(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
         "." + std::to_string(VK_API_VERSION_PATCH(v));
}

std::string device_type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

uint32_t choose_compute_queue_family(VkPhysicalDevice device) {
  uint32_t count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &count, nullptr);
  std::vector<VkQueueFamilyProperties> families(count);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &count, families.data());
  uint32_t compute_only = UINT32_MAX;
  for (uint32_t i = 0; i < count; ++i) {
    const VkQueueFlags flags = families[i].queueFlags;
    if (!(flags & VK_QUEUE_COMPUTE_BIT) || families[i].queueCount == 0) continue;
    if (flags & VK_QUEUE_GRAPHICS_BIT) return i;
    if (compute_only == UINT32_MAX) compute_only = i;
  }
  return compute_only;
}

DeviceCapabilities query_capabilities(VkInstance instance, VkPhysicalDevice device,
                                      uint32_t index) {
  DeviceCapabilities caps;
  caps.index = index;
  VkPhysicalDeviceProperties basic{};
  vkGetPhysicalDeviceProperties(device, &basic);
  caps.name = basic.deviceName;
  caps.device_type = basic.deviceType;
  caps.type = device_type_name(basic.deviceType);
  caps.vendor_id = basic.vendorID;
  caps.device_id = basic.deviceID;
  caps.vendor = vendor_name(basic.vendorID);
  caps.api_version = basic.apiVersion;
  caps.api_version_text = version_text(basic.apiVersion);
  caps.driver_version = driver_version_text(basic.vendorID, basic.driverVersion);
  std::copy(std::begin(basic.pipelineCacheUUID), std::end(basic.pipelineCacheUUID),
            caps.pipeline_cache_uuid.begin());

  const VkPhysicalDeviceLimits& limits = basic.limits;
  auto& c = caps.compute;
  c.shared_memory_bytes = limits.maxComputeSharedMemorySize;
  c.shared_memory_optin_bytes = limits.maxComputeSharedMemorySize;
  std::copy(std::begin(limits.maxComputeWorkGroupSize), std::end(limits.maxComputeWorkGroupSize),
            c.max_workgroup_size.begin());
  std::copy(std::begin(limits.maxComputeWorkGroupCount), std::end(limits.maxComputeWorkGroupCount),
            c.max_workgroup_count.begin());
  c.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  c.max_push_constant_bytes = limits.maxPushConstantsSize;
  c.max_storage_buffers_per_stage = limits.maxPerStageDescriptorStorageBuffers;
  c.max_bound_descriptor_sets = limits.maxBoundDescriptorSets;
  caps.buffers.max_storage_buffer_range = limits.maxStorageBufferRange;
  caps.buffers.max_memory_allocation_count = limits.maxMemoryAllocationCount;
  caps.buffers.min_storage_buffer_offset_alignment = limits.minStorageBufferOffsetAlignment;
  caps.buffers.non_coherent_atom_size = limits.nonCoherentAtomSize;
  caps.timestamps.period_ns = limits.timestampPeriod;

  query_memory(device, caps);

  c.queue_family = choose_compute_queue_family(device);
  if (basic.apiVersion < VK_API_VERSION_1_2) {
    caps.unusable_reason = "Vulkan " + caps.api_version_text + " is older than 1.2";
    return caps;
  }
  if (c.queue_family == UINT32_MAX) {
    caps.unusable_reason = "no compute queue";
    return caps;
  }
  caps.usable = true;

  {
    uint32_t count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(device, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vkGetPhysicalDeviceQueueFamilyProperties(device, &count, families.data());
    caps.timestamps.valid_bits = families[c.queue_family].timestampValidBits;
    caps.timestamps.supported = caps.timestamps.valid_bits > 0;
  }

  const ExtensionList extensions(device);
  caps.cooperative_matrix.nv_extension = extensions.has(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  caps.cooperative_matrix.khr_extension = extensions.has(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
  caps.cooperative_matrix.nv2_extension = extensions.has(VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME);
  caps.atomics.float_extension = extensions.has(VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
  caps.atomics.float2_extension = extensions.has(VK_EXT_SHADER_ATOMIC_FLOAT_2_EXTENSION_NAME);
  caps.has_nv_sm_builtins = extensions.has(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  caps.external_memory_fd = extensions.has(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
  const bool has_v13 = basic.apiVersion >= VK_API_VERSION_1_3;
  caps.pipeline_creation_feedback =
      has_v13 || extensions.has(VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME);

  // Properties.
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceVulkan11Properties p11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
  VkPhysicalDeviceVulkan12Properties p12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
  VkPhysicalDeviceVulkan13Properties p13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlPropertiesEXT size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
  VkPhysicalDeviceMaintenance4Properties m4{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
  props.pNext = &p11;
  p11.pNext = &p12;
  void** tail = &p12.pNext;
  if (has_v13) {
    *tail = &p13;
    tail = &p13.pNext;
  } else {
    if (extensions.has(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) {
      *tail = &size_control;
      tail = &size_control.pNext;
    }
    if (extensions.has(VK_KHR_MAINTENANCE_4_EXTENSION_NAME)) {
      *tail = &m4;
      tail = &m4.pNext;
    }
  }
  if (caps.has_nv_sm_builtins) {
    *tail = &sm;
    tail = &sm.pNext;
  }
  VkPhysicalDeviceCooperativeMatrix2PropertiesNV cm2{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
  if (caps.cooperative_matrix.nv2_extension) {
    *tail = &cm2;
    tail = &cm2.pNext;
  }
  vkGetPhysicalDeviceProperties2(device, &props);
  caps.cooperative_matrix.workgroup_scope_max_workgroup_size =
      cm2.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
  caps.cooperative_matrix.flexible_dimensions_max_dimension =
      cm2.cooperativeMatrixFlexibleDimensionsMaxDimension;
  caps.cooperative_matrix.workgroup_scope_reserved_shared_bytes =
      cm2.cooperativeMatrixWorkgroupScopeReservedSharedMemory;

  std::copy(std::begin(p11.deviceUUID), std::end(p11.deviceUUID), caps.device_uuid.begin());
  c.subgroup_size = p11.subgroupSize;
  const VkSubgroupFeatureFlags ops = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT)
                                         ? p11.subgroupSupportedOperations
                                         : 0;
  c.subgroup_arithmetic = ops & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
  c.subgroup_shuffle = ops & VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  c.subgroup_ballot = ops & VK_SUBGROUP_FEATURE_BALLOT_BIT;
  c.subgroup_vote = ops & VK_SUBGROUP_FEATURE_VOTE_BIT;
  c.subgroup_clustered = ops & VK_SUBGROUP_FEATURE_CLUSTERED_BIT;
  c.min_subgroup_size = c.max_subgroup_size = p11.subgroupSize;
  if (has_v13) {
    c.min_subgroup_size = p13.minSubgroupSize;
    c.max_subgroup_size = p13.maxSubgroupSize;
    caps.buffers.max_buffer_bytes = p13.maxBufferSize;
  } else {
    if (size_control.minSubgroupSize) {
      c.min_subgroup_size = size_control.minSubgroupSize;
      c.max_subgroup_size = size_control.maxSubgroupSize;
    }
    caps.buffers.max_buffer_bytes = m4.maxBufferSize;
  }
  caps.buffers.max_memory_allocation_bytes = p11.maxMemoryAllocationSize;
  if (caps.buffers.max_buffer_bytes == 0) {
    caps.buffers.max_buffer_bytes = caps.buffers.max_memory_allocation_bytes;
  }
  if (caps.has_nv_sm_builtins) {
    c.multiprocessors = sm.shaderSMCount;
    c.warps_per_multiprocessor = sm.shaderWarpsPerSM;
  }
  caps.driver_id = p12.driverID;
  caps.driver_name = p12.driverName;
  caps.driver_info = p12.driverInfo;

  // Features.
  FeatureChain f(basic.apiVersion, extensions);
  f.query(device);
  auto& t = caps.types;
  t.storage_16bit = f.v11.storageBuffer16BitAccess;
  t.float16 = f.v12.shaderFloat16;
  t.storage_8bit = f.v12.storageBuffer8BitAccess;
  t.int8 = f.v12.shaderInt8;
  t.int16 = f.core.features.shaderInt16;
  t.int64 = f.core.features.shaderInt64;
  t.float64 = f.core.features.shaderFloat64;
  t.bfloat16 = f.has_bfloat16 && f.bfloat16.shaderBFloat16Type;
  t.bfloat16_dot = f.has_bfloat16 && f.bfloat16.shaderBFloat16DotProduct;
  t.bfloat16_cooperative_matrix = f.has_bfloat16 && f.bfloat16.shaderBFloat16CooperativeMatrix;
  t.integer_dot_product = has_v13 && f.v13.shaderIntegerDotProduct;
  c.subgroup_size_control =
      has_v13 ? f.v13.subgroupSizeControl
              : f.has_subgroup_size_control_ext && f.subgroup_size_control.subgroupSizeControl;
  c.compute_full_subgroups =
      has_v13 ? f.v13.computeFullSubgroups
              : f.has_subgroup_size_control_ext && f.subgroup_size_control.computeFullSubgroups;
  auto& a = caps.atomics;
  a.int64_buffer = f.v12.shaderBufferInt64Atomics;
  a.int64_shared = f.v12.shaderSharedInt64Atomics;
  if (f.has_atomic_float) {
    a.float32_add_buffer = f.atomic_float.shaderBufferFloat32AtomicAdd;
    a.float32_add_shared = f.atomic_float.shaderSharedFloat32AtomicAdd;
    a.float32_buffer = f.atomic_float.shaderBufferFloat32Atomics;
    a.float64_add_buffer = f.atomic_float.shaderBufferFloat64AtomicAdd;
  }
  if (f.has_atomic_float2) {
    a.float16_add_buffer = f.atomic_float2.shaderBufferFloat16AtomicAdd;
    a.float32_min_max_buffer = f.atomic_float2.shaderBufferFloat32AtomicMinMax;
  }
  caps.cooperative_matrix.nv_feature = f.has_coopmat_nv && f.coopmat_nv.cooperativeMatrix;
  caps.cooperative_matrix.khr_feature = f.has_coopmat_khr && f.coopmat_khr.cooperativeMatrix;
  caps.vulkan_memory_model = f.v12.vulkanMemoryModel;

  if (f.has_coopmat2_nv) {
    caps.cooperative_matrix.workgroup_scope = f.coopmat2_nv.cooperativeMatrixWorkgroupScope;
    caps.cooperative_matrix.flexible_dimensions = f.coopmat2_nv.cooperativeMatrixFlexibleDimensions;
    caps.cooperative_matrix.tensor_addressing = f.coopmat2_nv.cooperativeMatrixTensorAddressing;
    caps.cooperative_matrix.per_element_operations =
        f.coopmat2_nv.cooperativeMatrixPerElementOperations;
    caps.cooperative_matrix.reductions = f.coopmat2_nv.cooperativeMatrixReductions;
    caps.cooperative_matrix.conversions = f.coopmat2_nv.cooperativeMatrixConversions;
    caps.cooperative_matrix.block_loads = f.coopmat2_nv.cooperativeMatrixBlockLoads;
  }
  query_cooperative_matrix(instance, device, caps.cooperative_matrix);
  if (caps.cooperative_matrix.flexible_dimensions) {
    query_flexible_dimensions(instance, device, caps.cooperative_matrix);
  }
  return caps;
}

}  // namespace mn::vk
