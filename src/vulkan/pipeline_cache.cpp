#include "vulkan/pipeline_cache.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "vulkan/cache_dir.h"
#include "vulkan/check.h"
#include "vulkan/device.h"

namespace mn::vk {
namespace {

bool header_matches(const std::vector<std::byte>& data, const DeviceCapabilities& caps) {
  VkPipelineCacheHeaderVersionOne header{};
  if (data.size() < sizeof header) return false;
  std::memcpy(&header, data.data(), sizeof header);
  return header.headerSize >= sizeof header &&
         header.headerVersion == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
         header.vendorID == caps.vendor_id && header.deviceID == caps.device_id &&
         std::memcmp(header.pipelineCacheUUID, caps.pipeline_cache_uuid.data(), VK_UUID_SIZE) == 0;
}

}  // namespace

std::filesystem::path PipelineCache::default_path(const Device& device) {
  const auto& caps = device.capabilities();
  char name[96];
  int n = std::snprintf(name, sizeof name, "%04x-%04x-", caps.vendor_id, caps.device_id);
  for (uint8_t byte : caps.pipeline_cache_uuid) {
    n += std::snprintf(name + n, sizeof name - n, "%02x", byte);
  }
  return device.cache_dir() / "pipelines" / (std::string(name) + ".bin");
}

PipelineCache::PipelineCache(Device& device, std::filesystem::path file)
    : device_(device), file_(std::move(file)) {
  std::optional<std::vector<std::byte>> data = read_file(file_);
  VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  if (data) {
    if (header_matches(*data, device.capabilities())) {
      info.initialDataSize = data->size();
      info.pInitialData = data->data();
    } else {
      rejected_ = true;
    }
  }
  VkResult result = vkCreatePipelineCache(device.handle(), &info, nullptr, &cache_);
  if (result != VK_SUCCESS && info.initialDataSize != 0) {
    // A driver may refuse data it wrote itself under another build; start empty then.
    rejected_ = true;
    info.initialDataSize = 0;
    info.pInitialData = nullptr;
    result = vkCreatePipelineCache(device.handle(), &info, nullptr, &cache_);
  }
  check(result, "vkCreatePipelineCache");
  loaded_bytes_ = info.initialDataSize;
}

PipelineCache::~PipelineCache() {
  try {
    if (dirty_) save();
  } catch (...) {
    // A cache that cannot be written only costs compile time at the next start.
  }
  vkDestroyPipelineCache(device_.handle(), cache_, nullptr);
}

void PipelineCache::mark_dirty() {
  std::lock_guard lock(mutex_);
  dirty_ = true;
}

void PipelineCache::save() {
  std::lock_guard lock(mutex_);
  size_t size = 0;
  check(vkGetPipelineCacheData(device_.handle(), cache_, &size, nullptr), "vkGetPipelineCacheData");
  std::vector<std::byte> data(size);
  if (size > 0) {
    // VK_INCOMPLETE: pipelines were added meanwhile; what was written is still a valid cache.
    const VkResult result = vkGetPipelineCacheData(device_.handle(), cache_, &size, data.data());
    if (result != VK_INCOMPLETE) check(result, "vkGetPipelineCacheData");
    data.resize(size);
  }
  write_file_atomic(file_, data);
  dirty_ = false;
}

}  // namespace mn::vk
