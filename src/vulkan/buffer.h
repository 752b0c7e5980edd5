#pragma once
// One VkBuffer with its own memory: staging buffers, and the pieces of an Arena.
#include <cstddef>
#include <cstdint>
#include <span>

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
  Buffer(Device& device, uint64_t bytes, VkBufferUsageFlags usage, MemoryKind kind);
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
};

// Host-visible memory for uploads and readbacks; usable as copy source and destination.
class StagingBuffer : public Buffer {
 public:
  StagingBuffer(Device& device, uint64_t bytes, bool readback = false);
};

// A process-wide unique id for buffers and arenas.
uint64_t next_resource_id();

}  // namespace mn::vk
