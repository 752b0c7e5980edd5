#include "vulkan/arena.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include <meganeura/error.h>

#include "vulkan/device.h"

namespace mn::vk {
namespace {

constexpr VkBufferUsageFlags kArenaUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                           VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                           VK_BUFFER_USAGE_TRANSFER_DST_BIT;
constexpr uint64_t kStagingBlock = 64ull << 20;

// Orders the copies after whatever earlier submissions did with the arena.
void wait_for_earlier_work(VkCommandBuffer cmd) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

std::string bytes_text(uint64_t offset, uint64_t size) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) + ")";
}

}  // namespace

Arena::Arena(Device& device, uint64_t bytes, ArenaOptions options)
    : device_(device), id_(next_resource_id()) {
  if (bytes == 0) throw Error("cannot create an empty arena");
  const auto& caps = device.capabilities();
  alignment_ = std::max<uint64_t>(4, caps.buffers.min_storage_buffer_offset_alignment);
  // vkCmdFillBuffer and 32-bit shader access want whole words.
  size_ = (bytes + 3) / 4 * 4;

  const uint64_t limit =
      std::min({caps.buffers.max_storage_buffer_range, caps.buffers.max_memory_allocation_bytes,
                caps.buffers.max_buffer_bytes});
  if (limit < alignment_) throw DeviceError("the device reports a storage buffer range below 4 B");
  const uint64_t largest = std::bit_floor(limit);
  chunk_bytes_ = largest;
  if (options.chunk_bytes != 0) {
    if (!std::has_single_bit(options.chunk_bytes) || options.chunk_bytes > largest ||
        options.chunk_bytes % alignment_ != 0) {
      throw Error("ArenaOptions::chunk_bytes " + std::to_string(options.chunk_bytes) +
                  " must be a power of two, a multiple of " + std::to_string(alignment_) +
                  " and at most " + std::to_string(largest));
    }
    chunk_bytes_ = options.chunk_bytes;
  }
  chunk_shift_ = static_cast<uint32_t>(std::countr_zero(chunk_bytes_));

  using HostAccess = ArenaOptions::HostAccess;
  bool mappable = false;
  switch (options.host_access) {
    case HostAccess::never:
      break;
    case HostAccess::required:
      mappable = true;
      break;
    case HostAccess::automatic:
      mappable = caps.memory.host_visible_device_local_bytes >= size_;
      break;
  }
  auto allocate = [&](MemoryKind kind) {
    chunks_.clear();
    for (uint64_t start = 0; start < size_; start += chunk_bytes_) {
      const uint64_t n = std::min(chunk_bytes_, size_ - start);
      chunks_.push_back(std::make_unique<Buffer>(device, n, kArenaUsage, kind, options.exportable));
    }
  };
  if (mappable) {
    try {
      allocate(MemoryKind::device_local_mappable);
      host_mapped_ = true;
    } catch (const DeviceError&) {
      // The BAR may be smaller than its heap suggests or already used by others.
      if (options.host_access == HostAccess::required) throw;
    }
  }
  if (!host_mapped_) allocate(MemoryKind::device_local);
  reads_cached_ = host_mapped_ && !options.uncached_reads &&
                  std::all_of(chunks_.begin(), chunks_.end(),
                              [](const auto& c) { return c->host_cached(); });
}

bool Arena::placement_ok(uint64_t offset, uint64_t size) const {
  if (size == 0 || offset > size_ || size > size_ - offset) return false;
  if (offset % alignment_ != 0) return false;
  const bool one_chunk = (offset >> chunk_shift_) == ((offset + size - 1) >> chunk_shift_);
  return one_chunk || offset % chunk_bytes_ == 0;
}

Range Arena::range(uint64_t offset, uint64_t size) const {
  if (placement_ok(offset, size)) return Range{this, offset, size};
  std::string why;
  if (size == 0) {
    why = "the range is empty";
  } else if (offset > size_ || size > size_ - offset) {
    why = "the arena has " + std::to_string(size_) + " bytes";
  } else if (offset % alignment_ != 0) {
    why = "the offset is not a multiple of the binding alignment " + std::to_string(alignment_);
  } else {
    why = "it crosses a chunk boundary (chunks of " + std::to_string(chunk_bytes_) +
          " bytes) without starting on one";
  }
  throw Error("arena " + bytes_text(offset, size) + " cannot be bound: " + why);
}

