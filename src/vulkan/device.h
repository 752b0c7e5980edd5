#pragma once
// The logical device: chosen physical device, one compute queue, command pools (one for
// one-off submissions, and recycled ones for recordings), the persistent pipeline cache and
// the validation log.
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <vulkan/vulkan.h>

#include "vulkan/capabilities.h"
#include "vulkan/instance.h"

namespace mn::vk {

class PipelineCache;

struct DeviceOptions {
  // A device index or a case-insensitive substring of its name; unset: $MN_DEVICE, and if that
  // is unset too, the first discrete GPU, else integrated, else virtual, else CPU (lavapipe);
  // in a multi-process job, the local rank's device of that kind (select_device).
  std::optional<std::string> selector;
  std::optional<bool> validation;                  // unset: $MN_VALIDATION
  std::optional<std::filesystem::path> cache_dir;  // unset: default_cache_dir()
  bool persistent_pipeline_cache = true;
  // Kernels' statistics as the driver reports them (registers, ...; Pipeline::statistics), for
  // profiles. Unset: $MN_PIPELINE_STATISTICS. Asked of a device without
  // VK_KHR_pipeline_executable_properties: mn::DeviceError.
  std::optional<bool> pipeline_statistics;
};

// Picks from `devices` as DeviceOptions::selector describes (empty: by type preference, and
// in a process of a multi-process job, local_rank() modulo the devices of the preferred type).
// No usable match: mn::DeviceError listing every device.
uint32_t select_device(const std::vector<DeviceCapabilities>& devices, std::string_view selector);

// This process's rank among the job's processes on this node, when a launcher says it
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, LOCAL_RANK); a value that is
// not a rank is an mn::DeviceError naming the variable.
std::optional<int> local_rank();

// One line per device: "0: NVIDIA H200 (discrete, NVIDIA, Vulkan 1.4.312)".
std::string describe_devices(const std::vector<DeviceCapabilities>& devices);

class Device {
 public:
  explicit Device(const DeviceOptions& options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceCapabilities& capabilities() const { return caps_; }
  VkDevice handle() const { return device_; }
  VkPhysicalDevice physical_device() const { return physical_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return caps_.compute.queue_family; }
  Instance& instance() { return *instance_; }
  const std::filesystem::path& cache_dir() const { return cache_dir_; }
  // Null when DeviceOptions::persistent_pipeline_cache is false.
  PipelineCache* pipeline_cache() { return pipeline_cache_.get(); }

  // A memory type allowed by `type_bits` with all `required` flags, preferring one that also
  // has the `preferred` flags; UINT32_MAX if none.
  uint32_t find_memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                            VkMemoryPropertyFlags preferred = 0) const;
  VkMemoryPropertyFlags memory_type_flags(uint32_t type) const;

  bool validation_enabled() const { return instance_->validation_enabled(); }
  // DeviceOptions::pipeline_statistics: pipelines capture their statistics.
  bool pipeline_statistics() const { return pipeline_statistics_; }
  size_t validation_message_count() const { return instance_->validation_log().count(); }
  std::vector<std::string> validation_messages() const {
    return instance_->validation_log().messages();
  }
  // With validation on, throws mn::DeviceError if the layer reported anything since the last
  // check; `where` names the operation in the message.
  void check_validation(std::string_view where);

  // vkQueueSubmit, serialized: a VkQueue must not be used from two threads at once.
  void submit(const VkSubmitInfo& info, VkFence fence, std::string_view what);
  // Records commands into the device's one-off command buffer, submits it and waits (uploads,
  // tests).
  void run_commands(const std::function<void(VkCommandBuffer)>& record, std::string_view what);

  // A command pool with its one primary command buffer, for one Recording at a time. Pools are
  // recycled: taken from the device's free list (or made when it is empty) and given back
  // reset once their last submission completed. Sessions come and go by the thousand, and
  // allocating command buffers costs time, and with Debian 12's validation layer (1.3.239)
  // about 3 KB per command buffer that is never freed (KhronosGroup/Vulkan-ValidationLayers
  // issue 6033); re-recording a reset one costs neither.
  struct CommandSlot {
    VkCommandPool pool = VK_NULL_HANDLE;
    VkCommandBuffer buffer = VK_NULL_HANDLE;
  };
  CommandSlot acquire_command_slot();
  void release_command_slot(CommandSlot slot);

  // Entry point of a device-level extension function (nullptr if absent).
  PFN_vkVoidFunction proc(const char* name) const;

 private:
  void destroy();

  std::shared_ptr<Instance> instance_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  DeviceCapabilities caps_;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer one_off_ = VK_NULL_HANDLE;  // run_commands', reset before each use
  bool pipeline_statistics_ = false;
  std::mutex submit_mutex_;
  std::mutex pool_mutex_;
  std::vector<CommandSlot> free_slots_;  // guarded by slots_mutex_
  std::mutex slots_mutex_;
  std::filesystem::path cache_dir_;
  std::unique_ptr<PipelineCache> pipeline_cache_;
};

}  // namespace mn::vk
