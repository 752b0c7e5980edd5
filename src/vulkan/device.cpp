#include "vulkan/device.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <meganeura/error.h>

#include "support/env_switch.h"
#include "vulkan/cache_dir.h"
#include "vulkan/check.h"
#include "vulkan/features.h"
#include "vulkan/pipeline_cache.h"

namespace mn::vk {
namespace {

int type_rank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 3;
    default:
      return 4;
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

[[noreturn]] void no_match(const std::vector<DeviceCapabilities>& devices, std::string_view what) {
  std::string message = std::string(what);
  message += devices.empty() ? "; no Vulkan device was found (is a Vulkan driver installed?)"
                             : "; Vulkan devices:\n" + describe_devices(devices);
  throw DeviceError(message);
}

}  // namespace

std::string describe_devices(const std::vector<DeviceCapabilities>& devices) {
  std::string text;
  for (const auto& d : devices) {
    text += "  " + std::to_string(d.index) + ": " + d.name + " (" + d.type + ", " + d.vendor +
            ", Vulkan " + d.api_version_text;
    if (!d.usable) text += ", unusable: " + d.unusable_reason;
    text += ")\n";
  }
  if (!text.empty()) text.pop_back();
  return text;
}

uint32_t select_device(const std::vector<DeviceCapabilities>& devices, std::string_view selector) {
  if (!selector.empty()) {
    if (all_digits(selector)) {
      const unsigned long index = std::strtoul(std::string(selector).c_str(), nullptr, 10);
      for (const auto& d : devices) {
        if (d.index != index) continue;
        if (!d.usable) {
          no_match(devices, "Vulkan device " + std::string(selector) + " (" + d.name +
                                ") cannot be used: " + d.unusable_reason);
        }
        return d.index;
      }
      no_match(devices, "no Vulkan device has index " + std::string(selector));
    }
    const std::string needle = lower(selector);
    for (const auto& d : devices) {
      if (d.usable && lower(d.name).find(needle) != std::string::npos) return d.index;
    }
    no_match(devices, "no usable Vulkan device name contains \"" + std::string(selector) + "\"");
  }
  const DeviceCapabilities* best = nullptr;
  for (const auto& d : devices) {
    if (!d.usable) continue;
    if (!best || type_rank(d.device_type) < type_rank(best->device_type)) best = &d;
  }
  if (!best) no_match(devices, "no usable Vulkan device (meganeura needs Vulkan 1.2 and compute)");
  // One process per device on a node of several: the process's local rank picks among the
  // devices of the preferred kind, in index order.
  if (const std::optional<int> local = local_rank()) {
    std::vector<uint32_t> peers;
    for (const auto& d : devices) {
      if (d.usable && d.device_type == best->device_type) peers.push_back(d.index);
    }
    return peers[static_cast<size_t>(*local) % peers.size()];
  }
  return best->index;
}

std::optional<int> local_rank() {
  // Open MPI, MPICH/Hydra, Slurm, and PyTorch's launchers.
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end != '\0' || r < 0 || r > 1 << 20) {
      throw DeviceError(std::string(var) + " is '" + v + "', expected a local rank (0, 1, ...)");
    }
    return static_cast<int>(r);
  }
  return std::nullopt;
}

Device::Device(const DeviceOptions& options) {
  instance_ =
      std::make_shared<Instance>(options.validation.value_or(validation_requested_by_env()));
  const std::vector<VkPhysicalDevice> physical = instance_->physical_devices();
  std::vector<DeviceCapabilities> all;
  for (uint32_t i = 0; i < physical.size(); ++i) {
    all.push_back(query_capabilities(instance_->handle(), physical[i], i));
  }
  std::string selector;
  if (options.selector) {
    selector = *options.selector;
  } else if (const char* env = std::getenv("MN_DEVICE")) {
    selector = env;
  }
  const uint32_t chosen = select_device(all, selector);
  physical_ = physical[chosen];
  caps_ = std::move(all[chosen]);
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

  const ExtensionList extensions(physical_);
  const std::vector<const char*> enabled = wanted_device_extensions(caps_.api_version, extensions);
  FeatureChain features(caps_.api_version, extensions);
  features.query(physical_);
  features.drop_costly_features();
  pipeline_statistics_ =
      options.pipeline_statistics.value_or(support::env_switch("MN_PIPELINE_STATISTICS", false));
  if (pipeline_statistics_ && !features.executable_properties.pipelineExecutableInfo) {
    throw DeviceError("pipeline statistics (MN_PIPELINE_STATISTICS) were asked for, but '" +
                      caps_.name + "' does not offer VK_KHR_pipeline_executable_properties");
  }
  // Enabled only when asked: a driver may keep more of each pipeline while it is.
  features.executable_properties.pipelineExecutableInfo = pipeline_statistics_ ? VK_TRUE : VK_FALSE;

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue_info.queueFamilyIndex = caps_.compute.queue_family;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;

  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.pNext = &features.core;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue_info;
  info.enabledExtensionCount = static_cast<uint32_t>(enabled.size());
  info.ppEnabledExtensionNames = enabled.data();
  check(vkCreateDevice(physical_, &info, nullptr, &device_), "vkCreateDevice");
  vkGetDeviceQueue(device_, caps_.compute.queue_family, 0, &queue_);

  try {
    VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = caps_.compute.queue_family;
    check(vkCreateCommandPool(device_, &pool_info, nullptr, &command_pool_), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = command_pool_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device_, &alloc, &one_off_), "vkAllocateCommandBuffers");
    cache_dir_ = options.cache_dir.value_or(default_cache_dir());
    if (options.persistent_pipeline_cache) {
      pipeline_cache_ = std::make_unique<PipelineCache>(*this, PipelineCache::default_path(*this));
    }
    check_validation("device creation");
  } catch (...) {
    destroy();
    throw;
  }
}

