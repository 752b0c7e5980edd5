#include "vulkan/pipeline.h"

#include <chrono>
#include <optional>
#include <unordered_map>

#include <meganeura/error.h>

#include "vulkan/check.h"
#include "vulkan/device.h"
#include "vulkan/live_objects.h"
#include "vulkan/pipeline_cache.h"

namespace mn::vk {
namespace {

constexpr uint32_t kSpirvMagic = 0x07230203;
constexpr uint32_t kOpExecutionMode = 16, kOpExecutionModeId = 331;
constexpr uint32_t kOpConstant = 43, kOpConstantComposite = 44, kOpDecorate = 71;
constexpr uint32_t kModeLocalSize = 17, kModeLocalSizeId = 38;
constexpr uint32_t kDecorationBuiltIn = 11, kBuiltInWorkgroupSize = 25;

// The workgroup size fixed in the SPIR-V, if it is fixed: a WorkgroupSize built-in made of
// plain constants, else LocalSizeId of plain constants (SPIR-V 1.6), else LocalSize (older).
// Sizes made of specialization constants follow the interface and give nullopt.
std::optional<std::array<uint32_t, 3>> literal_local_size(std::span<const uint32_t> spirv) {
  std::unordered_map<uint32_t, uint32_t> constants;
  std::unordered_map<uint32_t, std::vector<uint32_t>> composites;
  std::optional<uint32_t> builtin;
  std::optional<std::array<uint32_t, 3>> local_size, local_size_ids;
  for (size_t i = 5; i < spirv.size();) {
    const uint32_t words = spirv[i] >> 16, opcode = spirv[i] & 0xffff;
    if (words == 0 || i + words > spirv.size()) break;
    const uint32_t* w = spirv.data() + i;
    if (opcode == kOpConstant && words == 4) {
      constants[w[2]] = w[3];
    } else if (opcode == kOpConstantComposite && words >= 6) {
      composites[w[2]] = {w[3], w[4], w[5]};
    } else if (opcode == kOpDecorate && words == 4 && w[2] == kDecorationBuiltIn &&
               w[3] == kBuiltInWorkgroupSize) {
      builtin = w[1];
    } else if (opcode == kOpExecutionMode && words >= 6 && w[2] == kModeLocalSize) {
      local_size = std::array<uint32_t, 3>{w[3], w[4], w[5]};
    } else if (opcode == kOpExecutionModeId && words >= 6 && w[2] == kModeLocalSizeId) {
      local_size_ids = std::array<uint32_t, 3>{w[3], w[4], w[5]};
    }
    i += words;
  }
  auto resolve = [&](const std::vector<uint32_t>& ids) -> std::optional<std::array<uint32_t, 3>> {
    std::array<uint32_t, 3> size{};
    for (int d = 0; d < 3; ++d) {
      auto it = constants.find(ids[d]);
      if (it == constants.end()) return std::nullopt;  // a specialization constant
      size[d] = it->second;
    }
    return size;
  };
  if (builtin) {
    auto it = composites.find(*builtin);
    return it == composites.end() ? std::nullopt : resolve(it->second);
  }
  if (local_size_ids) {
    return resolve({(*local_size_ids)[0], (*local_size_ids)[1], (*local_size_ids)[2]});
  }
  return local_size;
}

std::string size_text(const std::array<uint32_t, 3>& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
}

void check_interface(const Device& device, std::span<const uint32_t> spirv,
                     const KernelInterface& k, const std::string& name) {
  const auto& c = device.capabilities().compute;
  const std::string where = "kernel '" + name + "': ";
  if (spirv.size() < 5 || spirv[0] != kSpirvMagic) throw Error(where + "not a SPIR-V module");
  const auto& wg = k.workgroup_size;
  uint64_t invocations = 1;
  for (int d = 0; d < 3; ++d) {
    if (wg[d] == 0 || wg[d] > c.max_workgroup_size[d]) {
      throw Error(where + "workgroup size " + size_text(wg) + " exceeds the device's " +
                  size_text(c.max_workgroup_size));
    }
    invocations *= wg[d];
  }
  if (invocations > c.max_workgroup_invocations) {
    throw Error(where + "workgroup size " + size_text(wg) + " has " + std::to_string(invocations) +
                " invocations; the device allows " + std::to_string(c.max_workgroup_invocations));
  }
  if (auto literal = literal_local_size(spirv); literal && *literal != wg) {
    throw Error(where + "the shader's local_size is " + size_text(*literal) +
                " but the interface says " + size_text(wg));
  }
  if (k.push_constant_bytes % 4 != 0 || k.push_constant_bytes > c.max_push_constant_bytes) {
    throw Error(where + std::to_string(k.push_constant_bytes) +
                " push-constant bytes: must be a multiple of 4 and at most " +
                std::to_string(c.max_push_constant_bytes));
  }
  if (k.buffer_array_sizes.size() > k.buffer_count) {
    throw Error(where + "buffer_array_sizes has more entries than buffer_count");
  }
  uint64_t descriptors = 0;
  for (uint32_t b = 0; b < k.buffer_count; ++b) {
    if (k.array_size(b) == 0) throw Error(where + "binding " + std::to_string(b) + " has size 0");
    descriptors += k.array_size(b);
  }
  if (descriptors > c.max_storage_buffers_per_stage) {
    throw Error(where + std::to_string(descriptors) + " storage-buffer descriptors; the device " +
                "allows " + std::to_string(c.max_storage_buffers_per_stage));
  }
  for (const auto& s : k.specialization) {
    if (s.id < 3) {
      throw Error(where + "specialization constant id " + std::to_string(s.id) +
                  " is reserved for the workgroup size");
    }
  }
}

// The statistics of every executable of a pipeline created with
// VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR (a compute pipeline has one), on one line:
// "name value, name value".
std::string read_statistics(const Device& device, VkPipeline pipeline) {
  auto properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      device.proc("vkGetPipelineExecutablePropertiesKHR"));
  auto statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      device.proc("vkGetPipelineExecutableStatisticsKHR"));
  if (!properties || !statistics) return {};
  VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  info.pipeline = pipeline;
  uint32_t executables = 0;
  check(properties(device.handle(), &info, &executables, nullptr),
        "vkGetPipelineExecutablePropertiesKHR");
  std::string line;
  for (uint32_t e = 0; e < executables; ++e) {
    VkPipelineExecutableInfoKHR which{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    which.pipeline = pipeline;
    which.executableIndex = e;
    uint32_t count = 0;
    check(statistics(device.handle(), &which, &count, nullptr),
          "vkGetPipelineExecutableStatisticsKHR");
    std::vector<VkPipelineExecutableStatisticKHR> stats(
        count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    check(statistics(device.handle(), &which, &count, stats.data()),
          "vkGetPipelineExecutableStatisticsKHR");
    for (const VkPipelineExecutableStatisticKHR& s : stats) {
      std::string value;
      switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          value = s.value.b32 ? "true" : "false";
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          value = std::to_string(s.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          value = std::to_string(s.value.u64);
          break;
        default:
          value = std::to_string(s.value.f64);
      }
      line += (line.empty() ? "" : ", ") + std::string(s.name) + " " + value;
    }
  }
  return line;
}

}  // namespace

Pipeline::Pipeline(Device& device, std::span<const uint32_t> spirv, KernelInterface interface,
                   std::string name)
    : device_(device), interface_(std::move(interface)), name_(std::move(name)) {
  const ValidationScope scope("creating kernel '" + name_ + "'");
  check_interface(device, spirv, interface_, name_);
  const VkDevice dev = device.handle();
  const auto start = std::chrono::steady_clock::now();
  try {
    VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    module_info.codeSize = spirv.size_bytes();
    module_info.pCode = spirv.data();
    check(vkCreateShaderModule(dev, &module_info, nullptr, &module_), "vkCreateShaderModule");

    std::vector<VkDescriptorSetLayoutBinding> bindings(interface_.buffer_count);
    for (uint32_t b = 0; b < interface_.buffer_count; ++b) {
      bindings[b].binding = b;
      bindings[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      bindings[b].descriptorCount = interface_.array_size(b);
      bindings[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    set_info.bindingCount = interface_.buffer_count;
    set_info.pBindings = bindings.data();
    check(vkCreateDescriptorSetLayout(dev, &set_info, nullptr, &set_layout_),
          "vkCreateDescriptorSetLayout");

    VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, interface_.push_constant_bytes};
    VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    layout_info.setLayoutCount = 1;
    layout_info.pSetLayouts = &set_layout_;
    layout_info.pushConstantRangeCount = interface_.push_constant_bytes > 0 ? 1 : 0;
    layout_info.pPushConstantRanges = &push;
    check(vkCreatePipelineLayout(dev, &layout_info, nullptr, &layout_), "vkCreatePipelineLayout");

    std::vector<VkSpecializationMapEntry> entries;
    std::vector<uint32_t> values;
    for (uint32_t d = 0; d < 3; ++d) {
      entries.push_back({d, d * 4u, 4});
      values.push_back(interface_.workgroup_size[d]);
    }
    for (const auto& s : interface_.specialization) {
      entries.push_back({s.id, static_cast<uint32_t>(values.size() * 4), 4});
      values.push_back(s.value);
    }
    VkSpecializationInfo spec{};
    spec.mapEntryCount = static_cast<uint32_t>(entries.size());
    spec.pMapEntries = entries.data();
    spec.dataSize = values.size() * 4;
    spec.pData = values.data();

    VkPipelineCreationFeedback feedback{};
    VkPipelineCreationFeedback stage_feedback{};
    VkPipelineCreationFeedbackCreateInfo feedback_info{
        VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO};
    feedback_info.pPipelineCreationFeedback = &feedback;
    feedback_info.pipelineStageCreationFeedbackCount = 1;
    feedback_info.pPipelineStageCreationFeedbacks = &stage_feedback;

    VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    if (device.capabilities().pipeline_creation_feedback) info.pNext = &feedback_info;
    if (device.pipeline_statistics()) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module_;
    info.stage.pName = "main";
    info.stage.pSpecializationInfo = &spec;
    info.layout = layout_;
    PipelineCache* cache = device.pipeline_cache();
    const VkResult result = vkCreateComputePipelines(dev, cache ? cache->handle() : VK_NULL_HANDLE,
                                                     1, &info, nullptr, &pipeline_);
    if (result != VK_SUCCESS) {
      throw_vk_error(result, "vkCreateComputePipelines (kernel '" + name_ + "')");
    }
    if (cache) cache->mark_dirty();
    if (device.pipeline_statistics()) statistics_line_ = read_statistics(device, pipeline_);
    cache_hit_ =
        (feedback.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT) &&
        (feedback.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT);
    device.check_validation("creation of kernel '" + name_ + "'");
  } catch (...) {
    vkDestroyPipeline(dev, pipeline_, nullptr);
    vkDestroyPipelineLayout(dev, layout_, nullptr);
    vkDestroyDescriptorSetLayout(dev, set_layout_, nullptr);
    vkDestroyShaderModule(dev, module_, nullptr);
    throw;
  }
  creation_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  count_live(&LiveObjects::pipelines, 1);
}

Pipeline::~Pipeline() {
  count_live(&LiveObjects::pipelines, -1);
  const VkDevice dev = device_.handle();
  vkDestroyPipeline(dev, pipeline_, nullptr);
  vkDestroyPipelineLayout(dev, layout_, nullptr);
  vkDestroyDescriptorSetLayout(dev, set_layout_, nullptr);
  vkDestroyShaderModule(dev, module_, nullptr);
}

}  // namespace mn::vk
