#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <meganeura/error.h>

#include "vulkan/arena.h"
#include "vulkan/recording.h"
#include "vulkan_test.h"

namespace mn::vk {
namespace {

using testing::bytes_of;
using testing::random_words;
using testing::writable_bytes_of;

class Memory : public testing::VulkanTest {};

constexpr uint64_t kMiB = 1ull << 20;

TEST_F(Memory, ArenaChunksFollowTheStorageBufferLimit) {
  const uint64_t limit = device().capabilities().buffers.max_storage_buffer_range;
  ArenaOptions options;
  options.chunk_bytes = 1 * kMiB;  // small chunks exercise the rule on any device
  Arena arena(device(), 3 * kMiB + 100, options);
  EXPECT_EQ(arena.chunk_bytes(), kMiB);
  EXPECT_EQ(arena.chunk_shift(), 20u);
  EXPECT_EQ(arena.chunk_count(), 4u);
  EXPECT_EQ(arena.size(), 3 * kMiB + 100);
  EXPECT_LE(arena.chunk_bytes(), limit);

  EXPECT_TRUE(arena.placement_ok(0, kMiB));               // one whole chunk
  EXPECT_TRUE(arena.placement_ok(kMiB - 256, 256));       // inside the first chunk
  EXPECT_TRUE(arena.placement_ok(kMiB, 2 * kMiB + 100));  // starts on a boundary, spans 3
  EXPECT_FALSE(arena.placement_ok(kMiB - 256, 512));      // straddles a boundary
  EXPECT_FALSE(arena.placement_ok(0, 0));
  EXPECT_FALSE(arena.placement_ok(3 * kMiB, 200));  // past the end
  EXPECT_THROW(arena.range(kMiB - 256, 512), Error);
  EXPECT_THROW(arena.range(3, 16), Error);  // misaligned
  EXPECT_EQ(arena.descriptor_count(arena.range(kMiB, 2 * kMiB + 100)), 3u);
  EXPECT_EQ(arena.descriptor_count(arena.range(256, 256)), 1u);

  const auto pieces = arena.pieces(kMiB - 10, kMiB + 20);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].chunk, 0u);
  EXPECT_EQ(pieces[0].offset, kMiB - 10);
  EXPECT_EQ(pieces[0].size, 10u);
  EXPECT_EQ(pieces[1].chunk, 1u);
  EXPECT_EQ(pieces[1].size, kMiB);
  EXPECT_EQ(pieces[2].chunk, 2u);
  EXPECT_EQ(pieces[2].size, 10u);
  EXPECT_EQ(pieces[2].range_offset, kMiB + 10);

  EXPECT_THROW(Arena(device(), 1024, ArenaOptions{ArenaOptions::HostAccess::automatic, 3000}),
               Error);
}

// Exportable arenas (the NCCL engine's in-place all-reduce): each chunk a dedicated allocation
// whose file descriptor another API imports; the arena works as any other.
TEST_F(Memory, ExportableArenaChunksGiveFileDescriptors) {
  ArenaOptions options;
  options.chunk_bytes = 1 * kMiB;
  options.exportable = true;
  if (!device().capabilities().external_memory_fd) {
    EXPECT_THROW(Arena(device(), 2 * kMiB, options), DeviceError);
    GTEST_SKIP() << "the device has no VK_KHR_external_memory_fd";
  }
  Arena arena(device(), 2 * kMiB + 64, options);
  ASSERT_EQ(arena.chunk_count(), 3u);
  for (uint32_t i = 0; i < arena.chunk_count(); ++i) {
    const Buffer& chunk = arena.chunk(i);
    EXPECT_TRUE(chunk.exportable());
    EXPECT_GE(chunk.allocation_size(), chunk.size());
    const int fd = chunk.export_fd();
    ASSERT_GE(fd, 0);
    EXPECT_EQ(fcntl(fd, F_GETFD) >= 0, true) << "not an open descriptor";
    close(fd);
  }
  const std::vector<uint32_t> words = random_words(1000, 7);
  arena.write(kMiB - 2000, bytes_of(words));
  std::vector<uint32_t> back(1000);
  arena.read(kMiB - 2000, writable_bytes_of(back));
  EXPECT_EQ(back, words);
  EXPECT_FALSE(Arena(device(), kMiB).chunk(0).exportable());
  EXPECT_THROW(Arena(device(), kMiB).chunk(0).export_fd(), DeviceError);
}

