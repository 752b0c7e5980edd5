#pragma once
// Compute pipelines from SPIR-V, with the resource layout described by the caller.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace mn::vk {

class Device;

struct SpecializationConstant {
  uint32_t id = 0;     // constant_id in GLSL; 0, 1, 2 are the workgroup size
  uint32_t value = 0;  // 32-bit int/uint/bool, or a float's bits (std::bit_cast)
};

// What a kernel expects from the caller.
//  - Storage buffers at set 0, bindings 0 .. buffer_count-1. A binding may be an array of
//    descriptors (buffer_array_sizes) to address a range larger than one arena chunk.
//  - Push constants: push_constant_bytes at offset 0 (a multiple of 4).
//  - The workgroup size reaches the shader as specialization constants 0, 1, 2: declare
//    `layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;`.
//    A shader with a literal local_size must state the same size here.
struct KernelInterface {
  uint32_t buffer_count = 0;
  std::vector<uint32_t> buffer_array_sizes;  // empty: one descriptor per binding
  uint32_t push_constant_bytes = 0;
  std::array<uint32_t, 3> workgroup_size{64, 1, 1};
  std::vector<SpecializationConstant> specialization;

  uint32_t array_size(uint32_t binding) const {
    return binding < buffer_array_sizes.size() ? buffer_array_sizes[binding] : 1;
  }
};

class Pipeline {
 public:
  // Checks the interface against the device's limits and the SPIR-V (mn::Error on mismatch);
  // creates the pipeline through the device's persistent pipeline cache when it has one.
  Pipeline(Device& device, std::span<const uint32_t> spirv, KernelInterface interface,
           std::string name = "kernel");
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  VkPipeline handle() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  const KernelInterface& interface() const { return interface_; }
  const std::string& name() const { return name_; }
  // Pipeline creation feedback, where the driver reports it: the pipeline came from the cache.
  bool cache_hit() const { return cache_hit_; }
  double creation_ms() const { return creation_ms_; }
  // What the driver reports of the compiled kernel where the device captures it
  // (Device::pipeline_statistics), on one line as the driver names each statistic:
  // "Register Count 128, Binary Size 4096"; empty otherwise. Read once, at creation.
  const std::string& statistics_line() const { return statistics_line_; }

 private:
  Device& device_;
  KernelInterface interface_;
  std::string name_;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  bool cache_hit_ = false;
  double creation_ms_ = 0;
  std::string statistics_line_;
};

}  // namespace mn::vk
