#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "support/scratch_dir.h"
#include "vulkan/arena.h"
#include "vulkan/pipeline.h"
#include "vulkan/pipeline_cache.h"
#include "vulkan/recording.h"
#include "vulkan_test.h"

namespace mn::vk {
namespace {

using testing::joined;
using testing::validated_options;

constexpr const char* kKernel = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer B { float b[]; };
layout(constant_id = 3) const float kScale = 1.0;
void main() { b[gl_GlobalInvocationID.x] *= kScale; }
)";

std::vector<uint32_t> compile_kernel(const Device& device) {
  return testing::compile_for(device, kKernel, "scale");
}

KernelInterface interface() {
  KernelInterface k;
  k.buffer_count = 1;
  k.workgroup_size = {32, 1, 1};
  k.specialization = {{3, 0x40000000u}};  // 2.0f
  return k;
}

TEST(PipelineCache, WrittenByOneDeviceAndLoadedByTheNext) {
  const test::ScratchDir scratch("pipeline-cache");
  const std::filesystem::path& dir = scratch.path();
  std::filesystem::path file;
  {
    Device device(validated_options(dir));
    ASSERT_NE(device.pipeline_cache(), nullptr);
    file = device.pipeline_cache()->file();
    EXPECT_EQ(file.parent_path(), dir / "pipelines");
    EXPECT_EQ(device.pipeline_cache()->loaded_bytes(), 0u);
    EXPECT_FALSE(std::filesystem::exists(file));
    Pipeline pipeline(device, compile_kernel(device), interface(), "scale");
    EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
  }  // the device saves its cache when destroyed
  ASSERT_TRUE(std::filesystem::exists(file));
  const auto size = std::filesystem::file_size(file);
  EXPECT_GE(size, sizeof(VkPipelineCacheHeaderVersionOne));
  {
    Device device(validated_options(dir));
    PipelineCache* cache = device.pipeline_cache();
    ASSERT_NE(cache, nullptr);
    EXPECT_EQ(cache->file(), file);
    EXPECT_EQ(cache->loaded_bytes(), size);
    EXPECT_FALSE(cache->rejected_file());
    Pipeline pipeline(device, compile_kernel(device), interface(), "scale");
    // Drivers that keep compiled pipelines (not lavapipe) report a hit.
    if (size > sizeof(VkPipelineCacheHeaderVersionOne) &&
        device.capabilities().pipeline_creation_feedback) {
      RecordProperty("cache_hit", pipeline.cache_hit() ? "yes" : "no");
    }
    EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
  }
}

TEST(PipelineCache, ForeignOrDamagedFilesAreIgnored) {
  const test::ScratchDir scratch("pipeline-cache-bad");
  const std::filesystem::path& dir = scratch.path();
  std::filesystem::path file;
  {
    Device device(validated_options(dir));
    file = device.pipeline_cache()->file();
  }
  std::filesystem::create_directories(file.parent_path());
  {
    std::ofstream out(file, std::ios::binary);
    out << "this is not a pipeline cache written by any driver, but it is long enough";
  }
  {
    Device device(validated_options(dir));
    EXPECT_TRUE(device.pipeline_cache()->rejected_file());
    EXPECT_EQ(device.pipeline_cache()->loaded_bytes(), 0u);
    Pipeline pipeline(device, compile_kernel(device), interface(), "scale");
    EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
  }
  // Replaced by a valid cache.
  {
    Device device(validated_options(dir));
    EXPECT_FALSE(device.pipeline_cache()->rejected_file());
    EXPECT_GT(device.pipeline_cache()->loaded_bytes(), 0u);
  }
  auto options = validated_options(dir);
  options.persistent_pipeline_cache = false;
  Device without(options);
  EXPECT_EQ(without.pipeline_cache(), nullptr);
  Pipeline pipeline(without, compile_kernel(without), interface(), "scale");
  EXPECT_EQ(without.validation_message_count(), 0u) << joined(without.validation_messages());
}

std::vector<char> read_all(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::filesystem::path& file, const std::vector<char>& bytes) {
  std::ofstream(file, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs the scale kernel over 64 ones: every element must become 2.
void expect_pipeline_works(Device& device) {
  Pipeline pipeline(device, compile_kernel(device), interface(), "scale");
  const std::vector<float> ones(64, 1.0f);
  Arena arena(device, 256);
  arena.write(0, testing::bytes_of(ones));
  Recording rec(device, {false, "scale"});
  Dispatch d;
  d.pipeline = &pipeline;
  d.buffers = {{arena.range(0, 256)}};
  d.groups = {2, 1, 1};
  rec.dispatch(std::move(d));
  rec.run();
  std::vector<float> out(64);
  arena.read(0, testing::writable_bytes_of(out));
  for (float v : out) ASSERT_EQ(v, 2.0f);
  EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
}

// A file that passes our header check (this device's vendor, device and cache UUID) but whose
// body is damaged: cut short, overwritten, or followed by junk. The driver takes it or refuses
// it (then we start empty); either way pipelines build and compute, and the file is replaced
// by the driver's own data when the device closes.
TEST(PipelineCache, ValidHeaderWithDamagedBody) {
  const test::ScratchDir dir("pipeline-cache-body");
  std::filesystem::path file;
  {
    Device device(validated_options(dir.path()));
    file = device.pipeline_cache()->file();
    Pipeline pipeline(device, compile_kernel(device), interface(), "scale");
  }
  const std::vector<char> good = read_all(file);
  const size_t header = sizeof(VkPipelineCacheHeaderVersionOne);
  ASSERT_GE(good.size(), header);
  std::vector<std::vector<char>> damaged;
  std::vector<char> junk = good;
  for (size_t i = header; i < junk.size(); ++i) junk[i] = static_cast<char>(~junk[i]);
  damaged.push_back(junk);
  std::vector<char> longer = good;
  for (int i = 0; i < 4096; ++i) longer.push_back(static_cast<char>(i * 37));
  damaged.push_back(longer);
  if (good.size() > header + 1)
    damaged.emplace_back(good.begin(), good.begin() + (good.size() + header) / 2);
  for (size_t k = 0; k < damaged.size(); ++k) {
    SCOPED_TRACE("damage " + std::to_string(k));
    write_all(file, damaged[k]);
    {
      Device device(validated_options(dir.path()));
      PipelineCache* cache = device.pipeline_cache();
      ASSERT_NE(cache, nullptr);
      EXPECT_EQ(cache->rejected_file(), cache->loaded_bytes() == 0);
      expect_pipeline_works(device);
      cache->mark_dirty();
    }
    Device next(validated_options(dir.path()));
    EXPECT_FALSE(next.pipeline_cache()->rejected_file());
    expect_pipeline_works(next);
  }
}

}  // namespace
}  // namespace mn::vk
