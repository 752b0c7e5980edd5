#pragma once
// What a Vulkan device offers, in the terms kernel generation and the runtime need.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace mn::vk {

// One (M, N, K, types, scope) shape the device's matrix units accept.
struct CooperativeMatrixConfig {
  uint32_t m = 0, n = 0, k = 0;
  std::string a_type, b_type, c_type, result_type;  // "f16", "f32", "bf16", "i8", ...
  bool saturating_accumulation = false;
  std::string scope;  // "subgroup", "workgroup", ...
};

// A family of matrix shapes (VK_NV_cooperative_matrix2's flexible dimensions): any M, N, K
// that are multiples of the granularities, for a workgroup of `workgroup_invocations`
// (workgroup scope) or one subgroup.
struct CooperativeMatrixFlexibleConfig {
  uint32_t m_granularity = 0, n_granularity = 0, k_granularity = 0;
  std::string a_type, b_type, c_type, result_type;
  bool saturating_accumulation = false;
  std::string scope;
  uint32_t workgroup_invocations = 0;
};

struct MemoryHeap {
  uint64_t bytes = 0;
  bool device_local = false;
};

struct MemoryType {
  uint32_t heap = 0;
  VkMemoryPropertyFlags flags = 0;
};

struct DeviceCapabilities {
  // Identity.
  uint32_t index = 0;  // position in vkEnumeratePhysicalDevices
  std::string name;
  VkPhysicalDeviceType device_type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  std::string type;  // "discrete", "integrated", "virtual", "cpu", "other"
  uint32_t vendor_id = 0, device_id = 0;
  std::string vendor;  // "NVIDIA", "AMD", "Intel", "Mesa", ...
  uint32_t api_version = 0;
  std::string api_version_text;
  std::string driver_name, driver_info, driver_version;
  VkDriverId driver_id = static_cast<VkDriverId>(0);
  std::array<uint8_t, VK_UUID_SIZE> pipeline_cache_uuid{};
  // The device's identity across APIs: CUDA's cuDeviceGetUuid gives the same bytes.
  std::array<uint8_t, VK_UUID_SIZE> device_uuid{};
  // VK_KHR_external_memory_fd: memory exported as a file descriptor other APIs import.
  bool external_memory_fd = false;
  bool usable = false;  // Vulkan 1.2 or later with a compute queue
  std::string unusable_reason;

  struct Compute {
    uint32_t queue_family = 0;
    uint32_t subgroup_size = 0, min_subgroup_size = 0, max_subgroup_size = 0;
    bool subgroup_size_control = false, compute_full_subgroups = false;
    bool subgroup_arithmetic = false, subgroup_shuffle = false, subgroup_ballot = false,
         subgroup_vote = false, subgroup_clustered = false;
    // Vulkan exposes one limit per workgroup; drivers that need an opt-in for large
    // allocations (NVIDIA) apply it themselves, so the opt-in maximum is this limit too.
    uint32_t shared_memory_bytes = 0;
    uint32_t shared_memory_optin_bytes = 0;
    std::array<uint32_t, 3> max_workgroup_size{};
    std::array<uint32_t, 3> max_workgroup_count{};
    uint32_t max_workgroup_invocations = 0;
    uint32_t max_push_constant_bytes = 0;
    uint32_t max_storage_buffers_per_stage = 0;
    uint32_t max_bound_descriptor_sets = 0;
    uint32_t multiprocessors = 0, warps_per_multiprocessor = 0;  // VK_NV_shader_sm_builtins
  } compute;

  struct Buffers {
    uint64_t max_storage_buffer_range = 0;
    uint64_t max_memory_allocation_bytes = 0;
    uint64_t max_buffer_bytes = 0;
    uint32_t max_memory_allocation_count = 0;
    uint64_t min_storage_buffer_offset_alignment = 0;
    uint64_t non_coherent_atom_size = 0;
  } buffers;

  struct Types {
    bool storage_16bit = false, float16 = false;  // storage / arithmetic
    bool storage_8bit = false, int8 = false;
    bool int16 = false, int64 = false, float64 = false;
    bool bfloat16 = false, bfloat16_dot = false, bfloat16_cooperative_matrix = false;
    bool integer_dot_product = false;
  } types;

  struct Atomics {
    bool int64_buffer = false, int64_shared = false;
    bool float_extension = false;  // VK_EXT_shader_atomic_float
    bool float32_add_buffer = false, float32_add_shared = false, float32_buffer = false;
    bool float64_add_buffer = false;
    bool float2_extension = false;  // VK_EXT_shader_atomic_float2
    bool float16_add_buffer = false, float32_min_max_buffer = false;
  } atomics;

  struct Timestamps {
    bool supported = false;  // on the compute queue
    uint32_t valid_bits = 0;
    double period_ns = 0;
  } timestamps;

  struct CooperativeMatrix {
    bool nv_extension = false, khr_extension = false;
    bool nv_feature = false, khr_feature = false;
    std::vector<CooperativeMatrixConfig> nv_configs, khr_configs;
    // VK_NV_cooperative_matrix2: matrices shared by a whole workgroup, of flexible sizes.
    bool nv2_extension = false;
    bool workgroup_scope = false, flexible_dimensions = false;  // features
    bool tensor_addressing = false, per_element_operations = false, reductions = false;
    bool conversions = false, block_loads = false;
    uint32_t workgroup_scope_max_workgroup_size = 0;
    uint32_t flexible_dimensions_max_dimension = 0;
    uint32_t workgroup_scope_reserved_shared_bytes = 0;
    std::vector<CooperativeMatrixFlexibleConfig> flexible_configs;
  } cooperative_matrix;

  struct Memory {
    std::vector<MemoryHeap> heaps;
    std::vector<MemoryType> types;
    uint64_t device_local_bytes = 0;  // largest device-local heap
    // Device-local memory the host can map directly: resizable BAR on a discrete GPU, all
    // memory on integrated and CPU devices. Zero when only a small window exists.
    uint64_t host_visible_device_local_bytes = 0;
    bool unified = false;  // integrated or CPU: every device-local byte is host memory
  } memory;

  bool vulkan_memory_model = false;
  bool pipeline_creation_feedback = false;
  bool has_nv_sm_builtins = false;
};

// Reads everything above from one physical device. `instance` is needed for the extension
// entry points (cooperative matrix enumeration).
DeviceCapabilities query_capabilities(VkInstance instance, VkPhysicalDevice device, uint32_t index);

// The queue family meganeura submits to: a universal (graphics+compute) family when present,
// else the first compute family; UINT32_MAX when the device has no compute queue.
uint32_t choose_compute_queue_family(VkPhysicalDevice device);

// "1.3.230".
std::string version_text(uint32_t api_version);
std::string device_type_name(VkPhysicalDeviceType type);

}  // namespace mn::vk