Range Arena::all() const {
  // The whole arena starts at a chunk boundary, so it always satisfies the rule.
  return Range{this, 0, size_};
}

std::vector<RangePiece> Arena::pieces(uint64_t offset, uint64_t size) const {
  check_bounds(offset, size, "pieces");
  std::vector<RangePiece> out;
  uint64_t at = offset;
  while (at < offset + size) {
    const uint32_t chunk = static_cast<uint32_t>(at >> chunk_shift_);
    const uint64_t within = at & (chunk_bytes_ - 1);
    const uint64_t n = std::min(chunk_bytes_ - within, offset + size - at);
    out.push_back({chunk, within, n, at - offset});
    at += n;
  }
  return out;
}

uint32_t Arena::descriptor_count(const Range& r) const {
  return static_cast<uint32_t>(((r.end() - 1) >> chunk_shift_) - (r.offset >> chunk_shift_) + 1);
}

void Arena::check_bounds(uint64_t offset, uint64_t size, const char* what) const {
  if (offset > size_ || size > size_ - offset) {
    throw Error(std::string("Arena::") + what + ": " + bytes_text(offset, size) +
                " exceed the arena's " + std::to_string(size_) + " bytes");
  }
}

void Arena::write(uint64_t offset, std::span<const std::byte> bytes) {
  check_bounds(offset, bytes.size(), "write");
  if (bytes.empty()) return;
  if (host_mapped_) {
    for (const RangePiece& p : pieces(offset, bytes.size())) {
      chunks_[p.chunk]->write(p.offset, bytes.subspan(p.range_offset, p.size));
    }
    return;
  }
  StagingBuffer staging(device_, std::min<uint64_t>(kStagingBlock, bytes.size()));
  for (uint64_t done = 0; done < bytes.size(); done += staging.size()) {
    const uint64_t n = std::min<uint64_t>(staging.size(), bytes.size() - done);
    staging.write(0, bytes.subspan(done, n));
    device_.run_commands(
        [&](VkCommandBuffer cmd) {
          wait_for_earlier_work(cmd);
          for (const RangePiece& p : pieces(offset + done, n)) {
            VkBufferCopy region{p.range_offset, p.offset, p.size};
            vkCmdCopyBuffer(cmd, staging.handle(), chunks_[p.chunk]->handle(), 1, &region);
          }
        },
        "Arena::write");
  }
}

void Arena::read(uint64_t offset, std::span<std::byte> bytes) const {
  check_bounds(offset, bytes.size(), "read");
  if (bytes.empty()) return;
  // A few uncached bus round trips cost less than a submission and its wait (~1 ms).
  if (host_reads_cached() || (host_mapped_ && bytes.size() <= kDirectReadBytes)) {
    for (const RangePiece& p : pieces(offset, bytes.size())) {
      chunks_[p.chunk]->read(p.offset, bytes.subspan(p.range_offset, p.size));
    }
    return;
  }
  StagingBuffer staging(device_, std::min<uint64_t>(kStagingBlock, bytes.size()), true);
  for (uint64_t done = 0; done < bytes.size(); done += staging.size()) {
    const uint64_t n = std::min<uint64_t>(staging.size(), bytes.size() - done);
    device_.run_commands(
        [&](VkCommandBuffer cmd) {
          wait_for_earlier_work(cmd);
          for (const RangePiece& p : pieces(offset + done, n)) {
            VkBufferCopy region{p.offset, p.range_offset, p.size};
            vkCmdCopyBuffer(cmd, chunks_[p.chunk]->handle(), staging.handle(), 1, &region);
          }
          VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
          to_host.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
          to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
          vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                               1, &to_host, 0, nullptr, 0, nullptr);
        },
        "Arena::read");
    staging.read(0, bytes.subspan(done, n));
  }
}

}  // namespace mn::vk
