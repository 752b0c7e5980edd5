#pragma once
// One device-local address space in which the memory planner places tensors by offset.
//
// A storage-buffer descriptor can address at most maxStorageBufferRange bytes (lavapipe:
// 128 MiB), so the arena is made of chunks: separate VkBuffers of chunk_bytes() each (a power
// of two, at most that limit; the last chunk may be shorter). Placement rule for the planner:
//   a range either lies inside one chunk, or starts at a chunk boundary.
// A range inside one chunk is bound with one descriptor. A range that starts at a chunk
// boundary and is longer than a chunk is bound as an array of descriptors, one per chunk, so a
// kernel reaches byte b of it as element (b & (chunk_bytes - 1)) of descriptor
// (b >> log2(chunk_bytes)). Copies (uploads, readbacks) accept any range and split themselves.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "vulkan/buffer.h"

namespace mn::vk {

class Arena;

// A byte range of an arena, as created by Arena::range (which checks the placement rule).
struct Range {
  const Arena* arena = nullptr;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t end() const { return offset + size; }
};

// The part of a range that falls in one chunk.
struct RangePiece {
  uint32_t chunk = 0;
  uint64_t offset = 0;  // within the chunk
  uint64_t size = 0;
  uint64_t range_offset = 0;  // of this piece's first byte, from the start of the range
};

struct ArenaOptions {
  enum class HostAccess {
    automatic,  // map it directly when the device has resizable BAR or unified memory
    never,      // plain device-local memory (benchmarks; memory the host never touches)
    required,   // host-visible device-local memory or an error
  };
  HostAccess host_access = HostAccess::automatic;
  // 0: the largest power of two the device allows. Smaller values (powers of two, multiples of
  // the binding alignment) exercise the split-binding path on large-limit devices.
  uint64_t chunk_bytes = 0;
  // Read a mapped arena through copies even where the mapping's reads are cached, as on a
  // discrete GPU's BAR (tests of that path on lavapipe).
  bool uncached_reads = false;
  // Memory another API imports (Buffer::export_fd): NCCL's in-place all-reduce of gradients.
  bool exportable = false;
};

class Arena {
 public:
  Arena(Device& device, uint64_t bytes, ArenaOptions options = {});
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Device& device() const { return device_; }
  uint64_t size() const { return size_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint32_t chunk_shift() const { return chunk_shift_; }
  uint32_t chunk_count() const { return static_cast<uint32_t>(chunks_.size()); }
  const Buffer& chunk(uint32_t i) const { return *chunks_[i]; }
  // Offsets of bound ranges must be multiples of this (minStorageBufferOffsetAlignment).
  uint64_t alignment() const { return alignment_; }
  // True when the host writes and reads the arena directly (no staging copy needed).
  bool host_mapped() const { return host_mapped_; }
  // True when, besides, the host's reads of the mapping are cached (system memory: lavapipe,
  // integrated GPUs). A discrete GPU's BAR is written fast (write-combined) but read a bus
  // round trip at a time: megabytes take tens of milliseconds, so reads go through a copy.
  bool host_reads_cached() const { return host_mapped_ && reads_cached_; }
  // Reads up to this size go through a mapping even where its reads are uncached (a decoding
  // step's sampled ids): a few bus round trips cost less than a copy's submission and wait.
  static constexpr uint64_t kDirectReadBytes = 4096;
  uint64_t id() const { return id_; }

  // Whether [offset, offset+size) may be bound (see the placement rule above).
  bool placement_ok(uint64_t offset, uint64_t size) const;
  // A checked range: mn::Error if empty, out of bounds, misaligned or against the rule.
  Range range(uint64_t offset, uint64_t size) const;
  Range all() const;
  // Any byte range (not necessarily bindable) split at chunk boundaries.
  std::vector<RangePiece> pieces(uint64_t offset, uint64_t size) const;
  std::vector<RangePiece> pieces(const Range& r) const { return pieces(r.offset, r.size); }
  // Number of descriptors a binding of this range needs.
  uint32_t descriptor_count(const Range& r) const;

  // Host access for setup and tests: through the mapping when host_mapped() (reads: when
  // host_reads_cached() or at most kDirectReadBytes), else through a temporary staging buffer
  // and a one-off submission.
  // Steps record their own copies instead.
  void write(uint64_t offset, std::span<const std::byte> bytes);
  void read(uint64_t offset, std::span<std::byte> bytes) const;

 private:
  void check_bounds(uint64_t offset, uint64_t size, const char* what) const;

  Device& device_;
  uint64_t size_ = 0;
  uint64_t chunk_bytes_ = 0;
  uint32_t chunk_shift_ = 0;
  uint64_t alignment_ = 1;
  bool host_mapped_ = false;
  bool reads_cached_ = false;
  uint64_t id_ = 0;
  std::vector<std::unique_ptr<Buffer>> chunks_;
};

}  // namespace mn::vk
