#pragma once
// A VkPipelineCache saved in the cache folder and reloaded by the next process, so that drivers
// that compile SPIR-V to machine code (NVIDIA, AMD, Intel) do it once.
#include <cstddef>
#include <filesystem>
#include <mutex>

#include <vulkan/vulkan.h>

namespace mn::vk {

class Device;

class PipelineCache {
 public:
  // Loads `file` when it exists and was written by the same device and driver (the header's
  // vendor, device and pipelineCacheUUID match); anything else starts an empty cache.
  PipelineCache(Device& device, std::filesystem::path file);
  ~PipelineCache();  // saves if pipelines were created; never throws
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  // <cache dir>/pipelines/<vendor>-<device>-<pipelineCacheUUID>.bin
  static std::filesystem::path default_path(const Device& device);

  VkPipelineCache handle() const { return cache_; }
  const std::filesystem::path& file() const { return file_; }
  // Bytes of initial data taken from the file (0: started empty).
  size_t loaded_bytes() const { return loaded_bytes_; }
  // The file existed but belonged to another device or driver, or was damaged.
  bool rejected_file() const { return rejected_; }

  void mark_dirty();
  // Writes the cache (temporary file + rename). Throws mn::Error on failure.
  void save();

 private:
  Device& device_;
  std::filesystem::path file_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  size_t loaded_bytes_ = 0;
  bool rejected_ = false;
  bool dirty_ = false;
  std::mutex mutex_;
};

}  // namespace mn::vk