TEST_F(Memory, DefaultChunkIsTheLargestBindablePowerOfTwo) {
  Arena arena(device(), 4096);
  const uint64_t limit = device().capabilities().buffers.max_storage_buffer_range;
  EXPECT_LE(arena.chunk_bytes(), limit);
  EXPECT_GT(arena.chunk_bytes() * 2, std::min<uint64_t>(limit, 1ull << 62));
}

// Host-side write/read: through the mapping on unified or resizable-BAR memory, else through
// staging copies.
TEST_F(Memory, RoundTripThroughArenaWriteRead) {
  for (auto access : {ArenaOptions::HostAccess::automatic, ArenaOptions::HostAccess::never}) {
    for (uint64_t words : {uint64_t{1}, uint64_t{1000}, (kMiB + 12) / 4}) {
      Arena arena(device(), words * 4 + 64, ArenaOptions{access, 0});
      if (access == ArenaOptions::HostAccess::never) EXPECT_FALSE(arena.host_mapped());
      const auto data = random_words(words, words);
      arena.write(64, bytes_of(data));
      std::vector<uint32_t> back(words, 0xDEADBEEF);
      arena.read(64, writable_bytes_of(back));
      EXPECT_EQ(back, data) << words << " words";
    }
  }
}

// Upload and readback recorded into one command buffer with staging buffers, including a
// range larger than one storage-buffer binding on lavapipe (128 MiB).
TEST_F(Memory, RoundTripThroughRecordedStagingCopies) {
  for (uint64_t bytes : {uint64_t{4}, uint64_t{4000}, 3 * kMiB + 16, 136 * kMiB}) {
    const uint64_t words = bytes / 4;
    Arena arena(device(), bytes + 256, ArenaOptions{ArenaOptions::HostAccess::never, 0});
    StagingBuffer up(device(), bytes);
    StagingBuffer down(device(), bytes, true);
    const auto data = random_words(words, bytes);
    up.write(0, bytes_of(data));
    Recording rec(device(), {false, "round trip " + std::to_string(bytes)});
    const Range range{&arena, 256, bytes};
    rec.upload(up, 0, range);
    rec.download(range, down, 0);
    rec.run();
    EXPECT_EQ(rec.barrier_count(), 1u);  // the download reads what the upload wrote
    std::vector<uint32_t> back(words, 0);
    down.read(0, writable_bytes_of(back));
    EXPECT_TRUE(back == data) << bytes << " bytes differ";
    if (bytes > device().capabilities().buffers.max_storage_buffer_range) {
      EXPECT_GT(arena.chunk_count(), 1u);
    }
  }
}

TEST_F(Memory, BadRangesAreErrors) {
  Arena arena(device(), 1024);
  StagingBuffer staging(device(), 512);
  Recording rec(device());
  EXPECT_THROW(rec.upload(staging, 0, Range{&arena, 768, 512}), Error);  // past the arena
  EXPECT_THROW(rec.upload(staging, 256, Range{&arena, 0, 512}), Error);  // past the staging
  EXPECT_THROW(rec.fill(Range{&arena, 2, 8}, 0), Error);
  EXPECT_THROW(rec.copy(Range{&arena, 0, 512}, Range{&arena, 256, 512}), Error);  // overlap
  std::vector<std::byte> big(2048);
  EXPECT_THROW(arena.write(0, big), Error);
  EXPECT_THROW(staging.write(500, std::span<const std::byte>(big).first(20)), Error);
}

TEST_F(Memory, FillAndCopyAcrossChunks) {
  ArenaOptions options;
  options.chunk_bytes = 64 * 1024;
  Arena arena(device(), 512 * 1024, options);
  Recording rec(device());
  rec.fill(Range{&arena, 0, 256 * 1024}, 0x01020304u);
  rec.copy(Range{&arena, 0, 200 * 1024}, Range{&arena, 300 * 1024 + 8, 200 * 1024});
  rec.run();
  std::vector<uint32_t> back(200 * 1024 / 4);
  arena.read(300 * 1024 + 8, writable_bytes_of(back));
  for (uint32_t v : back) ASSERT_EQ(v, 0x01020304u);
}

}  // namespace
}  // namespace mn::vk
