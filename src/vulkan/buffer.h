#pragma once
// One VkBuffer with its own memory: staging buffers, and the pieces of an Arena.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <vulkan/vulkan.h>

namespace mn::vk {

class Device;

enum class MemoryKind {
  device_local,           // fastest for the GPU; the host cannot map it
  device_local_mappable,  // device-local and host-visible (resizable BAR, unified memory)
  upload,                 // host-visible, write-combined is fine: the host only writes
  readback,               // host-visible, cached where possible: the host reads it
};

class Buffer {
 public:
  // Throws mn::DeviceError if no memory type of this kind exists or allocation fails.
  // `exportable`: a dedicated allocation that export_fd() hands to another API (CUDA), or a
  // DeviceError where the device has no VK_KHR_external_memory_fd.
  Buffer(Device& device, uint64_t bytes, VkBufferUsageFlags usage, MemoryKind kind,
         bool exportable = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  uint64_t size() const { return size_; }
  MemoryKind kind() const { return kind_; }
  // Identifies the buffer for hazard tracking (unique in the process).
  uint64_t id() const { return id_; }
  // Host pointer to byte 0; nullptr for device_local memory.
  std::byte* mapped() const { return mapped_; }
  // Whether the host's reads of the mapping are cached (HOST_CACHED memory). A discrete GPU's
  // device-local memory mapped through the BAR is not: each read crosses the bus, uncached.
  bool host_cached() const { return cached_; }
  // The allocation's size (at least size()): what an importing API maps.
  uint64_t allocation_size() const { return allocation_size_; }
  bool exportable() const { return exportable_; }
  // A new file descriptor of the memory (VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT), owned
  // by the caller until an importing API takes it; mn::DeviceError unless exportable().
  int export_fd() const;
  // Runs `hook` when the buffer is destroyed, before its memory is freed: an API that imported
  // the memory lets go of it there.
  void on_destroy(std::function<void()> hook) const { destroy_hooks_.push_back(std::move(hook)); }
  Device& device() const { return device_; }

  // Host access through the mapping, with the flush/invalidate non-coherent memory needs.
  // Out-of-range access throws mn::Error.
  void write(uint64_t offset, std::span<const std::byte> bytes);
  void read(uint64_t offset, std::span<std::byte> bytes) const;

 private:
  void sync(uint64_t offset, uint64_t bytes, bool flush) const;

  Device& device_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  uint64_t size_ = 0;
  uint64_t allocation_size_ = 0;
  MemoryKind kind_;
  uint64_t id_ = 0;
  std::byte* mapped_ = nullptr;
  bool coherent_ = true;
  bool cached_ = false;
  bool exportable_ = false;
  mutable std::vector<std::function<void()>> destroy_hooks_;
};

// Host-visible memory for uploads and readbacks; usable as copy source and destination.
class StagingBuffer : public Buffer {
 public:
  StagingBuffer(Device& device, uint64_t bytes, bool readback = false);
};

// A process-wide unique id for buffers and arenas.
uint64_t next_resource_id();

}  // namespace mn::vk