Device::~Device() { destroy(); }

void Device::destroy() {
  if (device_ == VK_NULL_HANDLE) return;
  vkDeviceWaitIdle(device_);
  pipeline_cache_.reset();  // saves to disk
  for (const CommandSlot& s : free_slots_) vkDestroyCommandPool(device_, s.pool, nullptr);
  free_slots_.clear();
  vkDestroyCommandPool(device_, command_pool_, nullptr);  // frees one_off_
  vkDestroyDevice(device_, nullptr);
  device_ = VK_NULL_HANDLE;
}

uint32_t Device::find_memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                                  VkMemoryPropertyFlags preferred) const {
  uint32_t fallback = UINT32_MAX;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags flags = memory_.memoryTypes[i].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return i;
    if (fallback == UINT32_MAX) fallback = i;
  }
  return fallback;
}

VkMemoryPropertyFlags Device::memory_type_flags(uint32_t type) const {
  return type < memory_.memoryTypeCount ? memory_.memoryTypes[type].propertyFlags : 0;
}

void Device::check_validation(std::string_view where) {
  if (instance_->validation_enabled()) instance_->validation_log().check(where);
}

void Device::submit(const VkSubmitInfo& info, VkFence fence, std::string_view what) {
  std::lock_guard lock(submit_mutex_);
  const VkResult result = vkQueueSubmit(queue_, 1, &info, fence);
  if (result != VK_SUCCESS) throw_vk_error(result, "vkQueueSubmit (" + std::string(what) + ")");
}

void Device::run_commands(const std::function<void(VkCommandBuffer)>& record,
                          std::string_view what) {
  // The pool, and the command buffer while recording, is used by one thread at a time.
  std::lock_guard lock(pool_mutex_);
  VkCommandBuffer cmd = one_off_;
  VkFence fence = VK_NULL_HANDLE;
  auto cleanup = [&] {
    if (fence != VK_NULL_HANDLE) vkDestroyFence(device_, fence, nullptr);
  };
  try {
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer");  // resets it
    record(cmd);
    check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(vkCreateFence(device_, &fence_info, nullptr, &fence), "vkCreateFence");
    VkSubmitInfo submit_info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit_info.commandBufferCount = 1;
    submit_info.pCommandBuffers = &cmd;
    submit(submit_info, fence, what);
    check(vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  } catch (...) {
    vkQueueWaitIdle(queue_);
    cleanup();
    throw;
  }
  cleanup();
  check_validation(what);
}

Device::CommandSlot Device::acquire_command_slot() {
  {
    std::lock_guard lock(slots_mutex_);
    if (!free_slots_.empty()) {
      const CommandSlot s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
  }
  CommandSlot s;
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.queueFamilyIndex = queue_family();
  check(vkCreateCommandPool(device_, &pool_info, nullptr, &s.pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = s.pool;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  const VkResult result = vkAllocateCommandBuffers(device_, &alloc, &s.buffer);
  if (result != VK_SUCCESS) {
    vkDestroyCommandPool(device_, s.pool, nullptr);
    check(result, "vkAllocateCommandBuffers");
  }
  return s;
}

void Device::release_command_slot(CommandSlot slot) {
  if (vkResetCommandPool(device_, slot.pool, 0) != VK_SUCCESS) {
    vkDestroyCommandPool(device_, slot.pool, nullptr);  // not reusable: let it go
    return;
  }
  std::lock_guard lock(slots_mutex_);
  free_slots_.push_back(slot);
}

PFN_vkVoidFunction Device::proc(const char* name) const {
  return vkGetDeviceProcAddr(device_, name);
}

}  // namespace mn::vk
