#include <gtest/gtest.h>

#include <fstream>

#include "vulkan/pipeline.h"
#include "vulkan/pipeline_cache.h"
#include "vulkan_test.h"

namespace mn::vk {
namespace {

using testing::joined;
using testing::temp_cache_dir;
using testing::validated_options;

constexpr const char* kKernel = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer B { float b[]; };
layout(constant_id = 3) const float kScale = 1.0;
void main() { b[gl_GlobalInvocationID.x] *= kScale; }
)";

std::vector<uint32_t> compile_kernel(const Device& device) {
  codegen::CompileOptions options;
  options.name = "scale";
  options.target = codegen::target_env_for(device.capabilities().api_version);
  return codegen::compile_glsl(kKernel, options);
}

KernelInterface interface() {
  KernelInterface k;
  k.buffer_count = 1;
  k.workgroup_size = {32, 1, 1};
  k.specialization = {{3, 0x40000000u}};  // 2.0f
  return k;
}

TEST(PipelineCache, WrittenByOneDeviceAndLoadedByTheNext) {
  const auto dir = temp_cache_dir("pipeline-cache");
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
  std::filesystem::remove_all(dir);
}

TEST(PipelineCache, ForeignOrDamagedFilesAreIgnored) {
  const auto dir = temp_cache_dir("pipeline-cache-bad");
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
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mn::vk
