#include "vulkan/buffer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include <meganeura/error.h>

#include "vulkan/check.h"
#include "vulkan/device.h"
#include "vulkan/live_objects.h"

namespace mn::vk {
namespace {

const char* kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::device_local:
      return "device-local";
    case MemoryKind::device_local_mappable:
      return "host-visible device-local";
    case MemoryKind::upload:
      return "upload staging";
    case MemoryKind::readback:
      return "readback staging";
  }
  return "?";
}

}  // namespace

uint64_t next_resource_id() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

Buffer::Buffer(Device& device, uint64_t bytes, VkBufferUsageFlags usage, MemoryKind kind,
               bool exportable)
    : device_(device), size_(bytes), kind_(kind), id_(next_resource_id()), exportable_(exportable) {
  if (bytes == 0) throw Error("cannot create an empty Vulkan buffer");
  if (exportable && !device.capabilities().external_memory_fd) {
    throw DeviceError("device '" + device.capabilities().name +
                      "' cannot export memory to other APIs (no VK_KHR_external_memory_fd)");
  }
  constexpr auto kOpaqueFd = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  external.handleTypes = kOpaqueFd;
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  if (exportable) info.pNext = &external;
  info.size = bytes;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device.handle(), &info, nullptr, &buffer_), "vkCreateBuffer");

  VkMemoryRequirements req{};
  vkGetBufferMemoryRequirements(device.handle(), buffer_, &req);
  constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  uint32_t type = UINT32_MAX;
  switch (kind) {
    case MemoryKind::device_local:
      type = device.find_memory_type(req.memoryTypeBits, kLocal);
      break;
    case MemoryKind::device_local_mappable:
      type = device.find_memory_type(req.memoryTypeBits, kLocal | kHost,
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
      break;
    case MemoryKind::upload:
      type =
          device.find_memory_type(req.memoryTypeBits, kHost, VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
      break;
    case MemoryKind::readback:
      type = device.find_memory_type(req.memoryTypeBits, kHost, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
      break;
  }
  if (type == UINT32_MAX) {
    vkDestroyBuffer(device.handle(), buffer_, nullptr);
    throw DeviceError(std::string("the device has no ") + kind_name(kind) + " memory type");
  }
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  allocation_size_ = req.size;
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = type;
  // Exported memory is a dedicated allocation: CUDA imports it as one
  // (CUDA_EXTERNAL_MEMORY_DEDICATED), whatever the driver would otherwise require.
  VkExportMemoryAllocateInfo export_info{VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO};
  export_info.handleTypes = kOpaqueFd;
  VkMemoryDedicatedAllocateInfo dedicated{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
  dedicated.buffer = buffer_;
  if (exportable) {
    alloc.pNext = &export_info;
    export_info.pNext = &dedicated;
  }
  VkResult result = vkAllocateMemory(device.handle(), &alloc, nullptr, &memory_);
  if (result != VK_SUCCESS) {
    vkDestroyBuffer(device.handle(), buffer_, nullptr);
    throw_vk_error(result, "vkAllocateMemory (" + std::to_string(bytes) + " bytes of " +
                               kind_name(kind) + " memory)");
  }
  result = vkBindBufferMemory(device.handle(), buffer_, memory_, 0);
  if (result == VK_SUCCESS && kind != MemoryKind::device_local) {
    void* pointer = nullptr;
    result = vkMapMemory(device.handle(), memory_, 0, VK_WHOLE_SIZE, 0, &pointer);
    mapped_ = static_cast<std::byte*>(pointer);
    coherent_ = device.memory_type_flags(type) & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    cached_ = device.memory_type_flags(type) & VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  }
  if (result != VK_SUCCESS) {
    vkFreeMemory(device.handle(), memory_, nullptr);
    vkDestroyBuffer(device.handle(), buffer_, nullptr);
    throw_vk_error(result, "vkBindBufferMemory/vkMapMemory");
  }
  count_live(&LiveObjects::buffers, 1);
  count_live(&LiveObjects::memory_bytes, static_cast<int64_t>(allocation_size_));
}

Buffer::~Buffer() {
  for (auto& hook : destroy_hooks_) hook();
  count_live(&LiveObjects::buffers, -1);
  count_live(&LiveObjects::memory_bytes, -static_cast<int64_t>(allocation_size_));
  if (mapped_) vkUnmapMemory(device_.handle(), memory_);
  vkDestroyBuffer(device_.handle(), buffer_, nullptr);
  vkFreeMemory(device_.handle(), memory_, nullptr);
}

int Buffer::export_fd() const {
  if (!exportable_) throw DeviceError("Buffer::export_fd: the buffer was not made exportable");
  auto get_fd = reinterpret_cast<PFN_vkGetMemoryFdKHR>(device_.proc("vkGetMemoryFdKHR"));
  if (!get_fd) throw DeviceError("the device has no vkGetMemoryFdKHR");
  VkMemoryGetFdInfoKHR info{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
  info.memory = memory_;
  info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  int fd = -1;
  check(get_fd(device_.handle(), &info, &fd), "vkGetMemoryFdKHR");
  return fd;
}

void Buffer::sync(uint64_t offset, uint64_t bytes, bool flush) const {
  if (coherent_ || bytes == 0) return;
  // Non-coherent ranges must be aligned to nonCoherentAtomSize.
  const uint64_t atom =
      std::max<uint64_t>(1, device_.capabilities().buffers.non_coherent_atom_size);
  const uint64_t begin = offset / atom * atom;
  const uint64_t end = (offset + bytes + atom - 1) / atom * atom;
  VkMappedMemoryRange range{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
  range.memory = memory_;
  range.offset = begin;
  range.size = end - begin;
  if (end >= allocation_size_) range.size = VK_WHOLE_SIZE;
  if (flush) {
    check(vkFlushMappedMemoryRanges(device_.handle(), 1, &range), "vkFlushMappedMemoryRanges");
  } else {
    check(vkInvalidateMappedMemoryRanges(device_.handle(), 1, &range),
          "vkInvalidateMappedMemoryRanges");
  }
}

void Buffer::write(uint64_t offset, std::span<const std::byte> bytes) {
  if (!mapped_) throw Error("Buffer::write: the buffer is not host-visible");
  if (offset > size_ || bytes.size() > size_ - offset) {
    throw Error("Buffer::write: bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + bytes.size()) + ") exceed the buffer's " +
                std::to_string(size_) + " bytes");
  }
  if (!bytes.empty()) std::memcpy(mapped_ + offset, bytes.data(), bytes.size());
  sync(offset, bytes.size(), true);
}

void Buffer::read(uint64_t offset, std::span<std::byte> bytes) const {
  if (!mapped_) throw Error("Buffer::read: the buffer is not host-visible");
  if (offset > size_ || bytes.size() > size_ - offset) {
    throw Error("Buffer::read: bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + bytes.size()) + ") exceed the buffer's " +
                std::to_string(size_) + " bytes");
  }
  sync(offset, bytes.size(), false);
  if (!bytes.empty()) std::memcpy(bytes.data(), mapped_ + offset, bytes.size());
}

StagingBuffer::StagingBuffer(Device& device, uint64_t bytes, bool readback)
    : Buffer(device, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
             readback ? MemoryKind::readback : MemoryKind::upload) {}

}  // namespace mn::vk
