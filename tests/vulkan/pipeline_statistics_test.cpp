// Kernels' statistics as the driver reports them (VK_KHR_pipeline_executable_properties):
// captured only when asked, carried into a recording's per-dispatch timings.
#include <gtest/gtest.h>

#include <meganeura/error.h>

#include "support/expect_error.h"
#include "support/scoped_env.h"
#include "support/scratch_dir.h"
#include "vulkan/arena.h"
#include "vulkan/features.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"
#include "vulkan_test.h"

namespace mn::vk {
namespace {

using testing::joined;
using testing::validated_options;

constexpr const char* kDouble = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer B { float b[]; };
void main() { b[gl_GlobalInvocationID.x] *= 2.0; }
)";

// One dispatch with a timestamp after it: its timing and the pipeline's statistics.
std::pair<OpTiming, std::string> timed_dispatch(Device& device) {
  KernelInterface k;
  k.buffer_count = 1;
  k.workgroup_size = {32, 1, 1};
  Pipeline pipeline(device, testing::compile_for(device, kDouble, "double"), k, "double");
  Arena arena(device, 256);
  Recording rec(device, {true, "statistics"});
  Dispatch d;
  d.pipeline = &pipeline;
  d.buffers = {{arena.range(0, 128)}};
  rec.dispatch(std::move(d));
  rec.run();
  EXPECT_EQ(rec.timings().size(), 1u);
  return {rec.timings().at(0), pipeline.statistics_line()};
}

bool offers_statistics(const std::filesystem::path& cache) {
  Device device(validated_options(cache));
  const ExtensionList extensions(device.physical_device());
  return extensions.has(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
}

// Where the driver offers statistics (NVIDIA, AMD, Mesa's GPU drivers), every dispatch's timing
// carries its kernel's; where it does not (Debian 12's lavapipe), asking is an error naming the
// device and the extension.
TEST(PipelineStatistics, CapturedWhenAskedAndCarriedIntoTimings) {
  const test::ScratchDir scratch("pipeline-statistics");
  DeviceOptions options = validated_options(scratch.path());
  options.pipeline_statistics = true;
  if (!offers_statistics(scratch.path())) {
    mn::expect_error<DeviceError>([&] { Device device(options); },
                                  {"MN_PIPELINE_STATISTICS", "does not offer",
                                   VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME});
    return;
  }
  Device device(options);
  ASSERT_TRUE(device.pipeline_statistics());
  const auto [timing, line] = timed_dispatch(device);
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(timing.label, "double");
  EXPECT_EQ(timing.statistics, line);
  EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
}

TEST(PipelineStatistics, NoneUnlessAsked) {
  const test::ScratchDir scratch("pipeline-statistics-off");
  mn::testing::ScopedEnv env("MN_PIPELINE_STATISTICS", nullptr);
  Device device(validated_options(scratch.path()));
  EXPECT_FALSE(device.pipeline_statistics());
  const auto [timing, line] = timed_dispatch(device);
  EXPECT_TRUE(line.empty());
  EXPECT_TRUE(timing.statistics.empty());
  EXPECT_EQ(device.validation_message_count(), 0u) << joined(device.validation_messages());
}

TEST(PipelineStatistics, TheSwitchFromTheEnvironment) {
  const test::ScratchDir scratch("pipeline-statistics-env");
  if (offers_statistics(scratch.path())) {
    mn::testing::ScopedEnv env("MN_PIPELINE_STATISTICS", "1");
    Device device(validated_options(scratch.path()));
    EXPECT_TRUE(device.pipeline_statistics());
  }
  mn::testing::ScopedEnv env("MN_PIPELINE_STATISTICS", "yes");
  mn::expect_error<Error>([&] { Device device(validated_options(scratch.path())); },
                          {"MN_PIPELINE_STATISTICS", "yes"});
}

}  // namespace
}  // namespace mn::vk
